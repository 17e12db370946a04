"""Soak runs on a server: part files, checkpoints, per-window series, and resume after a crash.

``execute_soak`` runs the schedule with a :class:`~infermeter.load.soak.PartSink`
as the record sink, checkpoints every ``checkpoint_s`` (``checkpoint.json`` and
a provisional ``summary.json``), and ends with the streamed summary (with
``windows``) and one ``requests.parquet``. Ctrl-C ends a soak like any run
(final summary); a crash (SIGKILL, power loss) leaves the parts, and
``infermeter run --resume DIR`` continues::

    m = Measurement.resume(run_dir)       # config from run.json, key from the caller
    asyncio.run(m.run())                  # same dir; run.json "segments" gains one entry

On resume, the parts are replayed into a fresh aggregator, requests that were
in flight get ``cancelled`` records, and the schedule continues at the first
index with no record (``load.resume``); the downtime is subtracted from the
measured duration.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from infermeter.analysis.accumulator import Accumulator
from infermeter.errors import UserError
from infermeter.load.resume import resume_point
from infermeter.load.soak import PartSink, lost_records, part_dir, part_dirs, read_state
from infermeter.load.workers import WorkerPlan
from infermeter.measure.header import runtime
from infermeter.records import store

RESUME_LEAD_S = 0.5


async def execute_soak(m: Any, wplan: WorkerPlan, run_dir: Path, run: dict[str, Any]) -> dict[str, Any]:
    cfg, soak = m.cfg, m.soak
    start_wall = None
    if m.resume_dir is not None:
        if "t0_unix" not in run:
            raise UserError(f"--resume {run_dir}: the run stopped before it started; start it again")
        state = read_state(run_dir, run)
        agg = state.aggregator
        t0 = float(run["t0_unix"])
        prev = run["segments"][-1]
        point = resume_point(wplan.shape, seed=cfg.seed, next_index=state.next_index, missing=state.missing,
                             prev_shift_s=float(prev.get("shift_s") or 0.0), last_seen_s=state.last_seen_s,
                             now_s=time.time() - t0, lead_s=RESUME_LEAD_S, make_specs=wplan.make_specs)
        if state.missing:
            lost = lost_records(state.missing, point.lost_intended, cfg.warmup)
            store.write_table(part_dir(run_dir, state.parts), lost)
            agg.add(lost)
        run["segments"].append({"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                "first_index": point.first_index, "shift_s": point.shift_s, "gap_s": point.gap_s,
                                "records_before": state.records, "lost": len(state.missing)})
        wplan = dataclasses.replace(wplan, first_index=point.first_index, shift_s=point.shift_s)
        start_wall = t0
        m.notify(f"resuming at request {point.first_index} after {point.gap_s:.1f} s down "
                 f"({state.records} records on disk, {len(state.missing)} lost in flight)")
    else:
        agg = Accumulator.for_run(run)
    sink = PartSink(run_dir, agg, part_records=soak["part_records"], first_part=len(part_dirs(run_dir)))
    store.write_json(run_dir / store.RUN, run)

    async def checkpoints() -> None:
        while True:
            await asyncio.sleep(soak["checkpoint_s"])
            await sink.checkpoint(run, m.clock())

    ticker = asyncio.create_task(checkpoints())
    try:
        stats = await m.execute(wplan, run_dir, run, sink=sink, start_wall=start_wall)
    finally:
        ticker.cancel()
    run["runtime"] = runtime(stats)
    return await sink.finish(run)


def summarize_soak(run_dir: Path, run: dict[str, Any]) -> dict[str, Any]:
    """A soak run's summary from disk in bounded memory: the parts (a killed run, kept for --resume)
    or the merged requests.parquet read one row group at a time."""
    soak = run.get("soak") or {}
    if part_dirs(run_dir):
        return read_state(run_dir, run).aggregator.summary(run).to_json() | {"partial": True}
    agg = Accumulator.for_run(run)
    for batch in pq.ParquetFile(Path(run_dir) / store.PARQUET).iter_batches(batch_size=soak.get("part_records", 5000)):
        agg.add(pa.Table.from_batches([batch]))
    return agg.summary(run).to_json()
