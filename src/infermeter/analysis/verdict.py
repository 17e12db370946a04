"""A run judges itself: findings that make it invalid, or worth a warning.

``verdict(facts)`` returns a :class:`Verdict` whose ``invalid_reasons`` go into
``summary.json`` and onto the console. A run is *invalid* when its numbers
cannot be trusted as a measurement of the server under the requested load:

- ``schedule_lag``: open loop, p99 of (sent_at - intended_at) over
  ``LAG_P99_LIMIT_MS`` -> the client fell behind its schedule;
- ``achieved_rate``: open loop, achieved send rate under 95% of the rate this run's schedule
  asked for (its own intended send times, not the mean rate: a Poisson schedule of N requests
  differs from its mean by about 1/sqrt(N));
- ``cap_held``: ``--max-concurrency`` held requests back past their send time;
- ``no_completed``: nothing completed.

Warnings (valid but noteworthy): errors returned, p99 resting on fewer than
100 samples, client CPU near one full core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LAG_P99_LIMIT_MS = 10.0
MIN_RATE_RATIO = 0.95
CAP_HELD_LIMIT_MS = 10.0
CPU_WARN = 0.9


@dataclass
class Verdict:
    invalid_reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons


def verdict(f: dict[str, Any]) -> Verdict:
    """``f`` holds: open_loop, lag_p99_ms, target_rate, achieved_rate, cap_held, completed,
    failed, ttft_count, client_cpu."""
    v = Verdict()
    if f.get("completed", 0) == 0:
        v.invalid_reasons.append("no_completed: no request completed successfully")
    if f.get("open_loop"):
        lag = f.get("lag_p99_ms")
        if lag is not None and lag > LAG_P99_LIMIT_MS:
            v.invalid_reasons.append(
                f"schedule_lag: p99 schedule lag {lag:.1f} ms > {LAG_P99_LIMIT_MS:g} ms (the client fell behind)"
            )
        tr, ar = f.get("target_rate"), f.get("achieved_rate")
        if tr and ar is not None and ar < MIN_RATE_RATIO * tr:
            v.invalid_reasons.append(
                f"achieved_rate: achieved {ar:.2f} req/s < {MIN_RATE_RATIO:.0%} of the scheduled {tr:.2f} req/s"
            )
        held = f.get("cap_held", 0)
        if held:
            v.invalid_reasons.append(
                f"cap_held: --max-concurrency held {held} requests back more than {CAP_HELD_LIMIT_MS:g} ms past their send time"
            )
    failed = f.get("failed", 0)
    if failed:
        v.warnings.append(f"errors: {failed} requests failed")
    n = f.get("ttft_count", 0)
    if 0 < n < 100:
        v.warnings.append(f"few_samples: p99 rests on {n} samples (< 100)")
    cpu = f.get("client_cpu")
    if cpu is not None and cpu > CPU_WARN:
        v.warnings.append(f"client_cpu: the client used {cpu:.0%} of a core; it may be the bottleneck")
    v.warnings.extend(completeness(f.get("run") or {}, f.get("records", 0)))
    return v


def completeness(run: dict[str, Any], records: int) -> list[str]:
    """A measured run without a runtime block never finished (killed): say so, with how far it got."""
    if not run:
        return []
    load = run.get("load") or {}
    planned = (load.get("limits") or {}).get("requests") if isinstance(load, dict) else None
    of = f"; {records} of {planned} requests" if planned else ""
    runtime = run.get("runtime")
    if not runtime and run.get("source", "measured") == "measured" and "load" in run:
        return ["incomplete: the run did not finish (killed?); this summary covers the records on disk" + of]
    if isinstance(runtime, dict) and runtime.get("interrupted"):
        return ["interrupted: stopped before its end" + of]
    return []
