"""One worker's share of a fleet simulation, and the feeder that routes the request stream to the workers.

A fleet is split by replica: worker ``w`` of ``W`` simulates replicas ``j`` with ``j % W == w``.
The router is decided from the arrival stream alone (``round-robin`` or ``session``), so every
request's replica is known before anything is simulated, and a replica's trajectory depends only
on its own requests: the workers never talk to each other. The request stream comes either

- from one **routed feeder** (:func:`feed`, local worker processes): it makes the whole stream
  once (workload, schedule, prefix-cache keys with their reuse across a conversation's turns) and
  sends each worker, window by window, its requests and the window's end; or
- from the worker itself (:class:`FleetPart` with ``feed=None``, Ray actors): it makes the whole
  schedule and workload, and keys only for its own requests.

Each worker runs the one event loop (:class:`~infermeter.twin.loop.EventLoop`) and yields, per
window, its finished requests as one canonical table; :meth:`FleetPart.final` has its engines'
counters for the run's ``server_metrics``::

    part = FleetPart(job)                      # job: FleetJob (picklable)
    for k, t_end, table in part.windows(): ...
    part.final()["stats"]
"""

from __future__ import annotations

import itertools
import pickle
import queue
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from infermeter.errors import UserError
from infermeter.measure.feeder import (
    batch_keys,
    report_error,
    spec_columns,
    timed_specs,
    unpack_requests,
    workload_specs,
)
from infermeter.measure.recorder import WindowSink, reuse_freed_memory
from infermeter.measure.config import workload_args
from infermeter.measure.simulate import WINDOW, engine_stats
from infermeter.twin.deploy import Twin
from infermeter.twin.hashing import KeyMaker, ranges
from infermeter.twin.loop import Boundary, EventLoop, VirtualClock
from infermeter.twin.request import SimRequest
from infermeter.twin.router import Router
from infermeter.twin.sources import PartitionSource
from infermeter.workload import build_workload

PREFETCH = 3  # windows a worker reads ahead of its simulation


@dataclass(frozen=True)
class FleetJob:
    """What one worker needs (picklable)."""

    twin: Twin
    router: str
    workload: dict[str, Any]
    shape: Any
    seed: int
    requests: int | None
    warmup: int
    duration_s: float | None
    cancel_at: float
    token_times: bool
    chars_per_block: int
    window: int
    workers: int
    worker: int
    timeouts: tuple[float | None, float | None] = (None, None)
    keys: bool = True  # prefix-cache keys (False: a keyless stream, measure.feeder)

    @property
    def owned(self) -> list[int]:
        return list(range(self.worker, self.twin.replicas, self.workers))

    @property
    def limit(self) -> int | None:
        return None if self.requests is None else self.requests + self.warmup


class FedSource:
    """The requests a routed feeder sends one worker, window by window (with the windows' ends)."""

    def __init__(self, conn: Any, window: int) -> None:
        self._window = window
        self._windows: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH)
        self._reader = threading.Thread(target=self._read, args=(conn,), daemon=True, name="infermeter-feed")
        self._reader.start()
        self._it = self._requests()
        self._next: Any = None
        self._t = float("inf")
        self._advance()

    def _read(self, conn: Any) -> None:
        try:
            while True:
                msg = pickle.loads(conn.recv_bytes())
                self._windows.put(msg)
                if msg[0] != "window":
                    return
        except (EOFError, OSError) as exc:
            self._windows.put(("error", f"the request feeder ended unexpectedly ({exc})"))

    def _requests(self) -> Iterator[Any]:
        k = 0
        while True:
            msg = self._windows.get()
            if msg[0] == "end":
                return
            if msg[0] == "error":
                raise UserError(f"fleet feeder: {msg[1]}")
            _, t_end, cols = msg
            reqs = unpack_requests(cols[0].tolist(), cols[1], cols[2], cols[3], cols[4], cols[5], cols[7], cols[8])
            for r, rep in zip(reqs, cols[6].tolist()):
                r.replica = rep
                yield r
            k += 1
            if t_end != float("inf"):
                yield Boundary(k * self._window, t_end)

    def _advance(self) -> None:
        r = next(self._it, None)
        self._next, self._t = r, (float("inf") if r is None else r.arrival)

    def next_time(self) -> float:
        return self._t

    def pop(self) -> Any:
        r = self._next
        self._advance()
        return r

    def finished(self, r: SimRequest, now: float) -> None:
        pass


class FleetPart:
    """A worker's replicas, its request stream and the loop (see the module docstring)."""

    def __init__(self, job: FleetJob, feed: Any = None) -> None:
        self.job = job
        twin = job.twin
        owned = job.owned
        self.engines = twin.engines(keep_token_times=job.token_times, replicas=len(owned))
        self.loop = EventLoop(self.engines, lanes=twin.pp, router=Router(job.router, max(1, len(owned))),
                              frontend=twin.frontend, known_arrivals=twin.lanes == 1)
        self.sink = WindowSink(warmup=job.warmup, token_times=job.token_times)
        reuse_freed_memory()  # a worker builds a record table per window
        if feed is not None:
            self.source: Any = FedSource(feed, job.window)
        else:
            router = Router(job.router, twin.replicas)
            local = {g: i for i, g in enumerate(owned)}
            keys: dict[int, list[int]] = {}  # request index -> its keys, made a batch ahead for this worker's own
            keyed = job.keys

            def make(i: int, at: float, spec: Any, replica: int) -> SimRequest:
                r = SimRequest(i, at, spec.input_tokens, spec.max_tokens, keys.pop(i) if keyed else (), at,
                               spec.conversation_id, spec.prefix_group)
                r.replica = replica
                return r

            timed = timed_specs(job.shape, workload_specs(build_workload(**job.workload), keyed), job.seed)
            if keyed:
                timed = _keyed_ahead(timed, router, local, KeyMaker(job.chars_per_block, twin.block_size), keys)
            self.source = PartitionSource(timed, router, local, make, requests=job.requests,
                                          duration_s=job.duration_s if job.shape.open_loop else None,
                                          warmup=job.warmup, window=job.window)

    def windows(self) -> Iterator[tuple[int, float, Any]]:
        """``(window, its end, its canonical table or None)``, the last with end ``inf``."""
        clock = VirtualClock()
        for k, t in self.loop.run(self.source, self.sink.add, clock, cancel_at=self.job.cancel_at,
                                  window=self.job.window, timeouts=self.job.timeouts):
            yield k, t, self.sink.window()

    def final(self) -> dict[str, Any]:
        """Per-engine counters (global engine order is the caller's to restore) and the loop's totals."""
        return {"replicas": self.job.owned, "stats": [engine_stats(e) for e in self.engines],
                "waiting": [e.waiting_series.state() for e in self.engines], "loop": asdict(self.loop.stats)}


def _keyed_ahead(timed: Iterator[tuple[float, Any]], router: Router, owned: dict[int, int], keymaker: KeyMaker,
                 keys: dict[int, list[int]], batch: int = 256) -> Iterator[tuple[float, Any]]:
    """``timed`` unchanged, keying this worker's own requests (``owned`` replicas) ``batch`` at a time into
    ``keys`` (request index -> keys) before they are yielded."""
    i = 0
    while True:
        chunk = list(itertools.islice(timed, batch))
        if not chunk:
            return
        mine = [i + k for k, (_, s) in enumerate(chunk)
                if router.replica_of(i + k, s.conversation_id, s.prefix_group) in owned]
        keys.update(zip(mine, keymaker.lists([chunk[k - i][1] for k in mine])))
        i += len(chunk)
        yield from chunk


def work(job: FleetJob, conn: Any, feed: Any = None) -> None:
    """A worker process (:mod:`infermeter.measure.child`): windows, then its final counters, on ``conn``."""
    import gc

    from infermeter.measure.simulate import gc_paused

    try:
        part = FleetPart(job, feed)
        n = 0
        with gc_paused():
            for k, t, table in part.windows():
                conn.send_bytes(pickle.dumps(("window", k, t, table), protocol=pickle.HIGHEST_PROTOCOL))
                n += 1
                if n % 64 == 0:
                    gc.collect()
        conn.send_bytes(pickle.dumps(("final", part.final()), protocol=pickle.HIGHEST_PROTOCOL))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        report_error(conn, exc)


@dataclass(frozen=True)
class RouteSpec:
    """What the routed feeder needs (picklable)."""

    workload: dict[str, Any]
    shape: Any
    seed: int
    limit: int | None
    duration_s: float | None
    chars_per_block: int
    block_size: int
    router: str
    replicas: int
    workers: int
    window: int
    keys: bool = True  # prefix-cache keys (False: a keyless stream, measure.feeder)


def feed(spec: RouteSpec, conn: Any, *outs: Any) -> None:
    """The routed feeder (:mod:`infermeter.measure.child`): per window, each worker's requests on its pipe."""
    import gc

    gc.disable()
    try:
        router = Router(spec.router, spec.replicas)
        route, w_of = router.replica_of, spec.workers
        keymaker = KeyMaker(spec.chars_per_block, spec.block_size) if spec.keys else None
        timed = iter(timed_specs(spec.shape, workload_specs(build_workload(**spec.workload), spec.keys), spec.seed))
        horizon = spec.duration_s if spec.duration_s is not None else float("inf")
        limit = spec.limit if spec.limit is not None else -1
        rid = 0
        pending = next(timed, None)
        while True:
            at: list[float] = []
            specs: list[Any] = []
            reps: list[int] = []
            first = rid
            end_window = rid + spec.window
            while pending is not None and rid < end_window and rid != limit and pending[0] < horizon:
                t, s = pending
                reps.append(route(rid, s.conversation_id, s.prefix_group))
                at.append(t)
                specs.append(s)
                rid += 1
                pending = next(timed, None)
            t_next = pending[0] if pending is not None else float("inf")
            more = pending is not None and rid != limit and t_next < horizon
            t_end = t_next if more else float("inf")
            kcount, kflat = batch_keys(keymaker, specs)
            rep = np.array(reps, np.int64)
            cols = (np.arange(first, rid, dtype=np.int64), np.array(at, np.float64), *spec_columns(specs),
                    rep // w_of, kcount)
            kstart = np.cumsum(kcount) - kcount
            for w in range(w_of):
                sel = np.flatnonzero(rep % w_of == w)
                arrays = (*(c[sel] for c in cols), kflat[ranges(kstart[sel], kcount[sel])])
                outs[w].send_bytes(pickle.dumps(("window", t_end, arrays), protocol=pickle.HIGHEST_PROTOCOL))
            if not more:
                break
        for o in outs:
            o.send_bytes(pickle.dumps(("end",)))
        conn.send_bytes(pickle.dumps(("done", rid)))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        report_error(conn, exc)


def fleet_jobs(plan: Any, workers: int) -> list[FleetJob]:
    """The fleet's parts: one job per worker (at most one per replica), each simulating its share."""
    cfg, twin = plan.cfg, plan.twin
    w = max(1, min(workers, twin.replicas))
    return [FleetJob(twin=twin, router=twin.router, workload=workload_args(cfg), shape=plan.shape, seed=cfg.seed,
                     requests=cfg.requests, warmup=cfg.warmup, duration_s=cfg.duration_s, cancel_at=plan.cancel_at,
                     token_times=plan.token_times, chars_per_block=plan.calibrate(), window=WINDOW, workers=w,
                     worker=k, timeouts=plan.timeouts, keys=plan.keys) for k in range(w)]
