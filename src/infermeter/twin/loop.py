"""The offline event loop: arrivals and step ends on a virtual clock, in one defined order.

Two event kinds exist: an *arrival* (the next request from an :class:`ArrivalSource`)
and a *step end* (the engine's step in flight finishes, and the next one is formed).
The loop pops whichever is earlier; at equal times :func:`arrival_first` decides, and
it is the only place that does. An idle engine woken by an arrival gets a zero-length
step end at that instant, so every request arriving at the same instant joins the
same batch::

    >>> from infermeter.twin.config import EngineConfig
    >>> from infermeter.twin.engine import Engine
    >>> from infermeter.twin.predictor import LinearStepTime
    >>> from infermeter.twin.request import SimRequest
    >>> eng = Engine(LinearStepTime(base_s=0.01, per_token_s=0.0), EngineConfig(), num_blocks=64)
    >>> src = ListSource([SimRequest(rid=i, arrival=0.0, prompt_tokens=16, max_tokens=2) for i in range(2)])
    >>> done = []
    >>> clock = VirtualClock()
    >>> run_virtual(eng, src, done.append, clock)
    0.02
    >>> [(r.rid, r.first_token_at, r.ended_at) for r in done]
    [(0, 0.01, 0.02), (1, 0.01, 0.02)]

The loop owns no queue: the source is ordered by time (a closed-loop source adds
the next request when one finishes, through ``finished``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from infermeter.twin.engine import Engine
from infermeter.twin.request import SimRequest

_INF = math.inf


def arrival_first(t_arrival: float, t_step_end: float) -> bool:
    """The tie-break, defined once: at equal times the arrival is handled before the step end.

    So a request arriving exactly when a step ends is in the queue when the next
    batch is formed (as in vLLM, whose scheduler sees every request added before it runs).
    """
    return t_arrival <= t_step_end


class VirtualClock:
    """The simulation's clock: ``now`` is set by the loop; calling it reads it."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class ArrivalSource(Protocol):
    """Requests in arrival order."""

    def next_time(self) -> float:
        """Arrival time of the next request (``inf`` when there is none yet or ever)."""
        ...

    def pop(self) -> SimRequest: ...

    def finished(self, r: SimRequest, now: float) -> None:
        """A request finished (or was rejected) at ``now``: closed loops send the next one."""
        ...


class ListSource:
    """A fixed list of requests (sorted by arrival); for tests and small runs."""

    def __init__(self, requests: Iterable[SimRequest]) -> None:
        self._reqs = sorted(requests, key=lambda r: r.arrival)
        self._i = 0

    def next_time(self) -> float:
        return self._reqs[self._i].arrival if self._i < len(self._reqs) else _INF

    def pop(self) -> SimRequest:
        r = self._reqs[self._i]
        self._i += 1
        return r

    def finished(self, r: SimRequest, now: float) -> None:
        pass


class HeapSource:
    """Requests pushed at any time, popped in (time, push order); closed loops build on it."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, SimRequest]] = []
        self._n = 0

    def push(self, r: SimRequest) -> None:
        self._n += 1
        heapq.heappush(self._heap, (r.arrival, self._n, r))

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else _INF

    def pop(self) -> SimRequest:
        return heapq.heappop(self._heap)[2]

    def finished(self, r: SimRequest, now: float) -> None:
        pass


@dataclass
class LoopStats:
    """What the loop saw: the final time and the integral of requests in the system over time."""

    end: float = 0.0
    in_system_s: float = 0.0  # integral of (arrived - done) dt: Little's L times the span
    arrived: int = 0
    done: int = 0


def route(engines: Sequence[Engine]) -> Engine:
    """The engine a new request joins: fewest running + waiting, lowest index on ties."""
    best = engines[0]
    load = len(best.running) + len(best.waiting)
    for e in engines[1:]:
        n = len(e.running) + len(e.waiting)
        if n < load:
            best, load = e, n
    return best


def run_virtual(
    engine: Engine | Sequence[Engine],
    source: ArrivalSource,
    on_done: Callable[[SimRequest], None],
    clock: VirtualClock,
    *,
    until: float = _INF,
    stats: LoopStats | None = None,
) -> float:
    """Run until the source is exhausted and every engine idle (or the clock passes ``until``).

    Several engines (data-parallel replicas, pipeline lanes) step independently; an
    arrival joins :func:`route`'s choice; equal step ends go in engine order.
    ``on_done`` gets every finished or rejected request. Returns the final clock time.
    """
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    st = stats if stats is not None else LoopStats()
    if len(engines) == 1:
        _run_one(engines[0], source, on_done, clock, until, st)
    else:
        _run_many(engines, source, on_done, clock, until, st)
    st.end = clock.now
    return clock.now


def _run_one(eng: Engine, source: ArrivalSource, on_done: Callable[[SimRequest], None], clock: VirtualClock,
             until: float, st: LoopStats) -> None:
    """:func:`run_virtual` for one engine: the same events in the same order, fewer lookups."""
    next_time, pop, finished, add = source.next_time, source.pop, source.finished, eng.add
    t_step = _INF
    t_prev = clock.now
    n_sys = arrived = done = 0
    in_sys = 0.0
    while True:
        t_arr = next_time()
        if arrival_first(t_arr, t_step):
            if t_arr == _INF or t_arr > until:
                break
            clock.now = t_arr
            in_sys += n_sys * (t_arr - t_prev)
            t_prev = t_arr
            r = pop()
            arrived += 1
            if not add(r):
                r.ended_at = t_arr
                done += 1
                on_done(r)
                finished(r, t_arr)
                continue
            n_sys += 1
            if t_step == _INF:
                t_step = t_arr  # wake: a zero-length step end after every arrival at this instant
        else:
            if t_step > until:
                break
            now = clock.now = t_step
            in_sys += n_sys * (now - t_prev)
            t_prev = now
            for r in eng.complete(now):
                n_sys -= 1
                done += 1
                on_done(r)
                finished(r, now)
            d = eng.schedule(now, next_time())
            t_step = _INF if d is None else now + d
    st.in_system_s += in_sys
    st.arrived += arrived
    st.done += done


def _run_many(engines: list[Engine], source: ArrivalSource, on_done: Callable[[SimRequest], None],
              clock: VirtualClock, until: float, st: LoopStats) -> None:
    """:func:`run_virtual` for several engines (replicas, pipeline lanes)."""
    t_steps = [_INF] * len(engines)
    next_time = source.next_time
    t_prev = clock.now
    n_sys = 0
    while True:
        t_arr = next_time()
        t_step = min(t_steps)
        if arrival_first(t_arr, t_step):
            if t_arr == _INF or t_arr > until:
                break
            clock.now = t_arr
            st.in_system_s += n_sys * (t_arr - t_prev)
            t_prev = t_arr
            r = source.pop()
            eng = route(engines)
            st.arrived += 1
            if not eng.add(r):
                r.ended_at = t_arr
                st.done += 1
                on_done(r)
                source.finished(r, t_arr)
                continue
            n_sys += 1
            k = engines.index(eng)
            if t_steps[k] == _INF:
                t_steps[k] = t_arr
        else:
            if t_step > until:
                break
            now = clock.now = t_step
            st.in_system_s += n_sys * (now - t_prev)
            t_prev = now
            k = t_steps.index(t_step)
            eng = engines[k]
            for r in eng.complete(now):
                n_sys -= 1
                st.done += 1
                on_done(r)
                source.finished(r, now)
            d = eng.schedule(now, next_time())
            t_steps[k] = _INF if d is None else now + d
