"""The one SLO judge: does a run (a sweep step, a study cell's load point) meet its SLO?

``SloJudge(slo, percentile, max_error_rate)(summary)`` answers ``(meets, reasons)``, judged on
the *offered* work, so an overloaded step can never meet an SLO::

    >>> judge = SloJudge(slo={"ttft_ms": 500}, percentile=99.0)
    >>> judge(summary)                     # doctest: +SKIP
    (False, ['saturated: the server could not keep up ...', 'ttft_ms p99 ...'])

A step meets the SLO when every rule holds:

- the run is valid (the client kept its schedule) and not saturated;
- failed plus unfinished requests (cancelled at the end, never sent) are at most
  ``max_error_rate`` of the scheduled ones;
- for each limit, the chosen percentile *over every scheduled request* is within it: requests
  that did not complete count as missing every bound, so the percentile q of offered work is the
  percentile q / (completed share) of the completed requests; the judge takes the nearest
  reported percentile at or above that level (conservative), and a percentile resting on too
  few samples (``results.MIN_SAMPLES``) cannot show the SLO is met. TTFT and E2E are measured
  from the *intended* send (queueing counts); TPOT as defined in docs/metrics.md, and a run
  whose outputs are all one token long has no TPOT to break.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermeter.analysis.results import PERCENTILE_LABELS, PERCENTILES, Distribution, Summary

# SLO key -> the summary distribution it is judged on
SLO_DISTRIBUTIONS = {"ttft_ms": "ttft_from_intended_ms", "e2e_ms": "e2e_from_intended_ms", "tpot_ms": "tpot_ms",
                     "itl_ms": "itl_ms"}
PERCENTILE_KEYS = {v: k for k, v in PERCENTILES.items()}  # 99.0 -> "p99"


def percentile_key(p: float | str) -> str:
    """99 / 99.0 / "99" / "p99" / "p99.9" / "p999" -> the summary key ("p99", "p999"); ValueError otherwise."""
    text = p.strip().lower().removeprefix("p") if isinstance(p, str) else p
    text = "99.9" if text == "999" else text
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{p!r}: use one of 50, 90, 95, 99, 99.9") from None
    if value not in PERCENTILE_KEYS:
        raise ValueError(f"{value:g}: use one of 50, 90, 95, 99, 99.9")
    return PERCENTILE_KEYS[value]


@dataclass(frozen=True)
class SloJudge:
    """Decides whether a summary meets the SLO; see the module docstring."""

    slo: dict[str, float] = field(default_factory=dict)  # {"ttft_ms": 500, ...}
    percentile: float | str = 99.0  # 99, 99.9, "p95" ...; stored as the number
    max_error_rate: float = 0.01

    def __post_init__(self) -> None:
        key = percentile_key(self.percentile)
        object.__setattr__(self, "percentile", PERCENTILES[key])
        for k in self.slo:
            if k not in SLO_DISTRIBUTIONS:
                raise ValueError(f"SLO key {k!r}: use one of {', '.join(SLO_DISTRIBUTIONS)}")

    @property
    def key(self) -> str:
        return percentile_key(self.percentile)

    def __call__(self, s: Summary) -> tuple[bool | None, list[str]]:
        if not self.slo:
            return None, []
        why = self.health(s)
        scheduled = s.scheduled or (s.completed + s.failed + s.unfinished)
        done = s.completed / scheduled if scheduled else 0.0
        label = PERCENTILE_LABELS[self.key]
        for key, limit in self.slo.items():
            d = s.distribution(SLO_DISTRIBUTIONS[key])
            if key == "tpot_ms" and d.count == 0 and s.completed:
                continue  # one-token outputs: no TPOT to break
            value, used = offered_percentile(d, PERCENTILES[self.key], done)
            if value is None:
                reason = d.missing_reason(used) if used else None
                why.append(f"{key} {label} over offered work: " + (reason or f"{done:.1%} of the scheduled requests completed"))
            elif value > limit:
                via = "" if used == self.key else f" (= completed {PERCENTILE_LABELS.get(used or '', used)}, {done:.1%} completed)"
                why.append(f"{key} {label} {value:,.1f} > {limit:g}{via}")
        return not why, why

    def health(self, s: Summary) -> list[str]:
        """The rules that hold whatever the latency limits: valid, not saturated, something
        completed, failed plus unfinished within ``max_error_rate``."""
        why = [f"invalid: {r}" for r in s.invalid_reasons]
        if s.saturated:
            why.append("saturated: " + "; ".join(s.saturation.evidence))
        scheduled = s.scheduled or (s.completed + s.failed + s.unfinished)
        if not s.completed:
            why.append("no request completed")
        bad = (s.failed + s.unfinished) / scheduled if scheduled else 0.0
        if bad > self.max_error_rate:
            why.append(f"failed or unfinished {bad:.1%} of {scheduled} scheduled > {self.max_error_rate:.1%}")
        return why

    def describe(self) -> dict[str, Any]:
        return {"limits": dict(self.slo), "percentile": self.percentile, "max_error_rate": self.max_error_rate}


def offered_percentile(d: Distribution, q: float, completed_share: float) -> tuple[float | None, str | None]:
    """The q-th percentile over offered work from the completed requests' distribution, and the
    completed-request percentile key it used (None when not enough of the work completed)."""
    if completed_share <= 0:
        return None, None
    level = q / completed_share
    if level > 100.0 + 1e-9:
        return None, None
    for key, p in sorted(PERCENTILES.items(), key=lambda kv: kv[1]):
        if p >= level - 1e-9:
            return d.get(key), key
    return d.max, "max"
