"""Client capacity, measured before a run against the embedded zero-delay emulator.

A load generator that cannot keep up makes the server look slower than it is.
Before a run whose requested load could come near this machine's limit,
:func:`calibrate` starts the emulator in zero-delay mode (a server that costs
nearly nothing), sends the run's own request specs for ~1 s from a closed loop
of 64 streams, and reports how many requests per second one client process
completes. :func:`capacity_warning` compares the requested load with it::

    cal = await calibrate(make_specs, seconds=1.0)
    cal["capacity_rps"]                                   # e.g. 1800.0 per process
    capacity_warning(cal, requested_rps=3000, workers=1)  # "requested 3000 req/s > 80% of ..."

Small loads skip calibration (:func:`worth_calibrating`): under
``SKIP_BELOW_RPS`` requests/s and ``SKIP_BELOW_TOKENS`` streamed tokens/s the
client is nowhere near its limit. Several workers multiply the per-process
figure by ``min(workers, CPU cores)`` (an estimate, stated as such). Results are
cached per process and spec shape, so a sweep or a campaign calibrates once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.client.session import make_session
from infermeter.load.runner import Limits, Runner
from infermeter.load.shapes import ConstantConcurrency
from infermeter.records.record import RequestRecord

SKIP_BELOW_RPS = 50.0
SKIP_BELOW_TOKENS = 5000.0
HEADROOM = 0.8  # requested load above this share of capacity gets the warning
CONCURRENCY = 64
_CACHE: dict[tuple[int, int], dict[str, Any]] = {}


def worth_calibrating(requested_rps: float | None, tokens_per_request: float) -> bool:
    if requested_rps is None:
        return False
    return requested_rps > SKIP_BELOW_RPS or requested_rps * tokens_per_request > SKIP_BELOW_TOKENS


async def calibrate(make_specs: Callable[[], Iterator[Any]], seconds: float = 1.0,
                    concurrency: int = CONCURRENCY) -> dict[str, Any]:
    """One client process's completed requests/s against the zero-delay emulator (see module docstring)."""
    from infermeter.engines.emulator.process import EmulatorProcess

    specs = list(_take(make_specs(), 256))
    tokens = float(np.mean([s.max_tokens for s in specs])) if specs else 0.0
    key = (int(round(tokens)), concurrency)
    if key in _CACHE:
        return _CACHE[key] | {"cached": True}
    done = {"ok": 0}

    def count(rec: RequestRecord) -> None:
        done["ok"] += rec.outcome == "ok"

    with EmulatorProcess(["--zero-delay", "--max-concurrency", "100000"]) as emu:
        t_base = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - t_base

        async with make_session(max_connections=0) as session, \
                OpenAIClient(ClientConfig(base_url=emu.base_url, model="infermeter-emulator"), session, clock) as client:
            warm = Runner(send=client.send, specs=iter(specs * 4), shape=ConstantConcurrency(concurrency=concurrency),
                          limits=Limits(requests=min(len(specs) * 4, 400)), clock=clock, on_record=lambda r: None)
            await warm.run()
            cpu0 = time.process_time()
            runner = Runner(send=client.send, specs=_cycle(specs), shape=ConstantConcurrency(concurrency=concurrency),
                            limits=Limits(duration_s=clock() + seconds, grace_s=2.0), clock=clock, on_record=count)
            stats = await runner.run()
            cpu = time.process_time() - cpu0
    rps = done["ok"] / stats.wall_s if stats.wall_s > 0 else 0.0
    result = {"capacity_rps": rps, "capacity_tokens_per_s": rps * tokens, "tokens_per_request": tokens,
              "concurrency": concurrency, "seconds": stats.wall_s, "completed": done["ok"],
              "cpu_ms_per_request": 1000 * cpu / done["ok"] if done["ok"] else None,
              "against": "embedded emulator, zero-delay mode"}
    _CACHE[key] = result
    return result


def capacity_warning(cal: dict[str, Any], requested_rps: float, workers: int = 1,
                     distributed: bool = False) -> str | None:
    """A one-line warning when the requested rate exceeds ``HEADROOM`` of the (scaled) capacity."""
    per = float(cal.get("capacity_rps") or 0.0)
    scale = workers if distributed else min(workers, os.cpu_count() or 1)
    cap = per * max(1, scale)
    if cap <= 0 or requested_rps <= HEADROOM * cap:
        return None
    est = f" (estimated: {per:.0f} per process x {scale})" if scale > 1 else ""
    return (f"client_capacity: requested {requested_rps:.0f} req/s exceeds {HEADROOM:.0%} of this client's "
            f"measured capacity {cap:.0f} req/s{est}; results may measure the client, not the server "
            "(use --workers N, or --ray)")


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return


def _cycle(specs: list[Any]) -> Iterator[Any]:
    while specs:
        yield from specs
