"""What a cell's load search established about its SLO capacity: bracketed, a lower bound, an upper bound, or nothing.

The contract: :func:`capacity_status` reads one :class:`~infermeter.study.cells.CellResult` and says
what its steps support, so the decision card, the findings and the pricing quote the same thing:

- ``bracketed``: a load met the SLO (``low`` req/s) and the next load above it missed (``high``):
  the SLO edge lies in ``[low, high)``; ``precision = high / low - 1``;
- ``lower_bound``: the highest load tried met the SLO (``low``): capacity is at least that, the
  cost per unit at most the figure shown;
- ``upper_bound``: every load of the workload tried missed the SLO (the lowest of them is
  ``high``): the configuration fails the SLO at this workload; ``closest`` is the step that came
  nearest (the smallest worst limit / observed ratio). A one-at-a-time step that met the SLO does
  not count as a load: it ran the first requests of the stream alone (for chat, first turns with
  a fraction of the later turns' context), not the workload the rates ran;
- ``none``: the cell has no latency-judged load steps (a fixed-rate or closed-loop-only plan, or
  no figures).

Only ``bracketed`` and ``lower_bound`` cells are priced and ranked. When the cell's capacity
block carries the load search's own verdict (``status`` with ``low`` / ``high``), that is used
as given; an ``upper_bound`` from the search gets its ``closest`` step from the cell's steps::

    st = capacity_status(cell)
    st.status, st.low, st.high, st.text()
    ('bracketed', 1.87, 1.96, 'SLO edge bracketed within 4.6% (met at 1.87 req/s, missed at 1.96)')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infermeter.study.cells import CellResult

STATUSES = ("bracketed", "lower_bound", "upper_bound", "none")


@dataclass(frozen=True)
class CapacityStatus:
    status: str  # one of STATUSES
    low: float | None = None  # req/s: the highest load meeting the SLO
    high: float | None = None  # req/s: the lowest load above it (or, upper_bound: the lowest load tried) missing it
    closest: dict[str, Any] | None = None  # upper_bound: the step that came closest (its steps entry)

    @property
    def ranked(self) -> bool:
        """Whether the cell has a capacity the decision may price (a load of this workload met the SLO)."""
        return self.status in ("bracketed", "lower_bound")

    @property
    def precision(self) -> float | None:
        return self.high / self.low - 1 if self.status == "bracketed" and self.low and self.high else None

    def text(self) -> str:
        """What the search established, in one clause (figures at 3 significant figures)."""
        from infermeter.study.matrix import fmt_sig

        if self.status == "bracketed":
            return (f"SLO edge bracketed within {self.precision:.1%} (met at {fmt_sig(self.low)} req/s, missed at "
                    f"{fmt_sig(self.high)})")
        if self.status == "lower_bound":
            return (f"a lower bound: the highest load tried, {fmt_sig(self.low)} req/s, met the SLO, so capacity is at "
                    "least that and the cost per unit at most the figure shown")
        if self.status == "upper_bound":
            return "fails the SLO at this workload: " + closest_text(self)
        return "no load step judged against the SLO"


def closest_text(st: CapacityStatus) -> str:
    """``"every load tried missed; closest at 0.0024 req/s (TTFT p95 690 ms > 500)"``."""
    from infermeter.study.matrix import fmt_sig

    c = st.closest or {}
    rate = c.get("offered_rate") or c.get("request_throughput")
    why = "; ".join(c.get("slo_failures") or [])
    where = f"closest at {fmt_sig(rate)} req/s" if rate else "closest"
    low = f" (the lowest load tried was {fmt_sig(st.high)} req/s)" if st.high and st.high != rate else ""
    return f"every load tried missed the SLO; {where}" + (f": {why}" if why else "") + low


def _miss_ratio(step: dict[str, Any], limits: dict[str, float], pct: str) -> float:
    """How far a step is from the SLO: its worst observed / limit (inf when unknown, or when it missed for more
    than a latency limit: failed or unfinished requests, saturation)."""
    if any(not any(str(w).startswith(k) for k in limits) for w in step.get("slo_failures") or []):
        return float("inf")
    worst = 0.0
    for k, lim in limits.items():
        v = step.get(f"{k}_{pct}")
        if v is None:
            return float("inf")
        worst = max(worst, float(v) / lim)
    return worst if limits else float("inf")


def capacity_status(cell: CellResult, limits: dict[str, float] | None = None, percentile: str = "p95") -> CapacityStatus:
    """What the cell's steps establish about its SLO capacity (see the module docstring)."""
    cap = cell.capacity or {}
    searched = cap.get("status") if isinstance(cap.get("status"), str) and cap["status"] in STATUSES else None
    if searched and searched != "upper_bound":  # the load search's own verdict
        return CapacityStatus(searched, cap.get("low"), cap.get("high"))
    if getattr(cell, "unavailable", None):
        return CapacityStatus("none")
    if not searched and cell.capacity and cap.get("kind") != "synchronous" and (cap.get("requests_per_s") or 0) > 0:
        low = cap.get("knee_low_rps") or cap.get("offered_rate") or cap.get("requests_per_s")
        high = cap.get("knee_high_rps")
        return CapacityStatus("bracketed" if high is not None else "lower_bound", low, high)
    loads = [s for s in getattr(cell, "steps", []) if s.get("kind") in ("rate", "saturation")]
    if not loads:
        return CapacityStatus("none")
    opened = [s for s in loads if s.get("kind") == "rate"] or loads  # a closed loop is not a load at a rate
    rates = [s.get("offered_rate") or s.get("request_throughput") for s in opened]
    lowest = min((float(r) for r in rates if r), default=None)
    pct = percentile.removeprefix("p")
    pct_key = f"p{pct}" if pct in ("50", "95", "99") else "p95"
    closest = min(opened, key=lambda s: (_miss_ratio(s, limits or {}, pct_key),
                                        s.get("offered_rate") or s.get("request_throughput") or 0.0))
    return CapacityStatus("upper_bound", None, lowest, closest)


def status_of(cell: CellResult, study: Any) -> CapacityStatus:
    """:func:`capacity_status` under ``study``'s SLO (the one accessor the study's modules call)."""
    return capacity_status(cell, study.slo.limits, study.slo.percentile)
