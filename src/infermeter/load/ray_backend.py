"""Load beyond one host: the same striped workers as Ray actors, on one timeline.

``--ray ADDRESS`` (``auto`` = the cluster this machine belongs to, ``local`` =
a private single-machine cluster, or ``HOST:PORT`` / ``ray://HOST:10001``)
runs each worker of ``--workers N`` as a Ray actor, spread over the nodes
(``SPREAD``, one CPU each). Ray is imported only here and only when asked for;
without the ``distributed`` extra the error says what to install.

Clocks: before the start, the driver asks every actor for its wall clock a few
times and keeps the sample with the shortest round trip: offset = actor time -
(send + receive) / 2, known within +- rtt / 2 (:func:`estimate_offset`). The
common start is a driver wall time; each actor starts at that time *plus its
offset*, so every record lands on the driver's timeline. Offsets and their
round trips go into ``run.json`` (``runtime.workers``). Each actor journals on
its own node and hands its journal back at the end; the driver writes it to
``workers/<k>/`` and merges exactly as for local processes::

    pool = RayPool(plan, run_dir, address="auto")
    stats = await pool.run(on_start=...)      # one dict per worker, with node and clock offset
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infermeter.errors import UserError
from infermeter.load import ray_auth
from infermeter.load.workers import START_SLACK_S, MergedLive, WorkerPlan, WorkerRun, worker_dir
from infermeter.records import store

CLOCK_SAMPLES = 5


def ray_module(address: str | None = None) -> Any:
    """Import Ray, deciding its token-authentication mode for ``address`` first (:mod:`.ray_auth`)."""
    if address is not None:
        ray_auth.prepare(address)
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'infermeter[distributed]' (or pip install 'ray>=2.9')") from None
    return ray


def ray_connect(ray: Any, address: str, workers: int, **init: Any) -> bool:
    """Join (or, for ``local``, start) the cluster unless connected; True when this call connected.
    ``init``: more ``ray.init`` arguments (e.g. a runtime_env)."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR", **init}
    if address == "local":
        kw["num_cpus"] = max(os.cpu_count() or 1, workers)
        ray.init(address="local", **kw)
    else:
        log: list[str] = []
        try:
            with ray_auth.connecting(log):
                ray.init(address=address, **kw)
        except (ConnectionError, RuntimeError) as exc:
            hint = ray_auth.failure_hint(address, "".join(log))
            raise UserError(f"--ray {address}: cannot connect to a Ray cluster: {hint or exc}") from None
    return True


def estimate_offset(samples: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(offset, rtt) from (driver send, remote time, driver receive) samples: the shortest round trip wins."""
    if not samples:
        raise ValueError("no clock samples")
    t1, ta, t2 = min(samples, key=lambda s: s[2] - s[0])
    return ta - (t1 + t2) / 2, t2 - t1


class _LoadWorker:
    """The actor body (wrapped with ``ray.remote`` at run time)."""

    def __init__(self, plan: WorkerPlan, k: int) -> None:
        self.tmp = tempfile.mkdtemp(prefix=f"infermeter-ray-{k}-")
        self.work = WorkerRun(plan, k, Path(self.tmp))

    def prepare(self) -> dict[str, Any]:
        self.work.prepare()
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def now(self) -> float:
        return time.time()

    async def run(self, start_wall_local: float) -> tuple[dict[str, Any], bytes]:
        stats = await self.work.run(start_wall_local)
        path = Path(self.tmp) / store.JOURNAL
        return stats, path.read_bytes() if path.exists() else b""

    def stop(self) -> None:
        self.work.stop()

    def snapshot(self) -> dict[str, Any]:
        return self.work.snapshot()


class RayPool:
    """Run a :class:`WorkerPlan` as Ray actors (see the module docstring)."""

    def __init__(self, plan: WorkerPlan, run_dir: Path, address: str) -> None:
        self.plan, self.run_dir, self.address = plan, Path(run_dir), address
        self.live = MergedLive(plan.workers)
        self._actors: list[Any] = []
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        for a in self._actors:
            a.stop.remote()

    def _init(self, ray: Any) -> bool:
        return ray_connect(ray, self.address, self.plan.workers)

    async def run(self, on_start: Callable[[float], None] | None = None) -> list[dict[str, Any]]:
        ray = ray_module(self.address)
        started = await asyncio.to_thread(self._init, ray)
        try:
            return await self._run(ray, on_start)
        finally:
            for a in self._actors:
                ray.kill(a)
            if started:
                ray.shutdown()

    async def _run(self, ray: Any, on_start: Callable[[float], None] | None) -> list[dict[str, Any]]:
        actor_cls = ray.remote(num_cpus=1, max_concurrency=16)(_LoadWorker)
        n = self.plan.workers
        self._actors = [actor_cls.options(scheduling_strategy="SPREAD").remote(self.plan, k) for k in range(n)]
        try:
            nodes = await asyncio.gather(*(a.prepare.remote() for a in self._actors))
        except ray.exceptions.RayError as exc:
            mode = os.environ.get(ray_auth.MODE)
            why = (f" (this process runs with {ray_auth.MODE}={mode}: if the cluster does not use token "
                   f"authentication, unset it)" if mode else "")
            raise UserError(f"--ray {self.address}: the load workers could not start on the cluster: "
                            f"{type(exc).__name__}{why}") from None
        offsets = [await self._offset(a) for a in self._actors]
        start_wall = time.time() + START_SLACK_S
        if on_start is not None:
            on_start(start_wall)
        refs = [a.run.remote(start_wall + off) for a, (off, _) in zip(self._actors, offsets)]
        if self._stopped:
            self.stop()
        watcher = asyncio.create_task(self._watch())
        try:
            results = await asyncio.gather(*refs)
        finally:
            watcher.cancel()
        out = []
        for k, ((stats, journal), node, (off, rtt)) in enumerate(zip(results, nodes, offsets)):
            d = worker_dir(self.run_dir, k)
            d.mkdir(parents=True, exist_ok=True)
            (d / store.JOURNAL).write_bytes(journal)
            out.append({**stats, **node, "clock_offset_s": off, "clock_rtt_s": rtt})
        return out

    async def _offset(self, actor: Any) -> tuple[float, float]:
        samples = []
        for _ in range(CLOCK_SAMPLES):
            t1 = time.time()
            ta = await actor.now.remote()
            samples.append((t1, ta, time.time()))
        return estimate_offset(samples)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            snaps = await asyncio.gather(*(a.snapshot.remote() for a in self._actors), return_exceptions=True)
            for k, s in enumerate(snaps):
                if isinstance(s, dict):
                    self.live.snaps[k] = s
