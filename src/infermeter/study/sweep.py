"""The load steps of one study cell, planned one at a time from the results so far.

:func:`plan_steps` is a generator: it yields the next :class:`StepSpec`, receives the
:class:`StepOutcome` of running it, and decides the next step (so the same plan drives the twin
and a measured endpoint)::

    gen = plan_steps(plan, slo, default_concurrency=256)
    spec = next(gen)
    while True:
        outcome = run(spec)                  # simulate or measure, then judge
        try:
            spec = gen.send(outcome)
        except StopIteration:
            break

A ``sweep`` runs: one request at a time (``synchronous``), a closed loop at the saturation
concurrency (``saturation``: its throughput is the steady-window figure of
:mod:`infermeter.study.saturation`), open-loop rates at ``rate_fractions`` of the saturation
request rate (``rate``), then ``refine`` bisection steps between the highest fraction meeting
the SLO and the lowest missing it, until that bracket is narrower than ``precision`` (relative to
the rate meeting the SLO; :func:`knee_bracket` reports it for the capacity). Open-loop steps
realize their label: with ``exact_rate`` each step's schedule is scaled to its exact target mean
(:class:`~infermeter.load.shapes.ConstantArrivalRate` ``exact_over``), so the offered rate is the
planned one. A synchronous step that fails only for too few samples (a p95 needs 20) does not
stop the search. Whether a step meets the SLO is the one judge's call
(:class:`infermeter.analysis.slo.SloJudge`, shared with ``run --load sweep``): judged on the
offered work, so a saturated step, or one whose requests did not finish, never meets it; with no
latency limits a step "meets" the SLO when the run is sound (valid, not saturated, errors within
``max_error_rate``). :func:`capacity_step` is the step meeting the SLO with the highest request
throughput: "the highest load meeting the SLO".
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from infermeter.analysis.slo import SloJudge
from infermeter.study.config import LoadPlan, Slo
from infermeter.study.saturation import Steady

StepKind = Literal["synchronous", "saturation", "rate"]


@dataclass(frozen=True)
class StepSpec:
    k: int
    kind: StepKind
    requests: int
    warmup: int = 0
    concurrency: int | None = None
    rate: float | None = None
    fraction: float | None = None  # rate as a share of the saturation request rate

    def describe(self) -> str:
        if self.kind == "rate":
            frac = f" ({self.fraction:.3g} x saturation)" if self.fraction is not None else ""
            return f"{self.rate:.4g} req/s{frac}"
        return f"concurrency {self.concurrency}" + (" (one at a time)" if self.kind == "synchronous" else "")


@dataclass(frozen=True)
class StepOutcome:
    spec: StepSpec
    summary: dict[str, Any]
    throughput: Steady | None = None  # steady window (saturation) or arrival rate (open loop)
    meets_slo: bool = False
    slo_failures: tuple[str, ...] = ()
    run_dir: str | None = None

    @property
    def inconclusive(self) -> bool:
        """Missed the SLO only because a percentile had too few samples (not a limit broken)."""
        return bool(self.slo_failures) and all(too_few_samples(w) for w in self.slo_failures)

    def rates(self) -> dict[str, float | None]:
        """Throughput of the step: its steady-window or arrival-rate figure, else the run summary."""
        if self.throughput is not None:
            s = self.throughput
            return {"requests_per_s": s.requests_per_s, "input_tokens_per_s": s.input_tokens_per_s,
                    "output_tokens_per_s": s.output_tokens_per_s, "total_tokens_per_s": s.total_tokens_per_s}
        m = self.summary
        return {"requests_per_s": m.get("request_throughput"), "input_tokens_per_s": m.get("input_token_throughput"),
                "output_tokens_per_s": m.get("output_token_throughput"),
                "total_tokens_per_s": m.get("total_token_throughput")}

    @property
    def offered_rate(self) -> float | None:
        """Open loop: the schedule's realized rate (req/s) when known, else the planned one."""
        if self.spec.kind != "rate":
            return None
        realized = self.throughput.schedule_rate_per_s if self.throughput is not None else None
        return realized if realized is not None else self.spec.rate

    def to_json(self) -> dict[str, Any]:
        """The step's entry in the cell's ``summary.json`` ``steps`` list (sweep layout)."""
        r = self.rates()
        s = self.summary
        return {
            "k": self.spec.k, "dir": f"steps/{self.spec.k}", "step_dir": f"steps/{self.spec.k}", "step": self.spec.kind,
            "kind": self.spec.kind, "describe": self.spec.describe(),
            "concurrency": self.spec.concurrency, "offered_rate": self.offered_rate, "target_rate": self.spec.rate,
            "fraction": self.spec.fraction,
            "requests": self.spec.requests, "meets_slo": self.meets_slo, "slo_failures": list(self.slo_failures),
            "slo_reasons": list(self.slo_failures),
            "request_throughput": r["requests_per_s"], "input_token_throughput": r["input_tokens_per_s"],
            "output_token_throughput": r["output_tokens_per_s"], "total_token_throughput": r["total_tokens_per_s"],
            "throughput_method": self.throughput.method if self.throughput else "whole run",
            "goodput": s.get("goodput"), "error_rate": s.get("error_rate"), "valid": bool(s.get("valid", True)),
            "invalid_reasons": list(s.get("invalid_reasons") or []), "saturated": s.get("saturated"),
            "unfinished": s.get("unfinished"),
            "schedule_rate": self.throughput.schedule_rate_per_s if self.throughput else None,
            "send_rate": self.throughput.send_rate_per_s if self.throughput else None,
            **{f"{k}_p{p}": (s.get(k) or {}).get(f"p{p}") for k in ("ttft_ms", "tpot_ms", "e2e_ms") for p in (50, 95, 99)},
        }


def too_few_samples(reason: str) -> bool:
    """Whether an SLO failure reason says a percentile had too few samples (nothing was broken)."""
    return "needs >=" in reason or reason.endswith("no samples")


def judge(summary: dict[str, Any], slo: Slo, throughput: Steady | None = None) -> tuple[bool, tuple[str, ...]]:
    """(meets the SLO, why not) for one step's summary; see the module docstring."""
    j = SloJudge(slo=slo.limits, percentile=slo.percentile, max_error_rate=slo.max_error_rate)
    ok, why = j(summary) if slo.limits else (None, j.health(summary))
    return (not why) if ok is None else bool(ok), tuple(why)


def plan_steps(plan: LoadPlan, slo: Slo, default_concurrency: int) -> Generator[StepSpec, StepOutcome, None]:
    """Yield step specs; receive each outcome (see the module docstring)."""
    k = 0
    if plan.kind == "rate":
        yield StepSpec(k, "rate", plan.requests, plan.warmup, rate=plan.rate)
        return
    conc = plan.concurrency or default_concurrency
    sat_requests = plan.saturation_requests or 3 * conc
    if plan.kind == "concurrency":
        yield StepSpec(k, "saturation", sat_requests, plan.warmup, concurrency=conc)
        return
    sync = yield StepSpec(k, "synchronous", plan.sync_requests, 0, concurrency=1)
    k += 1
    sat = yield StepSpec(k, "saturation", sat_requests, plan.warmup, concurrency=conc)
    k += 1
    top = sat.rates()["requests_per_s"] or 0.0
    if not top > 0:
        return
    passed: dict[float, bool] = {}
    for f in plan.rate_fractions:
        out = yield StepSpec(k, "rate", plan.requests, plan.warmup, rate=f * top, fraction=f)
        k += 1
        passed[f] = out.meets_slo
    if not slo.limits:
        return  # nothing to search for
    if not sync.meets_slo and not sync.inconclusive and not any(passed.values()):
        return  # the SLO fails even one request at a time: no load meets it
    for _ in range(plan.refine):
        lo, hi = _bracket(passed, sat.meets_slo)
        if hi is None or (lo > 0 and hi / lo - 1 <= plan.precision) or hi - lo < 1e-4:
            return
        mid = (lo + hi) / 2
        out = yield StepSpec(k, "rate", plan.requests, plan.warmup, rate=mid * top, fraction=mid)
        k += 1
        passed[mid] = out.meets_slo


def _bracket(passed: dict[float, bool], saturation_meets: bool) -> tuple[float, float | None]:
    """(highest fraction meeting the SLO or 0, lowest fraction above it missing the SLO or None)."""
    lo = max((f for f, ok in passed.items() if ok), default=0.0)
    above = [f for f, ok in passed.items() if not ok and f > lo]
    if above:
        return lo, min(above)
    return lo, (None if saturation_meets else 1.0)


def capacity_step(outcomes: Sequence[StepOutcome]) -> StepOutcome | None:
    """The step meeting the SLO with the highest request throughput (ties: the earlier step)."""
    ok = [o for o in outcomes if o.meets_slo and (o.rates()["requests_per_s"] or 0) > 0]
    if not ok:
        return None
    return max(ok, key=lambda o: (o.rates()["requests_per_s"] or 0.0, -o.spec.k))


def knee_bracket(outcomes: Sequence[StepOutcome]) -> tuple[float, float | None] | None:
    """(requests/s of the capacity step, lowest offered requests/s above it that missed the SLO) — the
    SLO edge lies between them; None without a capacity step. The upper end is None when nothing
    above the capacity step missed (the closed-loop saturation step met the SLO)."""
    cap = capacity_step(outcomes)
    if cap is None:
        return None
    lo = cap.offered_rate or cap.rates()["requests_per_s"] or 0.0
    missed = [o.offered_rate if o.spec.kind == "rate" else o.rates()["requests_per_s"]
              for o in outcomes if not o.meets_slo and o.spec.kind in ("rate", "saturation")]
    above = [x for x in missed if x is not None and x > lo]
    return lo, (min(above) if above else None)


def saturation_step(outcomes: Sequence[StepOutcome]) -> StepOutcome | None:
    """The closed-loop saturation step, else (fixed-rate plans) the step with the highest throughput."""
    for o in outcomes:
        if o.spec.kind == "saturation":
            return o
    return max(outcomes, key=lambda o: o.rates()["requests_per_s"] or 0.0, default=None)

