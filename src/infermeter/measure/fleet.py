"""A fleet simulation split over worker processes (``--workers N``) or Ray actors (``--ray ADDRESS``).

The replicas are split across workers (:mod:`infermeter.measure.fleetpart`: worker ``w`` of ``W``
simulates replicas ``j % W == w``); the router is decided from the arrival stream alone, so the
workers never wait for each other. This process merges what they send, window by window, into
the same files a one-process run writes: the window's tables from every worker in the canonical
order (``(ended_at, request_id)``), row groups of a fixed size, the one accumulator, and
``server_metrics`` summed over the engines in engine order. So the summary is the same bytes
for any number of workers (a test asserts it)::

    plan = SimPlan(RunConfig(rate=48, duration_s=72 * 3600, profile="chat", workers=2),
                   TwinSpec(model="llama-3.1-70b", gpu="800xa100-80gb:tp4"))
    plan.run()          # SimPlan.run -> run_fleet when workers > 1 or --ray

Local workers get their requests from one routed feeder process (it makes the stream once);
Ray actors make the stream themselves (:mod:`infermeter.measure.fleetray`). ``run.json``
``runtime`` says how many workers there were and on what.
"""

from __future__ import annotations

import math
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from infermeter.analysis.accumulator import EXACT_LIMIT
from infermeter.errors import UserError
from infermeter.measure.child import Child, start_child
from infermeter.measure.config import workload_args
from infermeter.measure.fleetpart import RouteSpec, fleet_jobs
from infermeter.measure.recorder import malloc_pool, merge_windows
from infermeter.measure.simulate import WINDOW, SimulationResult, finish_run, gc_paused, open_writer
from infermeter.twin.loop import LoopStats

QUEUE_WINDOWS = 4  # windows buffered per worker in this process


@malloc_pool()  # the merged record batches on malloc (see there)
def run_fleet(plan: Any, out: Path, run: dict[str, Any], *,
              progress: Callable[[float, int], None] | None = None) -> SimulationResult:
    """Simulate ``plan`` over its workers; write the run directory (see the module docstring)."""
    t0 = time.perf_counter()
    cfg = plan.cfg
    if cfg.ray:
        from infermeter.measure.fleetray import RayParts

        parts: Any = RayParts(plan, cfg.ray)
    else:
        parts = LocalParts(plan)
    Path(out).mkdir(parents=True, exist_ok=True)
    writer = open_writer(out, run, plan.token_times, EXACT_LIMIT)
    seen = 0
    try:
        with gc_paused():
            for t, tables in parts.windows():
                table = merge_windows(tables)
                if table is not None:
                    seen += table.num_rows
                    writer.add(table)
                if progress is not None and math.isfinite(t):
                    progress(t, seen)
        finals = parts.finals()
    finally:
        parts.close()
    stats, waiting, loop = assemble(finals, plan.twin.pp)
    if progress is not None:
        progress(loop.end, seen)
    return finish_run(out, run, writer, stats, waiting, loop, t0,
                      runtime={"workers": len(finals), "backend": parts.backend, **parts.describe()}, twin=plan.twin)


def assemble(finals: list[dict[str, Any]], pp: int) -> tuple[list[dict[str, Any]], list[Any], LoopStats]:
    """Every worker's engines in the fleet's engine order, and the loop's totals."""
    by_engine: dict[int, tuple[dict[str, Any], Any]] = {}
    for f in finals:
        for i, (st, wt) in enumerate(zip(f["stats"], f["waiting"])):
            replica, lane = f["replicas"][i // pp], i % pp
            by_engine[replica * pp + lane] = (st, wt)
    order = sorted(by_engine)
    stats = [by_engine[k][0] for k in order]
    waiting = [by_engine[k][1] for k in order]
    loop = LoopStats(end=max((f["loop"]["end"] for f in finals), default=0.0),
                     in_system_s=sum(s["in_system_integral"] for s in stats),
                     arrived=sum(f["loop"]["arrived"] for f in finals), done=sum(f["loop"]["done"] for f in finals),
                     cancelled=sum(f["loop"]["cancelled"] for f in finals))
    return stats, waiting, loop


class LocalParts:
    """Worker processes fed by one routed feeder process; their windows, merged in order."""

    backend = "processes"

    def __init__(self, plan: Any) -> None:
        jobs = fleet_jobs(plan, plan.cfg.workers)
        self.jobs = jobs
        cfg, twin = plan.cfg, plan.twin
        spec = RouteSpec(workload=workload_args(cfg), shape=plan.shape, seed=cfg.seed,
                         limit=jobs[0].limit, duration_s=cfg.duration_s, chars_per_block=plan.calibrate(),
                         block_size=twin.block_size, router=twin.router, replicas=twin.replicas,
                         workers=len(jobs), window=WINDOW, keys=plan.keys)
        pipes = [os.pipe() for _ in jobs]
        self.children: list[Child] = []
        try:
            self.feeder = start_child("infermeter.measure.fleetpart:feed", spec, name="infermeter-fleet-feeder",
                                      fds=tuple((w, "w") for _, w in pipes))
            for job, (r, _) in zip(jobs, pipes):
                self.children.append(start_child("infermeter.measure.fleetpart:work", job,
                                                 name=f"infermeter-fleet-{job.worker}", fds=((r, "r"),)))
        except BaseException:
            self.close()
            raise
        self._queues: list[queue.Queue[Any]] = []
        for c in self.children:
            q: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_WINDOWS)
            threading.Thread(target=_read, args=(c, q), daemon=True, name="infermeter-fleet-read").start()
            self._queues.append(q)
        self._finals: list[dict[str, Any]] = []

    def windows(self) -> Iterator[tuple[float, list[Any]]]:
        k = 0
        while True:
            msgs = [self._get(q) for q in self._queues]
            for m in msgs:
                if m[0] != "window" or m[1] != k:
                    raise UserError(f"fleet worker: out of step at window {k} ({m[0]})")
            t = msgs[0][2]
            yield t, [m[3] for m in msgs]
            k += 1
            if not math.isfinite(t):
                break
        for q in self._queues:
            m = self._get(q)
            if m[0] != "final":
                raise UserError(f"fleet worker: expected its final counters, got {m[0]}")
            self._finals.append(m[1])

    def _get(self, q: queue.Queue[Any]) -> Any:
        m = q.get()
        if m[0] == "error":
            raise UserError(f"fleet worker: {self._feeder_error() or m[1]}")
        return m

    def _feeder_error(self) -> str | None:
        try:
            if self.feeder.conn.poll(0.5):
                msg = pickle.loads(self.feeder.conn.recv_bytes())
                if msg[0] == "error":
                    return f"request feeder: {msg[1]}"
        except (EOFError, OSError):
            pass
        return None

    def finals(self) -> list[dict[str, Any]]:
        return self._finals

    def describe(self) -> dict[str, Any]:
        return {"feeder": "one routed feeder process"}

    def close(self) -> None:
        for c in self.children:
            c.close()
        feeder = getattr(self, "feeder", None)
        if feeder is not None:
            feeder.close()


def _read(child: Child, q: queue.Queue[Any]) -> None:
    try:
        while True:
            msg = pickle.loads(child.conn.recv_bytes())
            q.put(msg)
            if msg[0] in ("final", "error"):
                return
    except (EOFError, OSError):
        q.put(("error", "a worker process ended unexpectedly"))
