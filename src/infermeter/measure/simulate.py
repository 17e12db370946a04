"""Offline simulation: a twin, an arrival source, a run directory, all in virtual time.

Writes what ``infermeter run`` writes -- ``requests.parquet``, ``run.json`` (``source:
"simulated"``) and ``summary.json`` -- so every analysis and report reads both alike::

    twin = build_twin("llama-3.1-70b", "4xa100-80gb:tp4")
    src = OpenLoopSource(shape.arrivals(rng), iter(workload.requests()), duration_s=3600)
    res = simulate(twin, src, out_dir=Path("results/sim"), run=run_header)
    res.summary["output_token_throughput"], res.wall_s

This is the one-process path (any source, any router); :mod:`infermeter.measure.fleet` splits a
fleet over processes or Ray actors and ends in the same :func:`finish_run`. Records leave the
loop in windows, are written in the canonical order (``(ended_at, request_id)``) in fixed row
groups and go batch by batch to the run's
:class:`~infermeter.analysis.accumulator.Accumulator` -- the same builder and verdict as a
measured run -- so no run, however long, reads its records back, and the summary does not
depend on how many processes simulated it. ``cancel_at`` (duration + ``grace_s``) ends the run
as a measured one ends: what is still in flight is cancelled; ``timeouts`` are the clients'
(first token, total) and fail a request as the client would (:mod:`infermeter.twin.loop`).

``server_metrics`` (vLLM's signals, as a scrape of the twin would give them): time-weighted
means over the run of KV usage, running and waiting requests, their maxima, prefix-cache hits /
queries (tokens) and preemptions, summed over engines in engine order; and
``num_requests_waiting_start`` / ``_end``, the fleet's waiting queue (time-weighted mean, summed
over engines) over the first and the last tenth of the arrival span, which the verdict reads as
queue-growth evidence of saturation.
"""

from __future__ import annotations

import gc
import math
import os
import pickle
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.analysis.accumulator import EXACT_LIMIT, Accumulator
from infermeter.errors import DataError, UserError
from infermeter.measure import recorder
from infermeter.measure.intervals import prediction_intervals
from infermeter.measure.recorder import RecordWriter, WindowSink
from infermeter.measure.thinking import Thinking
from infermeter.records import store
from infermeter.telemetry.spec_decode import spec_decode_block
from infermeter.twin.deploy import Twin
from infermeter.twin.engine import Engine
from infermeter.twin.hashing import KEY_SCHEME
from infermeter.twin.loop import ArrivalSource, EventLoop, LoopStats, VirtualClock
from infermeter.twin.router import Router
from infermeter.twin.series import series_mean, sum_series

WINDOW = 8192  # sends per window: the unit in which records leave the loop (and workers)
GC_EVERY = 16  # record batches between full collections (the loop runs with the cyclic GC paused)


@dataclass
class SimulationResult:
    run_dir: Path
    summary: dict[str, Any]
    run: dict[str, Any]
    wall_s: float
    records: int
    virtual_s: float
    peak_rss_mib: float


@recorder.malloc_pool()  # record batches on malloc (recorder.malloc_pool), a resumed run's too
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
    cancel_at: float = math.inf,
    router: Router | None = None,
    timeouts: tuple[float | None, float | None] = (None, None),
    checkpoint_s: float | None = None,
    checkpoint_extra: dict[str, Any] | None = None,
    resume: dict[str, Any] | None = None,
    thinking: Thinking | None = None,
) -> SimulationResult:
    """Run ``source`` through ``twin``'s engines in this process; write the run directory; return the summary.

    ``checkpoint_s``: every so many seconds (at a window's end) the whole simulation is saved to
    ``checkpoint.pkl`` (records so far in part files), with ``checkpoint_extra`` (what the caller needs
    to rebuild its plan); ``resume``: such a checkpoint, read back, to go on from (``source`` restored
    from it and attached to its stream); ``thinking``: a reasoning model's thinking tokens
    (:mod:`infermeter.measure.thinking`; the engines keep per-token times for it)."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    try:  # ``source`` is closed however this ends (its stream may run in a child process)
        out_dir.mkdir(parents=True, exist_ok=True)
        if resume is not None:
            loop, writer, sink, seen = resume["loop"], resume["writer"], resume["sink"], resume["seen"]
            engines = loop.engines
            clock = VirtualClock(resume["now"])
            writer.on_flush = _collector()
        else:
            engines = twin.engines(keep_token_times=token_times or thinking is not None)
            loop = EventLoop(engines, lanes=twin.pp, router=router or twin.make_router(), frontend=twin.frontend,
                             known_arrivals=twin.lanes == 1)
            writer = open_writer(out_dir, run, token_times, exact_summary_limit, parts=checkpoint_s is not None)
            sink = WindowSink(warmup=warmup, token_times=token_times, thinking=thinking)
            clock = VirtualClock()
            seen = 0
        last = time.monotonic()
        with gc_paused():
            for _, t in loop.run(source, sink.add, clock, cancel_at=cancel_at, window=WINDOW, timeouts=timeouts):
                table = sink.window()
                if table is not None:
                    seen += table.num_rows
                    writer.add(table)
                if on_progress is not None:
                    on_progress(min(t, clock.now), seen)
                if checkpoint_s is not None and math.isfinite(t) and time.monotonic() - last >= checkpoint_s:
                    writer.checkpoint()
                    save_checkpoint(out_dir, {**(checkpoint_extra or {}), "loop": loop, "now": clock.now,
                                              "source": source, "sink": sink, "writer": writer, "seen": seen})
                    last = time.monotonic()
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    res = finish_run(out_dir, run, writer, [engine_stats(e) for e in engines],
                     [e.waiting_series.state() for e in engines], loop.stats, t0,
                     runtime={"resumed": True} if resume is not None else None, twin=twin)
    (out_dir / CHECKPOINT).unlink(missing_ok=True)
    return res


CHECKPOINT = "checkpoint.pkl"
# first bytes of a checkpoint: its format (the pickled classes' states, and the prompt texts a resumed stream makes),
# bumped when they change (3: the openings of workload/compose.py, 2026-12-02; 4: a window's records kept as
# columns, issue 33; 5: a window's rows kept flat, and the waiting series' current bucket, issue 33)
CHECKPOINT_MAGIC = b"infermeter-checkpoint 5\n"


def save_checkpoint(out_dir: Path, state: dict[str, Any]) -> None:
    """The simulation's whole state, replaced atomically (a crash while writing keeps the previous one)."""
    tmp = Path(out_dir) / (CHECKPOINT + ".tmp")
    with open(tmp, "wb") as f:
        f.write(CHECKPOINT_MAGIC)
        pickle.dump({**state, "key_scheme": KEY_SCHEME}, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, Path(out_dir) / CHECKPOINT)


def load_checkpoint(out_dir: Path) -> dict[str, Any]:
    path = Path(out_dir) / CHECKPOINT
    try:
        with open(path, "rb") as f:
            if f.read(len(CHECKPOINT_MAGIC)) != CHECKPOINT_MAGIC:  # not unpickled: its classes may have changed
                raise DataError(f"--resume {out_dir}: {CHECKPOINT} was written by another version of infermeter "
                                f"(its format is not {CHECKPOINT_MAGIC.decode().strip()!r}); simulate the run again")
            state: dict[str, Any] = pickle.load(f)
    except FileNotFoundError:
        raise UserError(f"--resume {out_dir}: no {CHECKPOINT} there (was it simulated with --checkpoint?)") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise DataError(f"--resume {out_dir}: {CHECKPOINT} cannot be read ({exc})") from None
    scheme = state.get("key_scheme", "python-hash")
    if scheme != KEY_SCHEME:  # its engines' caches hold keys the requests made now would never match
        raise DataError(f"--resume {out_dir}: {CHECKPOINT} was written by another version of infermeter, whose "
                        f"prefix-cache keys ({scheme}) differ from this one's ({KEY_SCHEME}); simulate the run again")
    return state


def _collector() -> Callable[[int, float], None]:
    flushes = [0]

    def on_flush(rows: int, t_virtual: float) -> None:
        flushes[0] += 1
        if flushes[0] % GC_EVERY == 0:
            gc.collect()

    return on_flush


def open_writer(out_dir: Path, run: dict[str, Any], token_times: bool, exact_limit: int, *,
                parts: bool = False) -> RecordWriter:
    acc = Accumulator.for_run(run, exact_limit=exact_limit, derive_itl=not token_times)
    return RecordWriter(Path(out_dir) / (store.PARQUET + ".tmp"), acc, on_flush=_collector(),
                        batch_rows=recorder.BATCH_ROWS, parts_dir=Path(out_dir) / "parts" if parts else None)


def finish_run(out_dir: Path, run: dict[str, Any], writer: RecordWriter, stats: Sequence[dict[str, Any]],
               waiting: Sequence[tuple[float, Sequence[float]]], loop: LoopStats, t0: float,
               runtime: dict[str, Any] | None = None, twin: Twin | None = None,
               summary_extra: dict[str, Any] | None = None) -> SimulationResult:
    """Close the records, write run.json and summary.json (engine stats in engine order; with ``twin``, the
    summary's ``prediction_intervals``; ``summary_extra``: more summary fields, kept in run.json too)."""
    writer.close()
    out_dir = Path(out_dir)
    os.replace(writer.path, out_dir / store.PARQUET)
    run = dict(run)
    run["source"] = "simulated"
    run["server_metrics"] = server_metrics(stats, loop, sum_series(waiting), writer.intended_span)
    seen = ((run.get("target") or {}).get("emulated") or {}).get("calibrated_max_seqs")
    batch = max((int(s["max_running"]) for s in stats), default=0)
    if seen and batch > seen:
        run["notices"] = [*run.get("notices", []), (
            f"extrapolated: the simulated batch reached {batch} sequences; the calibration's steps had at most "
            f"{seen}, so the step time beyond is extrapolated (measure a run at that concurrency and recalibrate)")]
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    run["runtime"] = {"wall_s": wall, "virtual_s": loop.end, "records": writer.rows, "peak_rss_mib": rss,
                      "steps": sum(int(s["steps"]) for s in stats), "cancelled": loop.cancelled, **(runtime or {})}
    run.update(summary_extra or {})  # the accumulator's summary carries them (as every later summary of the run)
    model = writer.accumulator.summary(run)
    summary = model.to_json()
    if twin is not None:  # kept in run.json, so that every summary of these records carries the same bands
        run["prediction_intervals"] = summary["prediction_intervals"] = prediction_intervals(twin, model)
    summary["run_dir"] = str(out_dir)
    store.write_json(out_dir / store.RUN, run)
    store.write_json(out_dir / store.SUMMARY, summary)
    return SimulationResult(run_dir=out_dir, summary=summary, run=run, wall_s=wall, records=writer.rows,
                            virtual_s=loop.end, peak_rss_mib=rss)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic GC: the loop makes millions of short-lived, cycle-free objects
    (reference counting frees them), and generation scans cost ~13% of the run. A full
    collection still runs every ``GC_EVERY`` record batches."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def server_metrics(stats: Sequence[dict[str, Any]], loop: LoopStats, waiting: tuple[float, Sequence[float]],
                   arrivals: Sequence[float]) -> dict[str, Any]:
    """The run's ``server_metrics`` block from the engines' own counters (see the module docstring)."""
    span = loop.end if loop.end > 0 else None
    lanes = len(stats)

    def total(key: str) -> Any:
        return sum(s[key] for s in stats)

    queries, hits = total("prefix_queries"), total("prefix_hits")
    running_int = total("running_integral")
    in_system = total("in_system_integral")

    def mean(x: float) -> float | None:
        return None if span is None else x / span

    a0, a1 = arrivals[0], arrivals[1]
    start = end = None
    if math.isfinite(a0) and math.isfinite(a1) and a1 > a0:
        tenth = (a1 - a0) / 10
        start, end = series_mean(waiting, a0, a0 + tenth), series_mean(waiting, a1 - tenth, a1)
    return {
        "engine": "infermeter-twin (simulated)",
        "kv_cache_usage_mean": None if span is None else total("usage_integral") / (span * lanes),
        "kv_cache_usage_max": max(s["max_usage"] for s in stats),
        "num_requests_running_mean": mean(running_int),
        "num_requests_running_max": total("max_running"),
        "num_requests_waiting_mean": mean(max(in_system - running_int, 0.0)),
        "num_requests_waiting_max": total("max_waiting"),
        "num_requests_waiting_start": start,
        "num_requests_waiting_end": end,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "prefix_cache_hit_rate_source": "counters" if queries else None,
        "num_preemptions": total("num_preemptions"),
        "prompt_tokens": total("prompt_tokens_total"),
        "generation_tokens": total("generation_tokens_total"),
        "engine_steps": total("steps"),
        "busy_fraction": None if span is None else total("busy_s") / (span * lanes),
        "in_system_mean": mean(in_system),
        **_spec_decode(stats),
    }


def _spec_decode(stats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``spec_decode`` from the engines' speculative-decoding counters (none: no key)."""
    spec = [s for s in stats if "spec_drafts" in s]
    if not spec:
        return {}
    width = max(len(s["spec_accepted_per_pos"]) for s in spec)
    per_pos = [float(sum(s["spec_accepted_per_pos"][i] for s in spec if i < len(s["spec_accepted_per_pos"])))
               for i in range(width)]
    block = spec_decode_block(float(sum(s["spec_drafts"] for s in spec)),
                              float(sum(s["spec_draft_tokens"] for s in spec)),
                              float(sum(s["spec_accepted"] for s in spec)), per_pos)
    return {"spec_decode": block}


def engine_stats(e: Engine) -> dict[str, Any]:
    """An engine's counters and integrals as plain numbers (what a run's ``server_metrics`` sums)."""
    return {"usage_integral": e.usage_integral, "max_usage": e.max_usage, "running_integral": e.running_integral,
            "max_running": e.max_running, "max_waiting": e.max_waiting, "prefix_queries": e.prefix_queries,
            "prefix_hits": e.prefix_hits, "num_preemptions": e.num_preemptions,
            "prompt_tokens_total": e.prompt_tokens_total, "generation_tokens_total": e.generation_tokens_total,
            "steps": e.steps, "busy_s": e.busy_s, "in_system_integral": e.in_system_integral,
            **({"spec_drafts": e.spec_drafts, "spec_draft_tokens": e.spec_draft_tokens,
                "spec_accepted": e.spec_accepted, "spec_accepted_per_pos": list(e.spec_accepted_per_pos)}
               if e.spec is not None else {})}
