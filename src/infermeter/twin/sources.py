"""Arrival sources for the offline simulator: a workload's requests on a load schedule.

The same workload stream and the same schedule as ``infermeter run`` (the caller
builds both from the same flags) arrive as :class:`SimRequest` objects whose
``arrival`` is the intended send offset (see :mod:`infermeter.measure.feeder`, which
makes that stream in this process or, for huge runs, in a child process)::

    reqs = local_stream(shape.arrivals(rng), iter(workload.requests()))
    src = OpenLoopSource(reqs, requests=1000)
    src = ClosedLoopSource(8, local_stream(None, iter(workload.requests())), requests=1000)

Stop rules match the runner's: ``warmup + requests`` requests in all (when
``requests`` is given), none intended at or after ``duration_s`` (when given).
Open loops with ``max_concurrency`` hold a request until one in flight finishes
(its ``arrival`` then lags its ``intended_at``). A closed loop sends each stream's
next request when its previous one ends (``intended_at`` = that moment).

Sources give *send* times; the replica's API server (the loop's front end) decides when a
request reaches its engine. :class:`PartitionSource` is the stream of one worker of a
partitioned fleet: every request is routed from the stream alone, and only this worker's
replicas' requests are made (the others leave window :class:`~infermeter.twin.loop.Boundary`
markers where they close a window).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from typing import Any

from infermeter.twin.request import SimRequest
from infermeter.twin.state import set_state, state_of

_INF = math.inf


class _Limited:
    """The stop rules and the request stream both sources share."""

    def __init__(self, reqs: Iterator[SimRequest], requests: int | None, duration_s: float | None,
                 warmup: int) -> None:
        self._reqs = reqs
        self._it = iter(reqs)
        self._total = None if requests is None else requests + warmup
        self._duration = _INF if duration_s is None else duration_s
        self._n = 0

    def close(self) -> None:
        close = getattr(self._reqs, "close", None)
        if close is not None:
            close()

    @property
    def consumed(self) -> int:
        """Requests taken from the stream so far (a resumed run's stream starts after them)."""
        return self._n

    def _init_args(self) -> tuple[Any, ...]:
        """Arguments that make an empty instance (unpickling; :mod:`infermeter.twin.state`)."""
        return (iter(()),)

    def __reduce__(self) -> tuple[Any, ...]:  # a checkpoint keeps the state, not the stream (both builds)
        state = state_of(self)
        state.pop("_reqs", None)
        state.pop("_it", None)
        return (type(self), self._init_args(), state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)  # the stream comes back with attach()

    def attach(self, reqs: Iterator[SimRequest]) -> None:
        """Go on with ``reqs``: the stream from request ``consumed`` on (after a checkpoint)."""
        self._reqs = reqs
        self._it = iter(reqs)


class OpenLoopSource(_Limited):
    """Open loop: requests at their intended offsets (their ``arrival`` as given)."""

    def __init__(
        self,
        reqs: Iterator[SimRequest],
        *,
        requests: int | None = None,
        duration_s: float | None = None,
        warmup: int = 0,
        max_concurrency: int | None = None,
    ) -> None:
        super().__init__(reqs, requests, duration_s, warmup)
        self._cap = max_concurrency
        self.passive = max_concurrency is None  # the loop's fast path (twin.loop.ArrivalSource)
        self._in_flight = 0
        self._release = 0.0
        self.held = 0  # requests sent after their intended time because of the cap
        self._next: SimRequest | None = None
        self._t = _INF
        self._advance()

    def _advance(self) -> None:
        self._next, self._t = None, _INF
        if self._total is not None and self._n >= self._total:
            return
        r = next(self._it, None)
        if r is None or r.arrival >= self._duration:
            return
        r.intended_at = r.arrival
        self._next, self._t = r, r.arrival
        self._n += 1

    def next_time(self) -> float:
        if self._cap is None:
            return self._t
        nxt = self._next
        if nxt is None or self._in_flight >= self._cap:
            return _INF
        return max(nxt.arrival, self._release)

    def pop(self) -> SimRequest:
        r = self._next
        assert r is not None
        if self._cap is not None:
            if self._release > r.arrival:
                r.arrival = self._release
                self.held += 1
            self._in_flight += 1
        # self._advance(), inlined (once per request)
        if self._total is not None and self._n >= self._total:
            self._next, self._t = None, _INF
            return r
        nxt = next(self._it, None)
        if nxt is None or nxt.arrival >= self._duration:
            self._next, self._t = None, _INF
            return r
        nxt.intended_at = nxt.arrival
        self._next, self._t = nxt, nxt.arrival
        self._n += 1
        return r

    def finished(self, r: SimRequest, now: float) -> None:
        if self._cap is not None:
            self._in_flight -= 1
            self._release = now


class ClosedLoopSource(_Limited):
    """``concurrency`` streams; each sends its next request the moment its previous one ends."""

    def __init__(
        self,
        concurrency: int,
        reqs: Iterator[SimRequest],
        *,
        requests: int | None = None,
        duration_s: float | None = None,
        warmup: int = 0,
    ) -> None:
        super().__init__(reqs, requests, duration_s, warmup)
        self._heap: list[tuple[float, int, SimRequest]] = []
        for _ in range(concurrency):
            self._send(0.0)

    def _init_args(self) -> tuple[Any, ...]:
        return (0, iter(()))

    def _send(self, at: float) -> None:
        if (self._total is not None and self._n >= self._total) or at >= self._duration:
            return
        r = next(self._it, None)
        if r is None:
            return
        r.arrival = r.intended_at = at
        heapq.heappush(self._heap, (at, self._n, r))
        self._n += 1

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else _INF

    def pop(self) -> SimRequest:
        return heapq.heappop(self._heap)[2]

    def finished(self, r: SimRequest, now: float) -> None:
        self._send(now)


class PartitionSource:
    """One worker's share of an open-loop stream routed from the stream alone (module docstring).

    ``timed`` yields ``(send offset, spec)`` in send order (the shape's schedule); request ``i``
    goes to ``router.replica_of(i, ...)``; this worker simulates the replicas in ``owned``
    (global index -> local index). Stop rules as :class:`OpenLoopSource` (``requests + warmup``
    requests, none sent at or after ``duration_s``). Every ``window``-th request that is not
    ours becomes a :class:`~infermeter.twin.loop.Boundary`.
    """

    def __init__(self, timed: Iterator[tuple[float, object]], router: object, owned: dict[int, int],
                 make: object, *, requests: int | None = None, duration_s: float | None = None, warmup: int = 0,
                 window: int | None = None) -> None:
        from infermeter.twin.loop import Boundary

        self._boundary = Boundary
        self._timed = timed
        self._route = router.replica_of  # type: ignore[attr-defined]
        self._owned = owned
        self._make = make  # (rid, at, spec, local replica) -> SimRequest
        self._total = None if requests is None else requests + warmup
        self._duration = _INF if duration_s is None else duration_s
        self._window = window or 0
        self._i = 0
        self.sent = 0  # requests of the whole stream so far (every worker's)
        self.first_at: float | None = None  # send span of the whole stream
        self.last_at: float | None = None
        self._next: object = None
        self._t = _INF
        self._advance()

    def _advance(self) -> None:
        self._next, self._t = None, _INF
        owned, route, w, total, horizon = self._owned, self._route, self._window, self._total, self._duration
        for at, spec in self._timed:
            i = self._i
            if (total is not None and i >= total) or at >= horizon:
                break
            self._i = i + 1
            self.sent = i + 1
            if self.first_at is None:
                self.first_at = at
            self.last_at = at
            local = owned.get(route(i, spec.conversation_id, spec.prefix_group))  # type: ignore[attr-defined]
            if local is not None:
                self._next, self._t = self._make(i, at, spec, local), at  # type: ignore[operator]
                return
            if w and i and i % w == 0:
                self._next, self._t = self._boundary(i, at), at
                return

    def next_time(self) -> float:
        return self._t

    def pop(self) -> Any:  # a SimRequest, or a Boundary where another worker's request closes a window
        r = self._next
        self._advance()
        return r

    def finished(self, r: SimRequest, now: float) -> None:
        pass

    def close(self) -> None:
        close = getattr(self._timed, "close", None)
        if close is not None:
            close()
