"""The load runner: sends a workload on a shape's schedule and records everything.

The runner knows a shape only through its seam (:class:`~infermeter.load.shapes.BaseShape`):
an open-loop shape's ``schedule`` gives absolute send offsets (it sleeps until ``t0 +
offset``, never relative to the previous send, so lateness never accumulates); a closed
loop runs ``shape.streams`` streams. It owns the in-flight cap, warmup, stop conditions,
cancellation and live statistics, once, for every shape::

    runner = Runner(send=client.send, specs=iter(workload.requests()), shape=shape,
                    limits=Limits(requests=100, warmup=5), clock=clock, on_record=journal.write)
    stats = await runner.run()

``stats.cap_held`` counts measured requests the in-flight cap itself held back more than
``CAP_HELD_S``: the cap was reached (every permit taken) when the request came to be sent, and
it waited that long for a permit. A request that starts late because the client's own loop
lagged is not counted (that is ``schedule_lag``, the client's, not the cap's).

Every request the schedule reached gets exactly one record: ``ok``/``error``
from the client, ``cancelled`` when the run stopped while it was in flight, or
``dropped`` when it never got to be sent. Intended send time is the schedule's
time (open loop) or the moment the stream was free (closed loop).

Hooks for multi-process and resumed runs: ``index_filter`` keeps only some
schedule indices (worker k of n takes ``idx % n == k``: see
``load.workers.stripe``); ``worker`` is written into every record;
``first_index`` skips the first schedule entries (and their specs) and
``shift_s`` moves the schedule later on the run clock (a resumed soak run:
run clock = schedule time + ``shift_s``; ``--duration`` counts schedule time).

When the first ``EARLY_4XX`` requests to finish (before any succeeded) all failed with one and the
same 4xx status (a wrong ``--model``: 404 "model does not exist"; not 408 or 429, which depend on
the load), every request would too: the runner stops itself, ``stats.halted`` says so and
``stats.extra["early_failure"]`` has the status, the detail and the count.

A server that answers the first request to finish with HTTP 401 or 403 (before any request
succeeded) wants an API key: every request would fail, so the runner stops itself and says why
in ``stats.halted`` (``auth_failure`` has the status and the detail); a 401 after requests
succeeded is recorded like any error.

A record that cannot be written (``on_record`` raises ``OSError``: disk full, I/O error, a
read-only file system) stops the run at once, the same way, once: ``stats.halted`` says why,
``stats.extra["write_failure"]`` has the file, the error and how many records did not reach it
(this one and those that ended after it). An exception that escapes ``send`` is that request's
failure (``error`` / ``client_error``, naming the exception), never a lost record.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infermeter.client.errors import AUTH_STATUSES
from infermeter.load.shapes import BaseShape
from infermeter.load.stats import LiveStats
from infermeter.records.record import RequestRecord

CAP_HELD_S = 0.010
STOP_CHECK_S = 0.05  # the open-loop pacer looks at the stop flag at least this often while it waits
EARLY_4XX = 8  # the first requests to finish, all refused with one 4xx: every request would be
LOAD_4XX = (408, 429)  # 4xx statuses that depend on the load, never a reason to stop


@dataclass(frozen=True)
class Limits:
    """When to stop: measured requests and/or seconds of sending; warmup requests go first."""

    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    max_concurrency: int | None = None
    grace_s: float = 30.0  # after --duration, wait this long for in-flight requests

    def describe(self) -> str:
        parts = []
        if self.requests is not None:
            parts.append(f"{self.requests} requests")
        if self.duration_s is not None:
            parts.append(f"{self.duration_s:g} s")
        s = " or ".join(parts) or "until stopped"
        if self.warmup:
            s += f" (+{self.warmup} warmup)"
        return s


@dataclass
class RunStats:
    started_wall: float = 0.0
    sent: int = 0
    cap_held: int = 0
    max_in_flight: int = 0
    client_cpu: float | None = None
    wall_s: float = 0.0
    interrupted: bool = False
    halted: str | None = None  # why the runner stopped itself (e.g. every first request got HTTP 401)
    extra: dict[str, Any] = field(default_factory=dict)


SendFn = Callable[[Any, RequestRecord], Awaitable[None]]


class Runner:
    def __init__(self, *, send: SendFn, specs: Iterator[Any], shape: BaseShape, limits: Limits,
                 clock: Callable[[], float], on_record: Callable[[RequestRecord], None],
                 rng: np.random.Generator | None = None, live: LiveStats | None = None,
                 index_filter: Callable[[int], bool] | None = None, worker: int = 0,
                 first_index: int = 0, shift_s: float = 0.0) -> None:
        self.send = send
        self.specs = specs
        self.shape = shape
        self.limits = limits
        self.clock = clock
        self.on_record = on_record
        self.rng = rng or np.random.default_rng(0)
        self.live = live or LiveStats()
        self.index_filter = index_filter  # for striping one schedule over workers
        self.worker = worker
        self.first_index = first_index
        self.shift_s = shift_s
        self.stats = RunStats()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._sem = asyncio.Semaphore(limits.max_concurrency) if limits.max_concurrency else None
        self._total = None if limits.requests is None else limits.requests + limits.warmup
        self._ok_seen = False
        self._early: list[int | None] = []  # statuses of the first requests to finish, while all failed

    def stop(self) -> None:
        """Stop sending (Ctrl-C); in-flight requests are cancelled and recorded as such."""
        self.stats.interrupted = True
        self._stop.set()

    def halt(self, reason: str) -> None:
        """Stop sending because the run cannot succeed (not an interruption); ``reason`` says why."""
        if self.stats.halted is None:
            self.stats.halted = reason
        self._stop.set()

    def _check_auth(self, rec: RequestRecord) -> None:
        if rec.outcome == "ok":
            self._ok_seen = True
        elif (rec.outcome == "error" and not self._ok_seen and rec.http_status in AUTH_STATUSES
              and self.stats.halted is None):
            self.stats.extra["auth_failure"] = {"status": rec.http_status, "detail": rec.error_detail}
            self.halt(f"HTTP {rec.http_status} on the first requests")
        if rec.outcome == "error" and not self._ok_seen and len(self._early) < EARLY_4XX:
            self._early.append(rec.http_status)
            first = self._early[0]
            if (len(self._early) == EARLY_4XX and first is not None and 400 <= first < 500 and first not in LOAD_4XX
                    and all(s == first for s in self._early) and self.stats.halted is None):
                self.stats.extra["early_failure"] = {"status": first, "detail": rec.error_detail, "count": EARLY_4XX}
                self.halt(f"HTTP {first} on the first {EARLY_4XX} requests")

    # -- one request ---------------------------------------------------------------------------
    async def _one(self, idx: int, spec: Any, intended: float) -> None:
        rec = RequestRecord(request_id=idx, phase="warmup" if idx < self.limits.warmup else "measure",
                            worker=self.worker, intended_at=intended, conversation_id=getattr(spec, "conversation_id", None),
                            prefix_group=getattr(spec, "prefix_group", None),
                            requested_input_tokens=getattr(spec, "input_tokens", None),
                            requested_output_tokens=getattr(spec, "max_tokens", None))
        try:
            if self._sem is not None:
                bound = self._sem.locked()  # every permit taken: the cap, not the client, holds this request
                before = self.clock()
                await self._sem.acquire()
                if bound and self.clock() - before > CAP_HELD_S and rec.phase == "measure":
                    self.stats.cap_held += 1
            try:
                self._in_flight += 1
                self.live.in_flight = self._in_flight
                if self._in_flight > self.stats.max_in_flight:
                    self.stats.max_in_flight = self._in_flight
                self.stats.sent += 1
                await self.send(spec, rec)
            finally:
                self._in_flight -= 1
                self.live.in_flight = self._in_flight
                if self._sem is not None:
                    self._sem.release()
        except asyncio.CancelledError:
            rec.outcome = "cancelled" if rec.sent_at is not None else "dropped"
            rec.error_class = None
            rec.ended_at = self.clock() if rec.sent_at is not None else None
        except Exception as exc:  # noqa: BLE001 - the client records failures; what escaped it is this request's
            rec.outcome, rec.error_class = "error", "client_error"
            rec.error_detail = f"{type(exc).__name__}: {exc}"[:300]
            rec.ended_at = self.clock()
        self._check_auth(rec)
        self.live.add(rec)
        self._record(rec)

    def _record(self, rec: RequestRecord) -> None:
        failure = self.stats.extra.get("write_failure")
        if failure is not None:  # the journal failed: nothing more can reach it; count what is missing
            failure["unwritten"] += 1
            return
        try:
            self.on_record(rec)
        except OSError as exc:
            self.stats.extra["write_failure"] = {"path": exc.filename, "errno": exc.errno,
                                                 "error": exc.strerror or str(exc), "unwritten": 1}
            where = f" to {exc.filename}" if exc.filename else ""
            self.halt(f"records cannot be written{where}: {exc.strerror or exc}")

    def _spawn(self, idx: int, spec: Any, intended: float) -> None:
        t = asyncio.get_running_loop().create_task(self._one(idx, spec, intended))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _take(self, counter: Iterator[int]) -> tuple[int, Any] | None:
        for idx in counter:
            if self._total is not None and idx >= self._total:
                return None
            try:
                spec = next(self.specs)
            except StopIteration:
                return None
            if self.index_filter is None or self.index_filter(idx):
                return idx, spec
        return None

    # -- schedules -----------------------------------------------------------------------------
    async def _open_loop(self) -> None:
        clock = self.clock
        dur = self.limits.duration_s
        schedule = self.shape.schedule(self.rng, self.specs)
        for _ in itertools.islice(schedule, self.first_index):  # a resumed run starts further on
            pass
        behind = 0
        for idx in itertools.count(self.first_index):
            if self._stop.is_set() or (self._total is not None and idx >= self._total):
                return
            try:
                offset, spec = next(schedule)
            except StopIteration:
                return
            if dur is not None and offset > dur:
                return
            if self.index_filter is not None and not self.index_filter(idx):
                continue
            offset += self.shift_s
            delay = offset - clock()
            if delay > 0:
                # a plain timer (no task and timeout per send, as wait_for made: its CPU capped the rate),
                # checked against the run clock, never the loop's (uvloop's timers and time are in whole
                # milliseconds): no request leaves before its time; the stop flag is looked at every STOP_CHECK_S
                while delay > 0:
                    await asyncio.sleep(delay if delay < STOP_CHECK_S else STOP_CHECK_S)
                    if self._stop.is_set():
                        return
                    delay = offset - clock()
            else:
                behind += 1
                if behind % 64 == 0:  # behind schedule: still let responses and Ctrl-C through
                    await asyncio.sleep(0)
            self._spawn(idx, spec, offset)

    async def _closed_loop(self, n: int) -> None:
        counter = itertools.count(self.first_index)
        dur = self.limits.duration_s

        async def stream() -> None:
            while not self._stop.is_set():
                if dur is not None and self.clock() - self.shift_s >= dur:
                    return
                got = self._take(counter)
                if got is None:
                    return
                idx, spec = got
                t = asyncio.get_running_loop().create_task(self._one(idx, spec, self.clock()))
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
                # the request is its own task (cancelled with the others at a stop: _one records it), awaited
                # here without asyncio.wait's waiter and callbacks; a stream cancelled while it waits cancels
                # it, as the stop that cancels streams does anyway
                await t

        await asyncio.gather(*(stream() for _ in range(n)))

    def _skip_specs(self) -> None:
        for _ in range(self.first_index):
            try:
                next(self.specs)
            except StopIteration:
                return

    async def run(self) -> RunStats:
        self.stats.started_wall = time.time()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        streams = self.shape.streams
        if streams is not None:
            self._skip_specs()
            sched = asyncio.create_task(self._closed_loop(streams))
        else:
            sched = asyncio.create_task(self._open_loop())
        stopper = asyncio.create_task(self._stop.wait())
        await asyncio.wait({sched, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not sched.done():
            sched.cancel()
            await asyncio.gather(sched, return_exceptions=True)
        elif (failure := sched.exception()) is not None:
            stopper.cancel()
            raise failure
        # Drain: wait for in-flight requests (bounded after --duration), cancel the rest.
        if self._tasks and not self._stop.is_set():
            grace = self.limits.grace_s if self.limits.duration_s is not None else None
            waiter = asyncio.gather(*list(self._tasks), return_exceptions=True)
            done, _ = await asyncio.wait((waiter, stopper), timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            if waiter not in done:
                # the gather ends with a CancelledError *exception* once its children are cancelled
                # below: retrieve it, or asyncio logs "_GatheringFuture exception was never retrieved"
                waiter.add_done_callback(_retrieve)
                waiter.cancel()
        stopper.cancel()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        wall = time.perf_counter() - wall0
        self.stats.wall_s = wall
        self.stats.client_cpu = (time.process_time() - cpu0) / wall if wall > 0 else None
        return self.stats


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
