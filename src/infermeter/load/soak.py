"""Soak runs: records streamed to part files, periodic checkpoints, resume after a restart.

A soak run keeps memory flat whatever its length. Records go to the journal of
the current *part* (``parts/<k>/requests.jsonl``, SIGKILL-safe like every
journal); a part is *sealed* to ``parts/<k>/requests.parquet`` when it holds
``part_records`` records or at each checkpoint, in a background thread that
also feeds the run's summary (:class:`~infermeter.analysis.accumulator.Accumulator`).
A checkpoint writes ``checkpoint.json`` and a provisional ``summary.json``
(``"partial": true``). At the end the parts are merged, one at a time, into
``requests.parquet``::

    sink = PartSink(run_dir, aggregator, part_records=5000)
    runner = Runner(..., on_record=sink.write)
    ... await sink.checkpoint(extra)  # every --checkpoint seconds
    await sink.finish()               # seal, merge parts -> requests.parquet

``read_state(run_dir)`` is the start of ``infermeter run --resume DIR``: it
seals what the killed run left, rebuilds the aggregator from the parts, and
says where the schedule stops on disk (``next_index``) and which earlier
indices have no record (in flight when the run died: they get ``cancelled``
records, see :func:`lost_records`).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from infermeter.analysis.accumulator import Accumulator
from infermeter.records import store
from infermeter.records.record import ARROW_SCHEMA, RequestRecord, records_to_table

PARTS = "parts"
CHECKPOINT = "checkpoint.json"


def _libc_trim() -> Any:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _libc_trim()


def release_memory() -> None:
    """Give freed memory back to the OS after a part (Arrow's pool, glibc's heap): RSS stays flat, not just live objects."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


def part_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / PARTS / f"{k:06d}"


def part_dirs(run_dir: Path) -> list[Path]:
    base = Path(run_dir) / PARTS
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def seal_part(d: Path, tolerant: bool = False) -> pa.Table:
    """Journal -> parquet in ``d`` (atomic); returns the table. ``tolerant``: a torn last line is skipped."""
    j, pqf = d / store.JOURNAL, d / store.PARQUET
    if not j.exists():
        return pq.read_table(pqf) if pqf.exists() else ARROW_SCHEMA.empty_table()
    if tolerant:
        table = store.load_table(d)
    else:
        opts = pajson.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="ignore")
        table = pajson.read_json(j, parse_options=opts) if j.stat().st_size else ARROW_SCHEMA.empty_table()
    store.write_table(d, table.cast(ARROW_SCHEMA))
    j.unlink()
    return table


def iter_part_tables(run_dir: Path) -> Iterator[pa.Table]:
    """Each sealed part's records, one part in memory at a time (single-threaded reads keep RSS flat)."""
    for d in part_dirs(run_dir):
        if (d / store.PARQUET).exists():
            yield pq.ParquetFile(d / store.PARQUET).read(use_threads=False)
            release_memory()


def merge_parts(run_dir: Path) -> int:
    """Sealed parts -> one ``requests.parquet`` (streamed, one part in memory at a time); parts removed."""
    run_dir = Path(run_dir)
    out = run_dir / store.PARQUET
    tmp = out.with_suffix(".parquet.tmp")
    n = 0
    with pq.ParquetWriter(tmp, ARROW_SCHEMA, **store.PARQUET_OPTIONS) as writer:
        for table in iter_part_tables(run_dir):
            writer.write_table(table.cast(ARROW_SCHEMA))
            n += table.num_rows
    os.replace(tmp, out)
    shutil.rmtree(run_dir / PARTS, ignore_errors=True)
    return n


class PartSink:
    """The soak run's ``on_record``; see the module docstring. One background thread owns the aggregator."""

    def __init__(self, run_dir: Path, aggregator: Accumulator, part_records: int = 5000,
                 first_part: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.aggregator = aggregator
        self.part_records = part_records
        self.records = 0
        self._k = first_part if first_part is not None else len(part_dirs(self.run_dir))
        self._journal = store.Journal(part_dir(self.run_dir, self._k))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infermeter-soak")
        self._pending: list[Any] = []

    def write(self, rec: RequestRecord) -> None:
        self._journal.write(rec)
        self.records += 1
        if self._journal.count >= self.part_records:
            self.rotate()

    def rotate(self) -> None:
        if self._journal.count == 0:
            return
        self._journal.close()
        d = part_dir(self.run_dir, self._k)
        self._k += 1
        self._journal = store.Journal(part_dir(self.run_dir, self._k))
        self._pending.append(self._pool.submit(self._seal, d))
        self._pending = [f for f in self._pending if not f.done()]

    def _seal(self, d: Path) -> None:
        self.aggregator.add(seal_part(d))
        release_memory()

    async def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn`` on the aggregator's thread (after every pending seal)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def checkpoint(self, run: dict[str, Any], clock_s: float) -> dict[str, Any]:
        """Seal the current part and write checkpoint.json and a provisional summary.json."""
        self.rotate()
        summary: dict[str, Any] = await self.call(self._write_checkpoint, run, clock_s)
        return summary

    def _write_checkpoint(self, run: dict[str, Any], clock_s: float) -> dict[str, Any]:
        state = {"records": self.records, "parts": self._k, "clock_s": clock_s, "wall": time.time()}
        store.write_json(self.run_dir / CHECKPOINT, state)
        summary = self.aggregator.summary(run).to_json() | {"partial": True, "checkpoint": state}
        store.write_json(self.run_dir / store.SUMMARY, summary)
        return summary

    async def finish(self, run: dict[str, Any]) -> dict[str, Any]:
        """Seal the last part, merge the parts into requests.parquet, return the final summary."""
        self._journal.close()
        d = part_dir(self.run_dir, self._k)
        if (d / store.JOURNAL).exists():
            self._pending.append(self._pool.submit(self._seal, d))
        summary: dict[str, Any] = await self.call(lambda: self.aggregator.summary(run).to_json())
        await self.call(merge_parts, self.run_dir)
        self._pool.shutdown(wait=True)
        (self.run_dir / CHECKPOINT).unlink(missing_ok=True)
        return summary

    def close(self) -> None:
        self._journal.close()
        self._pool.shutdown(wait=True)


@dataclass
class ResumeState:
    """What a killed soak run left on disk."""

    aggregator: Accumulator
    next_index: int
    missing: list[int]
    last_seen_s: float
    records: int
    parts: int
    checkpoint: dict[str, Any] = field(default_factory=dict)


def read_state(run_dir: Path, run: dict[str, Any]) -> ResumeState:
    """Seal leftover journals, replay every part into a fresh accumulator (set up from ``run``,
    the run's run.json), find where the schedule stopped."""
    run_dir = Path(run_dir)
    agg = Accumulator.for_run(run)
    ids: list[np.ndarray] = []
    last = 0.0
    records = 0
    for d in part_dirs(run_dir):
        table = seal_part(d, tolerant=True)
        if table.num_rows == 0:
            shutil.rmtree(d, ignore_errors=True)
            continue
        agg.add(table)
        records += table.num_rows
        ids.append(np.asarray(table.column("request_id").to_numpy(), dtype=np.int64))
        for name in ("ended_at", "intended_at"):
            c = table.column(name).drop_null()
            if len(c):
                last = max(last, float(np.max(c.to_numpy())))
    all_ids = np.unique(np.concatenate(ids)) if ids else np.empty(0, dtype=np.int64)
    nxt = int(all_ids[-1]) + 1 if all_ids.size else 0
    missing = np.setdiff1d(np.arange(nxt, dtype=np.int64), all_ids).tolist()
    cp = json.loads((run_dir / CHECKPOINT).read_text()) if (run_dir / CHECKPOINT).exists() else {}
    last = max(last, float(cp.get("clock_s") or 0.0))
    return ResumeState(agg, nxt, missing, last, records, len(part_dirs(run_dir)), cp)


def lost_records(missing: list[int], intended: dict[int, float], warmup: int) -> pa.Table:
    """``cancelled`` records for indices that were in flight when the run died (no record on disk)."""
    recs = [RequestRecord(request_id=i, phase="warmup" if i < warmup else "measure", intended_at=intended.get(i, 0.0),
                          outcome="cancelled", error_detail="lost: in flight when the run was interrupted")
            for i in missing]
    return records_to_table(recs)
