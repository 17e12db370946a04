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

``delay`` is the engine's fixed per-request cost before scheduling (the performance
model's ``request_overhead_s``): a request sent at ``t`` reaches the engine at
``t + delay``; its records keep ``sent_at = t``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from infermeter.twin.request import SimRequest

_INF = math.inf


class _Limited:
    """The stop rules and the request stream both sources share."""

    def __init__(self, reqs: Iterator[SimRequest], requests: int | None, duration_s: float | None, warmup: int,
                 delay: float) -> None:
        self._reqs = reqs
        self._it = iter(reqs)
        self._total = None if requests is None else requests + warmup
        self._duration = _INF if duration_s is None else duration_s
        self._delay = delay
        self._n = 0

    def close(self) -> None:
        close = getattr(self._reqs, "close", None)
        if close is not None:
            close()


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
        delay: float = 0.0,
    ) -> None:
        super().__init__(reqs, requests, duration_s, warmup, delay)
        self._cap = max_concurrency
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
        self._next, self._t = r, r.arrival + self._delay
        self._n += 1

    def next_time(self) -> float:
        if self._cap is None:
            return self._t
        nxt = self._next
        if nxt is None or self._in_flight >= self._cap:
            return _INF
        return max(nxt.arrival, self._release) + self._delay

    def pop(self) -> SimRequest:
        r = self._next
        assert r is not None
        if self._cap is not None:
            if self._release > r.arrival:
                r.arrival = self._release
                self.held += 1
            self._in_flight += 1
        self._advance()
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
        delay: float = 0.0,
    ) -> None:
        super().__init__(reqs, requests, duration_s, warmup, delay)
        self._heap: list[tuple[float, int, SimRequest]] = []
        for _ in range(concurrency):
            self._send(0.0)

    def _send(self, at: float) -> None:
        if (self._total is not None and self._n >= self._total) or at >= self._duration:
            return
        r = next(self._it, None)
        if r is None:
            return
        r.arrival = r.intended_at = at
        heapq.heappush(self._heap, (at + self._delay, self._n, r))
        self._n += 1

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else _INF

    def pop(self) -> SimRequest:
        return heapq.heappop(self._heap)[2]

    def finished(self, r: SimRequest, now: float) -> None:
        self._send(now)
