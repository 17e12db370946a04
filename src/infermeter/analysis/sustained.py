"""Sustained capacity: the one definition of "the requests/s a deployment sustains", used by
``study``, ``capacity``, ``cost``, ``find-max`` and sweeps (docs/metrics.md, "Sustained capacity").

A step's **sustained rate** is what the server served *while the load ran*, not counting the
drain after the last send (a run's ``request_throughput`` divides by a duration that includes
the drain, so a 240-request step understates its rate by the drain's share):

- open loop, not saturated: ``achieved_rate x completed / sent`` (``sent = completed + failed +
  cancelled``): the arrivals the server kept up with, times the share of them that succeeded;
- open loop, saturated: ``saturation.completion_rate`` (completions per second between the edges
  of the run, ``analysis.accumulator``): what it could do, since it did not keep up;
- closed loop: the steady-window rate when the step carries one (a study's saturation step,
  ``study.saturation.steady_throughput``), else ``request_throughput``.

Token rates follow the request rate (``x mean tokens per successful request``).

The **sustained capacity** of a run directory (:func:`capacity_of`):

- a search (a study cell, ``--load find-max``, a sweep): the sustained rate of its capacity step
  (the step the search names, else the step meeting the SLO with the highest sustained rate);
- one run with an SLO: its sustained goodput, ``sustained rate x goodput / request_throughput``
  (the requests/s meeting every bound, over the load rather than the drain);
- one run without an SLO: its sustained rate.

    >>> sustained_rate({"offered_rate": 2.0, "achieved_rate": 2.0, "completed": 98, "failed": 2})
    (1.96, 'arrival rate x success share')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infermeter.analysis.results import Summary

ARRIVAL = "arrival rate x success share"
COMPLETION = "completion rate (saturated: the server did not keep up)"
STEADY = "steady window"

# What the rate functions read: a row of a summary.json's ``steps`` list (a plan step: the step's summary plus
# the plan columns; a study step: its own rates and ``throughput_method``), or a whole summary.json object, as JSON.
# Not a Summary: a study step row has no Summary shape. A Summary is read as ``summary.to_json()``.
Row = Mapping[str, Any]
WHOLE_RUN = "whole run (successful requests / duration)"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def open_loop_rate(send_rate: float, completed: int, failed: int, cancelled: int = 0) -> float:
    """``send_rate x completed / sent``: the open-loop sustained rate (see the module docstring)."""
    sent = completed + failed + cancelled
    return send_rate * completed / sent if sent > 0 else 0.0


def _open_loop(s: Row) -> bool:
    load = s.get("load")
    if isinstance(load, Mapping) and load.get("open_loop") is not None:
        return bool(load["open_loop"])
    return _num(s.get("offered_rate")) is not None or _num(s.get("scheduled_rate")) is not None


def sustained_rate(s: Row) -> tuple[float | None, str]:
    """The sustained rate (requests/s) of one step row or summary.json object, and how it was measured."""
    given = _num(s.get("sustained_rps"))
    if given is not None:
        return given, str(s.get("sustained_basis") or ARRIVAL)
    completed = int(_num(s.get("completed")) or 0)
    failed = int(_num(s.get("failed")) or 0)
    cancelled = int(_num(s.get("cancelled")) or 0)
    if _open_loop(s):
        sat = s.get("saturation")
        completion = _num(sat.get("completion_rate")) if isinstance(sat, Mapping) else None
        if s.get("saturated") and completion is not None:
            return completion, COMPLETION
        achieved = _num(s.get("achieved_rate"))
        if achieved is not None and completed + failed + cancelled > 0:
            return open_loop_rate(achieved, completed, failed, cancelled), ARRIVAL
    method = str(s.get("throughput_method") or "")  # a study step's rate says how it was measured
    return _num(s.get("request_throughput")), method if method and method != "whole run" else WHOLE_RUN


def sustained_throughput(s: Row) -> dict[str, float | None]:
    """Request and token rates at the sustained rate (tokens/s scaled with the request rate)."""
    rps = sustained_rate(s)[0]
    whole = _num(s.get("request_throughput"))
    scale = rps / whole if rps is not None and whole else 1.0

    def tok(key: str) -> float | None:
        v = _num(s.get(key))
        return None if v is None else v * scale

    return {"requests_per_s": rps, "input_tokens_per_s": tok("input_token_throughput"),
            "output_tokens_per_s": tok("output_token_throughput"), "total_tokens_per_s": tok("total_token_throughput")}


@dataclass(frozen=True)
class Capacity:
    """A run directory's sustained capacity (see the module docstring)."""

    requests_per_s: float | None
    basis: str  # e.g. "sustained capacity under the SLO (step 7, arrival rate x success share)"
    step: int | None = None  # the step it comes from (a search), else None
    entry: Mapping[str, Any] | None = None  # that step's entry (or the run summary)
    status: str | None = None  # a search's bracket status (bracketed | lower_bound | upper_bound), when known


def capacity_step(summary: Summary, steps: Sequence[Any]) -> int | None:
    """The step a search names as its capacity step (``capacity.step``), else the step meeting the SLO
    with the highest sustained rate (ties: the earlier); None when no step met it."""
    cap = summary.get("capacity")
    named = cap.get("step") if isinstance(cap, Mapping) else None
    if isinstance(named, int) and not isinstance(named, bool) and 0 <= named < len(steps) and isinstance(steps[named], Mapping):
        return named
    best: tuple[float, int] | None = None
    for k, e in enumerate(steps):
        if isinstance(e, Mapping) and e.get("meets_slo") is True:
            rate = sustained_rate(e)[0] or 0.0
            if best is None or rate > best[0]:
                best = (rate, k)
    return None if best is None else best[1]


def capacity_of(summary: Summary, entry: Mapping[str, Any] | None = None,
                step: int | None = None) -> Capacity:
    """The sustained capacity of a run directory's ``summary.json`` (a search: of its ``entry``, the step
    :func:`capacity_step` picked, index ``step``)."""
    cap = summary.get("capacity")
    status = cap.get("status") if isinstance(cap, Mapping) else None
    if entry is not None:
        rps, how = sustained_rate(entry)
        where = f"step {step}, " if step is not None else ""
        return Capacity(rps, f"sustained capacity under the SLO ({where}{how})", step, entry,
                        str(status) if status else None)
    row = summary.to_json()
    rps, how = sustained_rate(row)
    good, whole = _num(summary.goodput), _num(summary.request_throughput)
    if good is not None and rps is not None and whole:  # goodput is written only with an SLO
        return Capacity(rps * good / whole, f"sustained goodput (requests/s meeting the SLO; {how})", None, row)
    return Capacity(rps, f"sustained rate (no SLO; {how})", None, row)
