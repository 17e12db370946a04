"""A fleet simulation's workers as Ray actors (``simulate --ray auto|local|ADDRESS``).

Each actor (one CPU, spread over the nodes) holds a :class:`~infermeter.measure.fleetpart.FleetPart`
that makes the request stream itself (schedule, workload, and prefix-cache keys for its own
replicas' requests) and hands back its windows a few at a time; the driver asks every actor for
the next ones while it merges the current ones (:mod:`infermeter.measure.fleet`). Actors start
with a fixed ``PYTHONHASHSEED`` (``runtime_env``), as local workers do. ``--workers N`` actors;
with ``--workers 1`` (the default) one per CPU of the cluster, at most one per replica::

    parts = RayParts(plan, "auto")
    for t_end, tables in parts.windows(): ...
    parts.finals()
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from infermeter.load.ray_backend import ray_connect, ray_module
from infermeter.measure.child import HASH_SEED
from infermeter.measure.fleetpart import FleetJob, FleetPart, fleet_jobs

BATCH_WINDOWS = 4  # windows an actor returns per call


class _FleetActor:
    """The actor body (wrapped with ``ray.remote`` at run time)."""

    def __init__(self, job: FleetJob) -> None:
        import gc

        gc.disable()  # short-lived, cycle-free objects (collected by hand between calls)
        self.part = FleetPart(job)
        self._it = self.part.windows()

    def next(self, n: int) -> list[tuple[int, float, Any]]:
        import gc

        out = []
        for _ in range(n):
            item = next(self._it, None)
            if item is None:
                break
            out.append(item)
            if not math.isfinite(item[1]):
                break
        gc.collect(0)
        return out

    def final(self) -> dict[str, Any]:
        import os
        import socket

        import ray

        return {**self.part.final(), "node_id": ray.get_runtime_context().get_node_id(),
                "host": socket.gethostname(), "pid": os.getpid()}


class RayParts:
    """The fleet's workers as Ray actors; their windows, merged in order."""

    backend = "ray"

    def __init__(self, plan: Any, address: str) -> None:
        self.ray = ray = ray_module(address)
        self.address = address
        self._started = ray_connect(ray, address, max(1, plan.cfg.workers),
                                    runtime_env={"env_vars": {"PYTHONHASHSEED": HASH_SEED}})
        workers = plan.cfg.workers
        if workers <= 1:
            workers = int(ray.cluster_resources().get("CPU", 1))
        self.jobs = fleet_jobs(plan, workers)
        actor = ray.remote(num_cpus=1)(_FleetActor)
        self.actors = [actor.options(scheduling_strategy="SPREAD").remote(job) for job in self.jobs]
        self._finals: list[dict[str, Any]] = []

    def windows(self) -> Iterator[tuple[float, list[Any]]]:
        ray = self.ray
        pending = [a.next.remote(BATCH_WINDOWS) for a in self.actors]
        buffers: list[list[tuple[int, float, Any]]] = [[] for _ in self.actors]
        done = [False] * len(self.actors)
        k = 0
        while True:
            for i, a in enumerate(self.actors):
                if not buffers[i]:
                    got = ray.get(pending[i])
                    buffers[i].extend(got)
                    if got and not math.isfinite(got[-1][1]):
                        done[i] = True
                    pending[i] = None if done[i] else a.next.remote(BATCH_WINDOWS)
                    if not buffers[i]:
                        raise RuntimeError(f"Ray fleet worker {i} stopped before window {k}")
            items = [b.pop(0) for b in buffers]
            t = items[0][1]
            yield t, [it[2] for it in items]
            k += 1
            if not math.isfinite(t):
                break
        self._finals = ray.get([a.final.remote() for a in self.actors])

    def finals(self) -> list[dict[str, Any]]:
        return self._finals

    def describe(self) -> dict[str, Any]:
        nodes = {str(f["node_id"]) for f in self._finals if f.get("node_id")}
        return {"ray": self.address, "nodes": len(nodes)}

    def close(self) -> None:
        ray = self.ray
        for a in getattr(self, "actors", []):
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        if self._started:
            ray.shutdown()
