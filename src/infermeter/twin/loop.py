"""The offline event loop: sends, API-server arrivals and step ends on a virtual clock, in one order.

Three event kinds exist: a *send* (the next request from an :class:`ArrivalSource`), an
*arrival* at an engine (the request leaves its replica's API server) and a *step end* (an
engine's step in flight finishes, and the next one is formed). The loop takes the earliest;
at equal times sends go first, then arrivals, then step ends (:func:`arrival_first` is the
one rule between an arrival and a step end). An idle engine woken by an arrival gets a
zero-length step end at that instant, so every request arriving at the same instant joins
the same batch::

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

**Fleets.** Engines are grouped into replicas of ``lanes`` engines (pipeline stages). A
:class:`~infermeter.twin.router.Router` picks the replica at send (a request whose
``replica`` is already set, by a stream that routed it, keeps it); inside a replica the lane
with the fewest running + waiting requests takes it. Each replica's API server is a FIFO
single server (``frontend``: overhead, service seconds; see ``EngineConfig``). Cost grows with
events, not with replicas x time: step ends sit in a heap (idle engines cost nothing), and a
decode span is only shortened (:meth:`~infermeter.twin.engine.Engine.interrupt`) when a request
reaches *its* engine (a fleet of one engine knows its next arrival, the source's, and stops its
spans there: ``known_arrivals``). Every replica's trajectory depends only on its own arrivals.
A single engine with nothing between send and engine (one replica, a fixed or no API-server
overhead, a ``passive`` source: :class:`ArrivalSource`) runs the same loop with its step in flight
as one number instead of a heap, and drops deadlines that no longer apply in runs: the same events
in the same order (``tests/twin/test_loop.py`` compares the two), at less cost per event.

**Windows.** With ``window`` set, every ``window``-th send (by request id) closes a window:
:meth:`EventLoop.run` yields ``(k, t)`` before handling it, when every event before ``t`` has
been handled (records of requests done before ``t`` are final); sources may also yield
:class:`Boundary` markers for sends other processes simulate. The last window is ``(k, inf)``.

**Clients' timeouts.** ``timeouts`` (first token, total; seconds from the send, as the client's
``--first-token-timeout`` and ``--timeout``): a request without a first token (or not finished)
by then gets an error record at that moment (``first_token_timeout`` / ``total_timeout``, with
the tokens it had streamed), and the engine aborts it (a waiting one at once, a running one after
the step in progress), so an overloaded fleet's queue stays bounded, as a real one's does.

**End of the run.** ``cancel_at`` (the duration plus ``grace_s``): events at or after it are not
handled; steps in flight keep what ended by then, and every request still in the system (in an
API server, waiting or running) ends ``CANCELLED`` at ``cancel_at``.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from infermeter.twin.engine import Engine
from infermeter.twin.request import CANCELLED, FINISHED, TIMED_OUT, WAITING, SimRequest
from infermeter.twin.router import Router
from infermeter.twin.state import set_state, state_of

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
    """Requests in send order.

    A source may also have ``passive = True``: its :meth:`next_time` changes only when :meth:`pop` is
    called and :meth:`finished` does nothing (an open loop without a concurrency cap); the loop then asks
    for the next send time once per send and does not report finished requests to it.
    """

    def next_time(self) -> float:
        """Send time of the next request (``inf`` when there is none yet or ever)."""
        ...

    def pop(self) -> SimRequest | Boundary: ...

    def finished(self, r: SimRequest, now: float) -> None:
        """A request finished (or was rejected) at ``now``: closed loops send the next one."""
        ...


class Boundary:
    """A window boundary in a partitioned stream: the send of request ``rid`` (simulated elsewhere) at ``arrival``."""

    __slots__ = ("rid", "arrival", "intended_at")

    def __init__(self, rid: int, arrival: float) -> None:
        self.rid = rid
        self.arrival = self.intended_at = arrival

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rid, self.arrival))


class ListSource:
    """A fixed list of requests (sorted by arrival); for tests and small runs."""

    passive = True  # (ArrivalSource)

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
    """What the loop saw: the final time and the integral of requests in the engines over time."""

    end: float = 0.0
    in_system_s: float = 0.0  # integral of (waiting + running) dt over the engines: Little's L x time
    arrived: int = 0
    done: int = 0
    cancelled: int = 0


def route(engines: Sequence[Engine]) -> Engine:
    """The engine a new request joins: fewest running + waiting, lowest index on ties."""
    best = engines[0]
    load = len(best.running) + len(best.waiting)
    for e in engines[1:]:
        n = len(e.running) + len(e.waiting)
        if n < load:
            best, load = e, n
    return best


class EventLoop:
    """Engines as replicas of ``lanes`` engines behind ``router`` and FIFO API servers (module docstring)."""

    def __init__(self, engines: Sequence[Engine], *, lanes: int = 1, router: Router | None = None,
                 frontend: tuple[float, float] = (0.0, 0.0), known_arrivals: bool | None = None) -> None:
        self.engines = list(engines)
        # one engine in the whole fleet: its next arrival is the source's, so spans stop there
        self.known_arrivals = len(self.engines) == 1 if known_arrivals is None else known_arrivals
        self.lanes = max(1, lanes)
        if len(self.engines) % self.lanes:
            raise ValueError(f"{len(self.engines)} engines do not make replicas of {self.lanes} lanes")
        self.replicas = len(self.engines) // self.lanes
        self.router = router or Router("least-outstanding", self.replicas)
        self.overhead, self.service = frontend
        self.stats = LoopStats()
        self._state: dict[str, Any] | None = None  # set at each window boundary: what a checkpoint keeps

    def __reduce__(self) -> tuple[Any, ...]:  # checkpoints; both builds (twin.state)
        return (type(self), (self.engines,), state_of(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)

    def run(self, source: ArrivalSource, on_done: Callable[[SimRequest], None], clock: VirtualClock, *,
            until: float = _INF, cancel_at: float = _INF, window: int | None = None,
            timeouts: tuple[float | None, float | None] = (None, None),
            ) -> Generator[tuple[int, float], None, None]:
        """Handle events until the source is exhausted and every engine idle, the clock passes ``until``
        or ``cancel_at`` comes; yields ``(window, its end time)`` at every window boundary. ``timeouts``:
        the clients' (first token, total) seconds from the send (module docstring)."""
        engines, lanes = self.engines, self.lanes
        router = self.router
        pick, done_at = router.pick, router.done
        track = not router.stream_decided  # least-outstanding: count what each replica has
        o, s = self.overhead, self.service
        # a fixed overhead and a router decided at send: handle each send when it reaches its engine
        shifted = o > 0 and s == 0 and router.stream_decided
        direct = (o == 0 and s == 0) or shifted
        shift = o if shifted else 0.0
        known = self.known_arrivals
        saved = self._state  # a loop restored from a checkpoint goes on where it stopped
        fe_free: list[float] = [0.0] * self.replicas
        fe: list[tuple[float, int, SimRequest, int]] = []  # requests in API servers: (engine arrival, seq, r, replica)
        fe_q: deque[tuple[float, int, SimRequest, int]] = deque()  # the same without serial work: in order
        steps: list[tuple[float, int, int]] = []  # (step end, lane, version)
        ver = [0] * len(engines)
        busy = [False] * len(engines)
        st = self.stats
        next_time, pop, finished = source.next_time, source.pop, source.finished
        passive = bool(getattr(source, "passive", False))  # next_time() changes at pop() only (ArrivalSource)
        t_next = next_time() if passive else _INF
        single = router.replicas == 1 and not track  # a stream-decided router over one replica: always 0
        heappush, heappop = heapq.heappush, heapq.heappop
        stop = cancel_at if cancel_at < until else until
        strict = cancel_at <= until  # cancel: events at cancel_at are not handled; until: they are
        next_b = window if window else -1
        k_win = 0
        seq = 0
        inf = _INF

        # events at or after ``stop`` are not handled (with ``until``: after it)
        stop = stop if strict else math.nextafter(stop, inf)
        arrived = done = 0
        t_first, t_total = timeouts
        # clients' deadlines: sends come in time order, so each kind's deadlines do too: two FIFO queues of
        # requests, whose deadlines are their send (``arrival``, fixed once sent) + f1 (kind 0, first token) or
        # + f2 (kind 1, total)
        dl1: deque[SimRequest] = deque()
        dl2: deque[SimRequest] = deque()
        f1, f2 = t_first or 0.0, t_total or 0.0
        first_fifo = t_first is not None and (not t_total or t_first <= t_total)
        dlq = dl1 if first_fifo else dl2
        dl_after = f1 if first_fifo else f2
        use_dl = bool(t_first or t_total)
        resume: tuple[Any, float] | None = None
        if saved is not None:
            fe_free, fe, fe_q, steps, ver, busy, dl1, dl2 = saved["queues"]
            next_b, k_win, seq, arrived, done = saved["counts"]
            resume = saved["resume"]
            dlq = dl1 if first_fifo else dl2

        def give_up(r: SimRequest, t: float, kind: int) -> float | None:
            """The client stops waiting at ``t``: an error record now; the engine aborts the request. The new
            end of the step in flight on its lane (``r.lane``), or None when it did not change."""
            nonlocal done
            rec = copy.copy(r)
            lane = r.lane
            rec.state, rec.ended_at = TIMED_OUT, t
            if kind == 0:
                rec.error_class, rec.error = "first_token_timeout", f"no token within {t_first:g} s"
            else:
                rec.error_class, rec.error = "total_timeout", f"not finished within {t_total:g} s"
            r.timed_out = True
            end = None
            if lane >= 0:
                eng = engines[lane]
                rec.outputs = eng.outputs_of(r)
                waiting = r.state == WAITING
                eng.abort(r, t)  # waiting: gone now; running: after the step in progress
                if not waiting:
                    end = eng.cut(t)
            done += 1
            on_done(rec)
            finished(rec, t)
            if track:
                done_at(r.replica)
            return end

        def arrive(r: SimRequest, j: int, t: float) -> None:
            nonlocal arrived, done
            if lanes == 1:
                lane = j
            else:
                lane = j * lanes + engines.index(route(engines[j * lanes:(j + 1) * lanes]), j * lanes)
            eng = engines[lane]
            arrived += 1
            r.lane = lane
            if not eng.add(r, t):
                r.ended_at = t
                done += 1
                on_done(r)
                finished(r, t)
                if track:
                    done_at(j)
                return
            if not busy[lane]:
                busy[lane] = True
                heappush(steps, (t, lane, ver[lane]))  # wake: a zero-length step end at t
            else:
                end = eng.interrupt(t)
                if end is not None:
                    ver[lane] += 1
                    heappush(steps, (end, lane, ver[lane]))

        fast = direct and lanes == 1
        sent: SimRequest | Boundary  # a send (a Boundary: one that another process simulates)
        if fast and len(engines) == 1 and single and passive and not fe and not fe_q:
            # One engine with nothing between send and engine (the usual single replica): the general loop
            # below with its step in flight as one number instead of a heap (the same events in the same order:
            # tests/twin/test_loop.py runs both).
            eng = engines[0]
            v0 = ver[0]
            t_step = min((e[0] for e in steps if e[2] == v0), default=inf) if busy[0] else inf
            # the clients' earliest deadline (kept as sends and deadlines come, not looked up at every event)
            t_dl = min(dl1[0].arrival + f1 if dl1 else inf, dl2[0].arrival + f2 if dl2 else inf)
            while True:
                if resume is not None:  # the send a checkpoint was taken at
                    sent, t_src = resume
                    resume = None
                    clock.now = t_src
                else:
                    t_src = t_next + shift
                    if t_dl < t_src and t_dl < t_step:  # a client's deadline, before anything else
                        if t_dl >= stop:
                            break
                        kind = 0 if dl1 and (not dl2 or dl1[0].arrival + f1 <= dl2[0].arrival + f2) else 1
                        q = dl2 if kind else dl1
                        r = q[0]
                        if r.state < FINISHED and not r.timed_out and (kind or r.first_token_at is None):
                            q.popleft()
                            clock.now = t_dl
                            end = give_up(r, t_dl, kind)
                            if end is not None:
                                v0 = ver[0] = ver[0] + 1
                                t_step = end
                        else:
                            # Nothing to do at this deadline: its request ended, or had its first token (then its
                            # total deadline is queued). The same holds now for the requests behind it that
                            # ended or started streaming: done with them too, at once (a deadline that no
                            # longer applies never changes anything, whenever it is dropped).
                            while dl1:  # first-token deadlines (kind 0)
                                r = dl1[0]
                                if r.state >= FINISHED or r.timed_out:
                                    dl1.popleft()
                                elif r.first_token_at is not None:
                                    dl1.popleft()
                                    if t_total:
                                        dl2.append(r)
                                else:
                                    break
                            while dl2:  # total deadlines (kind 1)
                                r = dl2[0]
                                if r.state >= FINISHED or r.timed_out:
                                    dl2.popleft()
                                else:
                                    break
                        t_dl = min(dl1[0].arrival + f1 if dl1 else inf, dl2[0].arrival + f2 if dl2 else inf)
                        continue
                    if t_src > t_step:  # the step in flight ends first (at equal times the send goes first)
                        if t_step >= stop:
                            break
                        now = t_step
                        clock.now = now
                        out = eng.complete(now)
                        if out:
                            for r in out:
                                if r.timed_out:
                                    continue  # reported when its client gave up
                                done += 1
                                on_done(r)
                        d = eng.schedule(now, t_next + o) if known else eng.schedule(now)
                        t_step = inf if d is None else now + d
                        continue
                    if t_src >= stop:
                        break
                    clock.now = t_src
                    sent = pop()
                    t_next = next_time()
                if sent.rid >= next_b > 0:
                    while sent.rid >= next_b:
                        k_win += 1
                        next_b += window  # type: ignore[operator]
                        st.arrived, st.done = arrived, done
                        busy[0] = t_step < inf  # the general loop's form of the step in flight (checkpoints)
                        steps[:] = [(t_step, 0, v0)] if t_step < inf else []
                        self._state = {"queues": (fe_free, fe, fe_q, steps, ver, busy, dl1, dl2),
                                       "counts": (next_b, k_win, seq, arrived, done), "resume": (sent, t_src)}
                        yield k_win - 1, t_src
                    self._state = None
                if isinstance(sent, Boundary):
                    continue
                r = sent
                if r.replica < 0:
                    r.replica = 0
                if use_dl:
                    d = r.arrival + dl_after
                    dlq.append(r)
                    if d < t_dl:
                        t_dl = d
                arrived += 1
                r.lane = 0
                if not eng.add(r, t_src):
                    r.ended_at = t_src
                    done += 1
                    on_done(r)
                elif t_step == inf:  # idle: woken by a zero-length step end at t_src
                    t_step = t_src
                elif len(eng.waiting) == 1:  # eng.interrupt(t_src), inlined
                    end = eng.cut(t_src)
                    if end is not None:
                        t_step = end
            busy[0] = t_step < inf
            steps[:] = [(t_step, 0, v0)] if t_step < inf else []
        else:
            while True:
                if resume is not None:  # the send a checkpoint was taken at
                    sent, t_src = resume
                    resume = None
                    clock.now = t_src
                else:
                    t_src = (t_next if passive else next_time()) + shift
                    t_fe = fe[0][0] if fe else (fe_q[0][0] if fe_q else inf)
                    t_step = steps[0][0] if steps else inf
                    if dl1 or dl2:
                        kind = 0 if dl1 and (not dl2 or dl1[0].arrival + f1 <= dl2[0].arrival + f2) else 1
                        q = dl2 if kind else dl1
                        t_dl = q[0].arrival + (f2 if kind else f1)
                        if t_dl < t_src and t_dl < t_fe and t_dl < t_step:  # a client's deadline, before anything else
                            if t_dl >= stop:
                                break
                            r = q.popleft()
                            if r.state >= FINISHED or r.timed_out:
                                continue
                            if kind == 0 and r.first_token_at is not None:  # its first token came in time
                                if t_total:
                                    dl2.append(r)
                                continue
                            clock.now = t_dl
                            end = give_up(r, t_dl, kind)
                            if end is not None:
                                lane = r.lane
                                ver[lane] += 1
                                heappush(steps, (end, lane, ver[lane]))
                            continue
                    if not (t_src <= t_fe and t_src <= t_step):
                        if arrival_first(t_fe, t_step):
                            if t_fe >= stop:
                                break
                            clock.now = t_fe
                            _, _, r, j = heappop(fe) if fe else fe_q.popleft()
                            if r.timed_out:  # its client gave up while it was in the API server
                                continue
                            if lanes == 1:  # arrive(r, j, t_fe), inlined
                                eng = engines[j]
                                arrived += 1
                                r.lane = j
                                if not eng.add(r, t_fe):
                                    r.ended_at = t_fe
                                    done += 1
                                    on_done(r)
                                    finished(r, t_fe)
                                    if track:
                                        done_at(j)
                                elif not busy[j]:
                                    busy[j] = True
                                    heappush(steps, (t_fe, j, ver[j]))
                                else:
                                    end = eng.interrupt(t_fe)
                                    if end is not None:
                                        ver[j] += 1
                                        heappush(steps, (end, j, ver[j]))
                            else:
                                arrive(r, j, t_fe)
                            continue
                        if t_step >= stop:
                            break
                        now, lane, v = heappop(steps)
                        if v != ver[lane]:
                            continue  # superseded by an interrupted span's new end
                        clock.now = now
                        eng = engines[lane]
                        out = eng.complete(now)
                        if out:
                            for r in out:
                                if r.timed_out:
                                    continue  # reported when its client gave up
                                done += 1
                                on_done(r)
                                if not passive:
                                    finished(r, now)
                                if track:
                                    done_at(lane // lanes)
                        if known:
                            h = (t_next if passive else next_time()) + o
                            if fe and fe[0][0] < h:
                                h = fe[0][0]
                            elif fe_q and fe_q[0][0] < h:
                                h = fe_q[0][0]
                            d = eng.schedule(now, h)
                        else:
                            d = eng.schedule(now)
                        if d is None:
                            busy[lane] = False
                        else:
                            heappush(steps, (now + d, lane, v))
                        continue
                    if t_src >= stop:
                        break
                    clock.now = t_src
                    sent = pop()
                    if passive:
                        t_next = next_time()
                # a send at t_src (a Boundary: one that another process simulates)
                if sent.rid >= next_b > 0:
                    while sent.rid >= next_b:
                        k_win += 1
                        next_b += window  # type: ignore[operator]
                        st.arrived, st.done = arrived, done
                        self._state = {"queues": (fe_free, fe, fe_q, steps, ver, busy, dl1, dl2),
                                       "counts": (next_b, k_win, seq, arrived, done), "resume": (sent, t_src)}
                        yield k_win - 1, t_src
                    self._state = None
                if isinstance(sent, Boundary):
                    continue
                r = sent
                j = r.replica
                if j < 0:
                    j = r.replica = 0 if single else pick(r.rid, r.conversation_id, r.prefix_group)
                if use_dl:
                    dlq.append(r)
                if fast:  # arrive(r, j, t_src), inlined: the common case
                    eng = engines[j]
                    arrived += 1
                    r.lane = j
                    if not eng.add(r, t_src):
                        r.ended_at = t_src
                        done += 1
                        on_done(r)
                        finished(r, t_src)
                        if track:
                            done_at(j)
                    elif not busy[j]:
                        busy[j] = True
                        heappush(steps, (t_src, j, ver[j]))
                    elif len(eng.waiting) == 1:  # eng.interrupt(t_src), inlined
                        end = eng.cut(t_src)
                        if end is not None:
                            ver[j] += 1
                            heappush(steps, (end, j, ver[j]))
                elif direct:
                    arrive(r, j, t_src)
                elif s:  # the replica's API server works one request at a time
                    t_e = t_src + o
                    free = fe_free[j]
                    t_e = (free if free > t_e else t_e) + s
                    fe_free[j] = t_e
                    seq += 1
                    heappush(fe, (t_e, seq, r, j))
                else:  # a fixed overhead: arrivals keep the send order
                    fe_q.append((t_src + o, 0, r, j))
        st.arrived, st.done = arrived, done
        fe.extend(fe_q)
        if shifted and cancel_at < inf and cancel_at <= until:  # sent, not yet at their engine: in its API server
            while next_time() < cancel_at:
                sent = pop()
                if not isinstance(sent, Boundary):
                    fe.append((cancel_at, 0, sent, -1))
        if cancel_at < inf and cancel_at <= until and (fe or any(busy) or any(not e.idle for e in engines)):
            self._cancel(cancel_at, fe, busy, on_done, finished, clock)
        for e in engines:  # integrals up to the end of the run (idle time adds nothing)
            e.waiting_series.close(clock.now)
        st.end = clock.now
        st.in_system_s = sum(e.in_system_integral for e in engines)
        yield k_win, inf

    def _cancel(self, t: float, fe: list[tuple[float, int, SimRequest, int]], busy: list[bool],
                on_done: Callable[[SimRequest], None], finished: Callable[[SimRequest, float], None],
                clock: VirtualClock) -> None:
        """The run gives up at ``t``: finish what ends by then, cancel the rest (module docstring)."""
        st = self.stats
        clock.now = t
        for lane, eng in enumerate(self.engines):
            if busy[lane]:
                end = eng.settle(t)
                if end is not None:
                    for r in eng.complete(end):
                        if r.timed_out:
                            continue
                        st.done += 1
                        on_done(r)
                        finished(r, end)
            left = eng.cancel_all(t)
            for r in left:
                if r.timed_out:
                    continue
                st.cancelled += 1
                on_done(r)
        for _, _, r, _ in sorted(fe, key=lambda x: x[2].rid):
            if r.timed_out:
                continue
            r.state = CANCELLED
            r.ended_at = t
            st.cancelled += 1
            on_done(r)
        fe.clear()


def run_virtual(
    engine: Engine | Sequence[Engine],
    source: ArrivalSource,
    on_done: Callable[[SimRequest], None],
    clock: VirtualClock,
    *,
    until: float = _INF,
    stats: LoopStats | None = None,
    **fleet: Any,
) -> float:
    """Run until the source is exhausted and every engine idle (or the clock passes ``until``).

    Several engines are replicas behind a least-outstanding router unless ``fleet`` says
    otherwise (``lanes``, ``router``, ``frontend``; :class:`EventLoop`). ``on_done`` gets every
    finished or rejected request. Returns the final clock time.
    """
    engines = [engine] if isinstance(engine, Engine) else list(engine)
    loop = EventLoop(engines, **fleet)
    for _ in loop.run(source, on_done, clock, until=until):
        pass
    if stats is not None:
        st = loop.stats
        stats.end, stats.arrived, stats.done = st.end, stats.arrived + st.arrived, stats.done + st.done
        stats.in_system_s += st.in_system_s
        stats.cancelled += st.cancelled
    return clock.now
