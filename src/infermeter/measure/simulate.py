"""Offline simulation: a twin, an arrival source, a run directory, all in virtual time.

Writes what ``infermeter run`` writes -- ``requests.parquet``, ``run.json`` (``source:
"simulated"``) and ``summary.json`` -- so every analysis and report reads both alike::

    twin = build_twin("llama-3.1-70b", "4xa100-80gb:tp4")
    src = OpenLoopSource(shape.arrivals(rng), iter(workload.requests()), duration_s=3600)
    res = simulate(twin, src, out_dir=Path("results/sim"), run=run_header)
    res.summary["output_token_throughput"], res.wall_s

Summary: every batch of records goes to the run's
:class:`~infermeter.analysis.accumulator.Accumulator` as it is written -- the same builder and
verdict as a measured run -- so no run, however long (the 72-hour soak), reads its records back;
``summary_method`` says whether its percentiles are exact or from the accumulator's histograms.

``server_metrics`` (vLLM's signals, as a scrape of the twin would give them):
time-weighted means over the run of KV usage, running and waiting requests, their
maxima, prefix-cache hits / queries (tokens) and preemptions, summed over engines.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.analysis.accumulator import EXACT_LIMIT, Accumulator
from infermeter.measure.recorder import RecordSink
from infermeter.records import store
from infermeter.twin.deploy import Twin
from infermeter.twin.engine import Engine
from infermeter.twin.loop import ArrivalSource, LoopStats, VirtualClock, run_virtual


@dataclass
class SimulationResult:
    run_dir: Path
    summary: dict[str, Any]
    run: dict[str, Any]
    wall_s: float
    records: int
    virtual_s: float
    peak_rss_mib: float


def simulate(
    twin: Twin,
    source: ArrivalSource,
    *,
    out_dir: Path,
    run: dict[str, Any],
    warmup: int = 0,
    token_times: bool = False,
    exact_summary_limit: int = EXACT_LIMIT,
    on_progress: Callable[[float, int], None] | None = None,
) -> SimulationResult:
    """Run ``source`` through ``twin``'s engines; write the run directory; return the summary."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    engines = twin.engines(keep_token_times=token_times)
    tmp = out_dir / (store.PARQUET + ".tmp")
    flushes = [0]

    def on_flush(rows: int, t_virtual: float) -> None:
        flushes[0] += 1
        if flushes[0] % 16 == 0:
            gc.collect()  # the loop runs with the cyclic GC paused (see _gc_paused)
        if on_progress is not None:
            on_progress(t_virtual, rows)

    acc = Accumulator.for_run(run, exact_limit=exact_summary_limit, derive_itl=not token_times)
    sink = RecordSink(tmp, acc, warmup=warmup, token_times=token_times, on_flush=on_flush)
    clock = VirtualClock()
    stats = LoopStats()
    try:
        with _gc_paused():
            run_virtual(engines, source, sink.add, clock, stats=stats)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    sink.close()
    os.replace(tmp, out_dir / store.PARQUET)
    run = dict(run)
    run["source"] = "simulated"
    run["server_metrics"] = server_metrics(engines, stats)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    run["runtime"] = {"wall_s": wall, "virtual_s": stats.end, "records": sink.rows, "peak_rss_mib": rss,
                      "steps": sum(e.steps for e in engines)}
    summary = sink.accumulator.summary(run).to_json()
    summary["run_dir"] = str(out_dir)
    store.write_json(out_dir / store.RUN, run)
    store.write_json(out_dir / store.SUMMARY, summary)
    return SimulationResult(run_dir=out_dir, summary=summary, run=run, wall_s=wall, records=sink.rows,
                            virtual_s=stats.end, peak_rss_mib=rss)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic GC: the loop makes millions of short-lived, cycle-free objects
    (reference counting frees them), and generation scans cost ~13% of the run. A full
    collection still runs every 16 record batches."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def server_metrics(engines: list[Engine], stats: LoopStats) -> dict[str, Any]:
    """The run's ``server_metrics`` block from the engines' own counters (see module docstring)."""
    span = stats.end if stats.end > 0 else None
    lanes = len(engines)
    queries = sum(e.prefix_queries for e in engines)
    hits = sum(e.prefix_hits for e in engines)
    running_int = sum(e.running_integral for e in engines)

    def mean(x: float) -> float | None:
        return None if span is None else x / span

    return {
        "engine": "infermeter-twin (simulated)",
        "kv_cache_usage_mean": None if span is None else sum(e.usage_integral for e in engines) / (span * lanes),
        "kv_cache_usage_max": max(e.max_usage for e in engines),
        "num_requests_running_mean": mean(running_int),
        "num_requests_running_max": sum(e.max_running for e in engines),
        "num_requests_waiting_mean": mean(max(stats.in_system_s - running_int, 0.0)),
        "num_requests_waiting_max": sum(e.max_waiting for e in engines),
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "prefix_cache_hit_rate_source": "counters" if queries else None,
        "num_preemptions": sum(e.num_preemptions for e in engines),
        "prompt_tokens": sum(e.prompt_tokens_total for e in engines),
        "generation_tokens": sum(e.generation_tokens_total for e in engines),
        "engine_steps": sum(e.steps for e in engines),
        "busy_fraction": None if span is None else sum(e.busy_s for e in engines) / (span * lanes),
        "in_system_mean": mean(stats.in_system_s),
    }
