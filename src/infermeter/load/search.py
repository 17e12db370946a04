"""``--load find-max``: the highest rate (or concurrency) that still meets the SLO.

Two phases over one dimension, ``rate`` (open loop, req/s) or ``concurrency``
(closed loop, streams):

1. *bracket*: from ``start`` double until a step breaks the SLO (or halve
   until one meets it, at most 4 times); ``max_value`` caps the doubling;
2. *bisect*: measure the middle of [highest good, lowest bad] until the
   bracket is narrow enough — for rates ``hi - lo <= resolution * lo``
   (default 5%), for concurrency ``hi - lo <= max(1, resolution * lo)`` —
   or ``max_steps`` steps have run.

Without ``start`` a rate search first measures one stream (``synchronous``)
and starts at its request rate; a concurrency search starts at 1. The plan
returns ``{"capacity": {...}}``: the value, the bracket ``[lo, hi]`` it is
known within, whether it converged, and the step it comes from::

    >>> gen = FindMaxPlan(dimension="concurrency", max_steps=8).steps()
    >>> [s.concurrency for s in _drive(gen, lambda c: c <= 4)]
    [1, 2, 4, 8, 6, 5]

A step the client could not apply (schedule lag, send rate, cap held: ``analysis.verdict``) is
not an SLO miss: the driver (``load.steps.run_plan``) runs it once more, and when the retry is
client-limited too the search stops there, with ``capacity.stopped`` saying why (and
``converged: false``), the bracket being what was established before it.

Monotonicity is assumed (more load never meets an SLO that less load broke);
noise near the edge can make the answer one resolution step off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency
from infermeter.load.steps import ClientLimited, Step, StepGen

MAX_HALVINGS = 4


@dataclass
class _State:
    """What the search has established so far (kept when it is stopped)."""

    lo: float | None = None
    hi: float | None = None
    good: dict[float, int] = field(default_factory=dict)


class FindMaxPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["find-max"] = "find-max"
    dimension: Literal["rate", "concurrency"] = "rate"
    start: float | None = Field(None, gt=0, description="first value tried (default: synchronous rate, or 1)")
    max_value: float | None = Field(None, gt=0, description="never try more than this")
    resolution: float = Field(0.05, gt=0, lt=1, description="stop when the bracket is this narrow (relative)")
    max_steps: int = Field(12, ge=2)
    arrival: Literal["constant", "poisson"] = "constant"

    def describe(self) -> str:
        return f"find-max on {self.dimension} (resolution {self.resolution:.0%}, at most {self.max_steps} steps)"

    def _step(self, x: float, name: str) -> Step:
        if self.dimension == "concurrency":
            return Step(ConstantConcurrency(concurrency=int(x)), name)
        return Step(ConstantArrivalRate(rate_per_s=x, arrival=self.arrival), name)

    def _narrow(self, lo: float, hi: float) -> bool:
        if self.dimension == "concurrency":
            return hi - lo <= max(1.0, self.resolution * lo)
        return hi - lo <= self.resolution * lo

    def _mid(self, lo: float, hi: float) -> float:
        return float((lo + hi) // 2) if self.dimension == "concurrency" else (lo + hi) / 2

    def steps(self) -> StepGen:
        """The search; a :class:`~infermeter.load.steps.ClientLimited` thrown in (a step the client could
        not apply, twice) ends it with what it established so far and the reason."""
        st = _State()
        try:
            return (yield from self._search(st))
        except ClientLimited as stop:
            return self._result(st.lo, st.hi, st.good, None, stopped=str(stop))

    def _search(self, st: _State) -> StepGen:
        n = 0
        good = st.good  # value -> step index
        if self.dimension == "concurrency":
            x = float(max(1, int(self.start or 1)))
        elif self.start is not None:
            x = float(self.start)
        else:  # a rate search starts at the synchronous rate
            first = yield Step(ConstantConcurrency(concurrency=1), "synchronous")
            n += 1
            sync_rate = first.get("request_throughput") or None
            if not sync_rate:
                return self._result(None, None, good, "the synchronous step completed nothing")
            x = float(sync_rate)
        if self.max_value is not None:
            x = min(x, self.max_value)
        halvings = 0
        while n < self.max_steps:  # bracket
            res = yield self._step(x, "bracket")
            n += 1
            if res.get("meets_slo"):
                st.lo, good[x] = x, n - 1
                if st.hi is not None or (self.max_value is not None and x >= self.max_value):
                    break
                nxt = x * 2
                x = min(nxt, self.max_value) if self.max_value is not None else nxt
            else:
                st.hi = x
                if st.lo is not None:
                    break
                halvings += 1
                if halvings > MAX_HALVINGS or (self.dimension == "concurrency" and x <= 1):
                    break
                x = float(max(1, int(x // 2))) if self.dimension == "concurrency" else x / 2
        while st.lo is not None and st.hi is not None and n < self.max_steps and not self._narrow(st.lo, st.hi):
            x = self._mid(st.lo, st.hi)
            if x <= st.lo or x >= st.hi:
                break
            res = yield self._step(x, "bisect")
            n += 1
            if res.get("meets_slo"):
                st.lo, good[x] = x, n - 1
            else:
                st.hi = x
        return self._result(st.lo, st.hi, good, None)

    def _result(self, lo: float | None, hi: float | None, good: dict[float, int], note: str | None,
                stopped: str | None = None) -> dict[str, Any]:
        converged = stopped is None and lo is not None and (
            hi is None and self.max_value is not None and lo >= self.max_value or hi is not None and self._narrow(lo, hi))
        def as_value(x: float | None) -> float | int | None:
            return int(x) if x is not None and self.dimension == "concurrency" else x

        cap: dict[str, Any] = {
            "dimension": self.dimension, self.dimension: as_value(lo), "bracket": [as_value(lo), as_value(hi)],
            "converged": bool(converged),
            "resolution": None if lo is None or hi is None else (hi - lo) / lo,
            "step": None if lo is None else good[lo],
        }
        if stopped is not None:
            cap["note"] = stopped
            cap["stopped"] = stopped
        elif lo is None:
            cap["note"] = note or "no step met the SLO"
        elif hi is None:
            cap["note"] = ("reached --search-max without breaking the SLO" if self.max_value is not None
                           else "ran out of steps before the SLO broke")
        return {"capacity": cap, "capacity_step": cap["step"]}


def _drive(gen: StepGen, meets: Callable[[float], bool]) -> list[Step]:
    """Run a plan against a pure predicate (doctests, unit tests)."""
    out = [next(gen)]
    try:
        while True:
            s = out[-1]
            value = s.concurrency if s.concurrency is not None and s.name != "synchronous" else s.offered_rate
            if s.name == "synchronous":
                res = {"request_throughput": 1.0, "meets_slo": True}
            else:
                res = {"meets_slo": meets(float(value or 0))}
            out.append(gen.send(res))
    except StopIteration:
        return out
