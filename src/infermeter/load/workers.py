"""One schedule, many processes: stripe it, start all workers at one wall time, merge exactly.

Promise: worker k of n sends exactly the schedule indices ``idx % n == k`` of
the *same* schedule (same seed, same arrivals, same request specs), so the
union of the workers is the single-process run, with no index sent twice.
All workers share one run clock: each maps ``clock() == 0`` to the same
absolute wall time ``start_wall``, chosen by the parent only once every
worker is ready (a start barrier). Each worker journals its records to
``workers/<k>/requests.jsonl``; :func:`merge_records` joins them into one
table ordered by request id and refuses duplicates::

    plan = WorkerPlan(client=client_cfg, shape=shape, limits=limits, seed=0, workers=2,
                      make_specs=partial(specs_for, cfg))
    pool = ProcessPool(plan, run_dir)
    stats = await pool.run(on_start=lambda t0_wall: ...)   # one dict per worker
    table, report = merge_records(worker_tables(run_dir, 2))

Closed loops split the streams (``split(c, n)``: 5 over 2 -> [3, 2]) and never
use more workers than streams; ``--max-concurrency`` is split the same way.
:class:`WorkerRun` is the part that runs inside a worker (a process here, a
Ray actor in ``load.ray_backend``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.client import eventloop
from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.client.session import make_session
from infermeter.errors import DataError, UserError
from infermeter.load.runner import Limits, Runner
from infermeter.load.shapes import BaseShape, ConstantConcurrency
from infermeter.load.stats import LiveStats
from infermeter.records import store
from infermeter.records.record import ARROW_SCHEMA

START_SLACK_S = 0.3  # between the barrier and the common start
LIVE_EVERY_S = 0.5


class Stripe:
    """``Stripe(k, n)(idx)`` is true for the indices worker k of n sends."""

    def __init__(self, k: int, n: int) -> None:
        self.k, self.n = k, n

    def __call__(self, idx: int) -> bool:
        return idx % self.n == self.k


def split(total: int, n: int) -> list[int]:
    """``total`` as n near-equal parts, larger first: split(5, 2) == [3, 2]."""
    return [total // n + (1 if k < total % n else 0) for k in range(n)]


def effective_workers(shape: BaseShape, n: int) -> int:
    """A closed loop never gets more workers than streams."""
    if shape.streams is not None:
        return max(1, min(n, shape.streams))
    return max(1, n)


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """Everything a worker needs, picklable (``make_specs`` must be a module-level function or partial)."""

    client: ClientConfig
    shape: BaseShape
    limits: Limits
    seed: int
    workers: int
    make_specs: Callable[[], Iterator[Any]]
    connect_timeout_s: float = 10.0
    first_index: int = 0  # resumed runs: see load.resume
    shift_s: float = 0.0

    def shape_for(self, k: int) -> BaseShape:
        """Worker k's shape: a share of a closed loop's streams, or the whole (striped) schedule."""
        if self.shape.streams is not None:
            return ConstantConcurrency(concurrency=split(self.shape.streams, self.workers)[k])
        return self.shape

    def limits_for(self, k: int) -> Limits:
        cap = self.limits.max_concurrency
        return dataclasses.replace(self.limits, max_concurrency=None if cap is None else max(1, split(cap, self.workers)[k]))


def primed(specs: Iterator[Any]) -> Iterator[Any]:
    """``specs`` with its first item drawn now (the same items, in the same order)."""
    it = iter(specs)
    for first in it:
        return itertools.chain((first,), it)
    return iter(())


def aligned_clock(start_wall: float) -> Callable[[], float]:
    """A monotonic clock reading 0 at wall time ``start_wall`` (``time.time()`` seconds)."""
    base = time.perf_counter() + (start_wall - time.time())
    return lambda: time.perf_counter() - base


class WorkerRun:
    """One worker's share of the run: ``prepare()``, then ``await run(start_wall)``; ``stop()`` ends it.

    Records go to ``sink.write`` (default: a journal in ``journal_dir``)."""

    def __init__(self, plan: WorkerPlan, k: int, journal_dir: Path, *, sink: Any = None,
                 live: LiveStats | None = None) -> None:
        self.plan, self.k, self.journal_dir = plan, k, Path(journal_dir)
        self.sink = sink
        self.live = live or LiveStats()
        self.records = 0
        self.runner: Runner | None = None
        self._specs: Iterator[Any] | None = None
        self._stopped = False

    def prepare(self) -> Iterator[Any]:
        """Build the request specs and draw the first one now, before the run's clock starts.

        A workload generator may set itself up lazily at its first ``next()`` (tokenizers, text
        pools); done at the first send, that cost would be the client's schedule lag and the verdict
        would blame the machine. Whatever it costs is paid here instead, and a generator that cannot
        make its first request fails here, before the run starts (no run directory claims a start)."""
        self._specs = primed(self.plan.make_specs())
        return self._specs

    def stop(self) -> None:
        self._stopped = True
        if self.runner is not None:
            self.runner.stop()

    def clock(self) -> float:
        return self.runner.clock() if self.runner else 0.0

    def snapshot(self) -> dict[str, Any]:
        return self.live.snapshot(self.clock())

    async def run(self, start_wall: float) -> dict[str, Any]:
        specs = self._specs if self._specs is not None else self.prepare()
        plan, k = self.plan, self.k
        clock = aligned_clock(start_wall)
        journal = self.sink if self.sink is not None else store.Journal(self.journal_dir)

        def on_record(rec: Any) -> None:
            journal.write(rec)
            self.records += 1

        async with make_session(connect_timeout_s=plan.connect_timeout_s, max_connections=0) as session, \
                OpenAIClient(plan.client, session, clock) as client:
            self.runner = Runner(send=client.send, specs=specs, shape=plan.shape_for(k),
                                 limits=plan.limits_for(k), clock=clock, on_record=on_record,
                                 rng=np.random.default_rng(plan.seed), live=self.live,
                                 index_filter=Stripe(k, plan.workers) if plan.workers > 1 else None, worker=k,
                                 first_index=plan.first_index, shift_s=plan.shift_s)
            if self._stopped:
                self.runner.stop()
            if clock() < 0:
                await asyncio.sleep(-clock())
            try:
                stats = await self.runner.run()
            finally:
                if self.sink is None:
                    journal.close()
        return {"early_failure": stats.extra.get("early_failure"),
                "worker": k, "pid": os.getpid(), "records": self.records, "sent": stats.sent,
                "cap_held": stats.cap_held, "max_in_flight": stats.max_in_flight, "client_cpu": stats.client_cpu,
                "wall_s": stats.wall_s, "interrupted": stats.interrupted, "halted": stats.halted,
                "auth_failure": stats.extra.get("auth_failure"), "write_failure": stats.extra.get("write_failure"),
                "http_client": client.http_client, "event_loop": eventloop.running()}


# -- processes ---------------------------------------------------------------------------------

def _process_main(plan: WorkerPlan, k: int, journal_dir: str, conn: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and sends "stop"
    try:
        work = WorkerRun(plan, k, Path(journal_dir))
        work.prepare()
        conn.send(("ready", os.getpid()))
        msg = conn.recv()
        if msg[0] != "start":
            return
        conn.send(("done", eventloop.run(_serve(work, float(msg[1]), conn))))
    except BaseException as exc:  # report, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))


async def _serve(work: WorkerRun, start_wall: float, conn: Any) -> dict[str, Any]:
    loop = asyncio.get_running_loop()

    def on_message() -> None:
        try:
            if conn.poll() and conn.recv()[0] == "stop":
                work.stop()
        except (EOFError, OSError):
            work.stop()

    async def report() -> None:
        while True:
            await asyncio.sleep(LIVE_EVERY_S)
            conn.send(("live", work.snapshot()))

    loop.add_reader(conn.fileno(), on_message)
    reporter = asyncio.create_task(report())
    try:
        return await work.run(start_wall)
    finally:
        reporter.cancel()
        loop.remove_reader(conn.fileno())


class MergedLive:
    """Sum of the workers' live snapshots, for the progress display."""

    def __init__(self, n: int) -> None:
        self.snaps: list[dict[str, Any] | None] = [None] * n

    def snapshot(self, now: float) -> dict[str, Any]:
        snaps = [s for s in self.snaps if s]
        ttft = [s["ttft_p50_ms"] for s in snaps if s.get("ttft_p50_ms") is not None]
        out = {key: sum(s[key] for s in snaps) for key in ("done", "errors", "in_flight", "req_per_s", "out_tok_per_s")}
        out["ttft_p50_ms"] = float(np.mean(ttft)) if ttft else None
        return out


class ProcessPool:
    """Run a :class:`WorkerPlan` in ``plan.workers`` spawned processes (see the module docstring)."""

    def __init__(self, plan: WorkerPlan, run_dir: Path, ready_timeout_s: float = 120.0) -> None:
        self.plan, self.run_dir, self.ready_timeout_s = plan, Path(run_dir), ready_timeout_s
        self.live = MergedLive(plan.workers)
        self._conns: list[Any] = []
        self._stop_sent = False

    def stop(self) -> None:
        self._stop_sent = True
        for c in self._conns:
            try:
                c.send(("stop",))
            except (OSError, ValueError):
                pass

    async def run(self, on_start: Callable[[float], None] | None = None) -> list[dict[str, Any]]:
        ctx = mp.get_context("spawn")
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]] = asyncio.Queue()
        procs = []
        for k in range(self.plan.workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_process_main, args=(self.plan, k, str(worker_dir(self.run_dir, k)), child),
                            name=f"infermeter-worker-{k}", daemon=True)
            p.start()
            child.close()
            self._conns.append(parent)
            procs.append(p)
            loop.add_reader(parent.fileno(), _reader(parent, k, inbox))
        try:
            return await self._drive(procs, inbox, on_start)
        finally:
            for c in self._conns:
                loop.remove_reader(c.fileno())
            await loop.run_in_executor(None, _join, procs)
            for c in self._conns:
                c.close()

    async def _drive(self, procs: list[Any], inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]],
                     on_start: Callable[[float], None] | None) -> list[dict[str, Any]]:
        n = len(procs)
        ready: set[int] = set()
        deadline = time.monotonic() + self.ready_timeout_s
        while len(ready) < n:
            k, msg = await _next(inbox, procs, deadline, "starting")
            if msg[0] == "ready":
                ready.add(k)
            elif msg[0] == "error":
                self.stop()
                raise UserError(f"load worker {k} failed to start: {msg[1]}")
        start_wall = time.time() + START_SLACK_S
        if on_start is not None:
            on_start(start_wall)
        for c in self._conns:
            c.send(("start", start_wall))
        if self._stop_sent:
            self.stop()
        results: dict[int, dict[str, Any]] = {}
        while len(results) < n:
            k, msg = await _next(inbox, procs, None, "running", done=set(results))
            if msg[0] == "live":
                self.live.snaps[k] = msg[1]
            elif msg[0] == "done":
                results[k] = msg[1]
            elif msg[0] == "error":
                results[k] = {"worker": k, "error": msg[1]}
            elif msg[0] == "exited":
                results[k] = {"worker": k, "error": f"worker process exited with code {msg[1]}"}
        return [results[k] for k in range(n)]


def _reader(conn: Any, k: int, inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]]) -> Callable[[], None]:
    def read() -> None:
        try:
            while conn.poll():
                inbox.put_nowait((k, conn.recv()))
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
    return read


async def _next(inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]], procs: list[Any], deadline: float | None,
                what: str, done: set[int] | None = None) -> tuple[int, tuple[Any, ...]]:
    """The next message; a worker that died silently becomes an ("exited", code) message."""
    while True:
        try:
            return await asyncio.wait_for(inbox.get(), 0.5)
        except TimeoutError:
            pass
        for k, p in enumerate(procs):
            if k not in (done or ()) and p.exitcode is not None and inbox.empty():
                await asyncio.sleep(0.2)  # let its last message arrive
                if inbox.empty():
                    if what == "starting":
                        raise UserError(f"load worker {k} exited with code {p.exitcode} while starting")
                    return k, ("exited", p.exitcode)
        if deadline is not None and time.monotonic() > deadline:
            raise UserError("load workers not ready in time (see --workers)")


def _join(procs: list[Any]) -> None:
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()


# -- merging -----------------------------------------------------------------------------------

def worker_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / "workers" / str(k)


def worker_tables(run_dir: Path, n: int | None = None) -> list[pa.Table]:
    """Each worker's records (journal or parquet); ``n`` None: every ``workers/<k>`` present."""
    base = Path(run_dir) / "workers"
    ks = range(n) if n is not None else sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())
    out = []
    for k in ks:
        d = worker_dir(run_dir, k)
        out.append(store.load_table(d) if (d / store.JOURNAL).exists() or (d / store.PARQUET).exists()
                   else ARROW_SCHEMA.empty_table())
    return out


def merge_records(tables: list[pa.Table], expected: int | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """One table ordered by request id; DataError on a duplicated id. ``expected``: ids 0..expected-1
    should all be present (the report counts the missing ones)."""
    table = pa.concat_tables([t.select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA) for t in tables])
    ids = np.asarray(table.column("request_id").to_numpy(), dtype=np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = uniq[counts > 1]
        raise DataError(f"worker records overlap: request ids {dup[:5].tolist()} appear more than once")
    table = table.take(pc.sort_indices(table, [("request_id", "ascending")]))
    report: dict[str, Any] = {"records": int(ids.size), "per_worker": [t.num_rows for t in tables], "duplicates": 0}
    if expected is not None:
        report["missing"] = int(expected - np.count_nonzero(uniq < expected))
    return table, report
