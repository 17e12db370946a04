"""Simulated requests to ``requests.parquet``: windows of rows in one canonical order, in fixed batches.

The loop hands every finished, rejected or cancelled :class:`SimRequest` to a :class:`WindowSink`;
at each window boundary (:mod:`infermeter.twin.loop`) the sink turns them into one table of
:data:`infermeter.records.record.ARROW_SCHEMA`, sorted by ``(ended_at, request_id)``. A
:class:`RecordWriter` takes the windows of one or several workers (:func:`merge_windows`
puts a window's tables from every worker in that same order), cuts them into row groups of
exactly ``batch_rows`` rows, writes them with a ``pyarrow.parquet.ParquetWriter`` and feeds each
to the run's
:class:`~infermeter.analysis.accumulator.Accumulator` (the one summary builder), both on a helper thread
(parquet encoding and numpy release the GIL), one batch after the other. So the file and the
summary are the same bytes whatever the number of workers, and memory does not grow with the
run (:meth:`RecordWriter.close` waits for the last batch before the summary is read)::

    sink = WindowSink(warmup=0, token_times=False)
    writer = RecordWriter(out_dir / "requests.parquet", Accumulator.for_run(run))
    for r in finished: sink.add(r)
    writer.add(sink.window())
    writer.close()
    writer.accumulator.summary(run).ttft_ms.p50     # ms

What a simulated row holds: ``sent_at`` = when the request was sent (later than ``intended_at``
only when ``--max-concurrency`` held it), ``first_byte_at = sent_at`` (a streaming server sends
its headers at once), ``first_token_at`` and ``ended_at`` from the engine, usage as a server
reports it (``usage_source="server"``), ``cached_tokens`` = prefix-cache hit at admission. With
``token_times`` the per-token times go to ``chunk_times`` (one token per chunk, as vLLM streams
per step); without (huge runs) the chunk lists are empty and inter-token latency is derived per
request as ``(ended_at - first_token_at) / (completion_tokens - 1)`` (the accumulator's
``derive_itl``). Rejected requests (prompt + max_tokens over ``max_model_len``) are ``error`` /
``http_4xx`` / 400, as vLLM answers them. Requests still in flight when the run gave up
(``grace_s`` after the duration) are ``cancelled``, ended then, with the tokens they had
streamed (``stream_tokens``) and no usage, as a measured run records them; requests whose client
timed out are ``error`` / ``first_token_timeout`` or ``total_timeout``, likewise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from infermeter.analysis.accumulator import Accumulator
from infermeter.measure.thinking import Thinking
from infermeter.records import store
from infermeter.records.record import ARROW_SCHEMA
from infermeter.twin.request import CANCELLED, FINISHED, TIMED_OUT, SimRequest, columns_of

BATCH_ROWS = 1 << 16


def _on_mimalloc() -> bool:
    return "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and pa.default_memory_pool().backend_name == "mimalloc"


@contextmanager
def malloc_pool() -> Iterator[None]:
    """pyarrow's default memory pool is the C library's ``malloc`` while this lasts (a decorator too), unless
    ``ARROW_DEFAULT_MEMORY_POOL`` chose a pool; the previous one after.

    A long simulation builds and frees record batches of the same few MiB thousands of times.
    The pyarrow wheels' default pool (mimalloc) hands freed pages back to the OS and faults them
    in again (zeroed, as huge pages where transparent huge pages are on ``madvise``) for the next
    batch: the kernel's page zeroing was 17 % of a simulating process's samples here. ``malloc``
    keeps them for the next batch. Buffers are freed to the pool that made them, so switching is
    safe at any time."""
    before = pa.default_memory_pool()
    switch = _on_mimalloc()
    if switch:
        pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        if switch:
            pa.set_memory_pool(before)


def reuse_freed_memory() -> None:
    """:func:`malloc_pool` for the rest of the process: a fleet worker's, which only simulates."""
    if _on_mimalloc():
        pa.set_memory_pool(pa.system_memory_pool())


def records_table(buf: list[SimRequest], *, warmup: int = 0, token_times: bool = False,
                  thinking: Thinking | None = None) -> pa.Table:
    """One row per request in ``ARROW_SCHEMA`` (see the module docstring); with ``thinking``
    (:mod:`infermeter.measure.thinking`, the engines keeping token times) the reasoning split."""
    return columns_table(columns_of(buf), buf, warmup=warmup, token_times=token_times, thinking=thinking)


def columns_table(cols: tuple[list[Any], ...], buf: list[SimRequest] | None, *, warmup: int = 0,
                  token_times: bool = False, thinking: Thinking | None = None) -> pa.Table:
    """:func:`records_table` of the requests' columns (:func:`~infermeter.twin.request.columns_of`);
    ``buf``, the requests themselves, is needed only for token times, thinking and timed-out requests' error
    classes (``None``: a 14th column holds the error classes, and there are no token times)."""
    (rid_l, intended_l, sent_l, first_l, ended_l, n_in_l, n_out_l, cached_l, max_l, conv_l, grp_l, state_l,
     details) = cols[:13]
    n = len(rid_l)
    state = np.array(state_l, dtype=np.int64)
    ok = state == FINISHED
    timed_out = state == TIMED_OUT
    cancelled = (state == CANCELLED) | timed_out  # no usage: only what streamed
    all_ok = bool(ok.all())
    okp = pa.array(ok)
    rid = np.array(rid_l, dtype=np.int64)
    sent = np.array(sent_l, dtype=np.float64)
    first = np.array(first_l, dtype=np.float64)  # None -> nan
    n_in = np.array(n_in_l, dtype=np.int64)
    n_out = np.array(n_out_l, dtype=np.int64)
    if token_times:
        assert buf is not None
        chunk_times = pa.array([r.token_times or [] for r in buf], pa.list_(pa.float64()))
        chunk_tokens = pa.array([[1] * len(r.token_times or ()) for r in buf], pa.list_(pa.int64()))
    else:
        zeros = pa.array(np.zeros(n + 1, dtype=np.int32))
        chunk_times = pa.ListArray.from_arrays(zeros, pa.array([], pa.float64()))
        chunk_tokens = pa.ListArray.from_arrays(zeros, pa.array([], pa.int64()))
    no_str = pa.scalar(None, pa.string())
    if all_ok:
        outcome: pa.Array = pa.repeat("ok", n)
        error_class, http_status = pa.nulls(n, pa.string()), pa.nulls(n, pa.int32())
        completion, stream_tok, prompt = n_out, n_out, n_in
        usage = pa.repeat("server", n)
        detail = pa.nulls(n, pa.string())
    else:
        rejected = ~ok & ~cancelled
        outcome = pa.array(np.where(ok, "ok", np.where(cancelled & ~timed_out, "cancelled", "error")), pa.string())
        ec = np.full(n, None, dtype=object)
        ec[rejected] = "http_4xx"
        if timed_out.any():
            classes = cols[13] if buf is None else [r.error_class for r in buf]
            ec[timed_out] = [c for c, t in zip(classes, timed_out) if t]
        error_class = pa.array(ec, pa.string())
        http_status = pa.array(np.where(rejected, 400, 200), pa.int32(), mask=~(rejected | timed_out))
        failed = rejected
        completion = pa.array(np.where(ok, n_out, 0), pa.int64(), mask=cancelled)
        prompt = pa.array(n_in, pa.int64(), mask=cancelled)
        stream_tok = np.where(failed, 0, n_out)
        usage = pc.if_else(okp, "server", no_str)
        detail = pa.array([None if s == CANCELLED else d for d, s in zip(details, state_l)], pa.string())
    think = (thinking.columns(rid, n_out, ok, [r.token_times for r in buf or ()]) if thinking is not None
             else {"first_answer_at": pa.nulls(n, pa.float64()), "reasoning_tokens": pa.nulls(n, pa.int64()),
                   "answer_tokens": pa.nulls(n, pa.int64())})
    finish = (pa.repeat("length", n) if all_ok
              else pa.array(np.where(ok, "length", np.array(None, dtype=object)), pa.string()))
    return pa.table(
        {
            "request_id": rid,
            "phase": pc.if_else(pa.array(rid < warmup), "warmup", "measure"),
            "worker": pa.array(np.zeros(n, dtype=np.int32)),
            "intended_at": np.array(intended_l, dtype=np.float64),
            "sent_at": sent,
            "first_byte_at": sent,
            "first_token_at": pa.array(first, pa.float64(), from_pandas=True),
            "ended_at": np.array(ended_l, dtype=np.float64),
            "chunk_times": chunk_times,
            "chunk_tokens": chunk_tokens,
            "outcome": outcome,
            "error_class": error_class,
            "error_detail": detail,
            "http_status": http_status,
            "requested_input_tokens": n_in,
            "requested_output_tokens": pa.array(max_l, pa.int64()),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "stream_tokens": stream_tok,
            "usage_source": usage,
            "cached_tokens": pa.array(cached_l, pa.int64()),
            "conversation_id": pa.array(conv_l, pa.int64()),
            "prefix_group": pa.array(grp_l, pa.int64()),
            "finish_reason": finish,
            **think,  # no thinking: nulls (the answer starts at the first token)
        },
        schema=ARROW_SCHEMA,
    )


def canonical(table: pa.Table) -> pa.Table:
    """Rows sorted by ``(ended_at, request_id)``: the order of every simulated run's records."""
    if table.num_rows < 2:
        return table
    ended = table.column("ended_at").to_numpy()
    rid = table.column("request_id").to_numpy()
    order = np.lexsort((rid, ended))
    if (np.diff(order) == 1).all():
        return table
    return table.take(pa.array(order))


def merge_windows(tables: list[pa.Table | None]) -> pa.Table | None:
    """One window's tables from several workers, in the canonical order."""
    parts = [t for t in tables if t is not None and t.num_rows]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return canonical(pa.concat_tables(parts))


class WindowSink:
    """Finished requests of the current window -> one canonical table (see the module docstring).

    Without token times (and thinking) a request's record fields are taken as it finishes, while it is
    still in the processor's cache, and the request is let go (its memory serves the next ones); with
    them the requests are kept until the window closes."""

    __slots__ = ("warmup", "token_times", "thinking", "_buf", "_rows", "add")

    def __init__(self, *, warmup: int = 0, token_times: bool = False, thinking: Thinking | None = None) -> None:
        self.warmup = warmup
        self.token_times = token_times
        self.thinking = thinking
        self._buf: list[SimRequest] = []
        self._rows: list[Any] = []  # the rows' fields, one row after the other (ROW_FIELDS each)
        self._bind()

    def _bind(self) -> None:
        self.add: Callable[[SimRequest], None]
        if self.token_times or self.thinking is not None:
            self.add = self._buf.append  # once per request: no Python frame
        else:
            self.add = _row_taker(self._rows)

    def __reduce__(self) -> tuple[Any, ...]:  # checkpoints (``add`` is rebuilt)
        return (_sink, (self.warmup, self.token_times, self.thinking, self._buf, self._rows))

    def window(self) -> pa.Table | None:
        buf = self._buf
        if buf:
            table = canonical(records_table(buf, warmup=self.warmup, token_times=self.token_times,
                                            thinking=self.thinking))
            buf.clear()  # the same list: ``add`` appends to it
            return table
        rows = self._rows
        if not rows:
            return None
        cols = [rows[k::ROW_FIELDS] for k in range(ROW_FIELDS)]  # columns: strided slices of the flat rows
        intended, sent = cols[1], cols[2]
        if None in intended:  # not sent by a load schedule: intended when sent
            cols[1] = [s if i is None else i for i, s in zip(intended, sent)]
        rows.clear()  # the same list: ``add`` appends to it
        return canonical(columns_table(tuple(cols), None, warmup=self.warmup))


def _sink(warmup: int, token_times: bool, thinking: Thinking | None, buf: list[SimRequest],
          rows: list[Any]) -> WindowSink:
    sink = WindowSink.__new__(WindowSink)
    sink.warmup, sink.token_times, sink.thinking, sink._buf, sink._rows = warmup, token_times, thinking, buf, rows
    sink._bind()
    return sink


ROW_FIELDS = 14  # fields of a row that a sink without token times takes


def _row_taker(rows: list[Any]) -> Callable[[SimRequest], None]:
    """``add`` of a sink without token times: a request's record fields as one row (the columns of
    :func:`~infermeter.twin.request.columns_of`, the intended send as the request has it, then its error class),
    appended to the flat ``rows`` (a window's columns are then strided slices of it, not a transposition)."""
    extend = rows.extend

    def take(r: SimRequest) -> None:
        extend((r.rid, r.intended_at, r.arrival, r.first_token_at, r.ended_at, r.prompt_tokens, r.outputs,
                r.cached_tokens, r.max_tokens, r.conversation_id, r.prefix_group, r.state, r.error, r.error_class))

    return take


class RecordWriter:
    """Window tables in, parquet row groups of ``batch_rows`` and accumulator batches out."""

    def __init__(self, path: Path, accumulator: Accumulator, *, batch_rows: int = BATCH_ROWS,
                 on_flush: Callable[[int, float], None] | None = None, parts_dir: Path | None = None) -> None:
        self.path = Path(path)
        self.accumulator = accumulator
        self.batch_rows = batch_rows
        self.on_flush = on_flush  # (rows written so far, end time of the batch's last request)
        self.rows = 0
        self.intended_span = [math.inf, -math.inf]  # every request's intended send: the run's arrival span
        # resumable runs write part files, one per checkpoint interval, joined into ``path`` at the end
        self.parts_dir = None if parts_dir is None else Path(parts_dir)
        self.part = 0  # complete parts (the current one is being written)
        self._parts: list[pa.Table] = []
        self._held = 0
        self._open()

    def _open(self) -> None:
        self._writer: pq.ParquetWriter | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infermeter-records")
        self._pending: Future[None] | None = None

    def _target(self) -> pq.ParquetWriter:
        if self._writer is None:
            where = self.path if self.parts_dir is None else self.parts_dir / f"part-{self.part:05d}.parquet"
            where.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(where, ARROW_SCHEMA, **store.PARQUET_OPTIONS)
        return self._writer

    def checkpoint(self) -> None:
        """Close the current part file (parts mode): what is written so far survives a crash."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self.part += 1

    def __getstate__(self) -> dict[str, object]:  # after checkpoint(): counts, the unwritten rows, the accumulator
        d = dict(self.__dict__)
        for k in ("_writer", "_pool", "_pending", "on_flush"):
            d.pop(k, None)
        return d

    def __setstate__(self, d: dict[str, object]) -> None:
        self.__dict__.update(d)
        self.on_flush = None
        self._open()
        if self.parts_dir is not None:  # a part begun after the checkpoint died with the run
            for stale in self.parts_dir.glob("part-*.parquet"):
                if int(stale.stem.split("-")[1]) >= self.part:
                    stale.unlink()

    def add(self, table: pa.Table | None) -> None:
        if table is None or not table.num_rows:
            return
        intended = table.column("intended_at").to_numpy()
        span = self.intended_span
        span[0], span[1] = min(span[0], float(intended.min())), max(span[1], float(intended.max()))
        self._parts.append(table)
        self._held += table.num_rows
        while self._held >= self.batch_rows:
            whole = pa.concat_tables(self._parts) if len(self._parts) > 1 else self._parts[0]
            self._write(whole.slice(0, self.batch_rows))
            rest = whole.slice(self.batch_rows)
            self._parts = [rest] if rest.num_rows else []
            self._held = rest.num_rows

    def _write(self, batch: pa.Table) -> None:
        if self._pending is not None:  # one batch in flight at most: bounded memory
            self._pending.result()
        # the helper thread writes and summarizes it (both release the GIL for much of their work);
        # batches reach the accumulator one after the other, in order
        self._pending = self._pool.submit(self._write_and_add, self._target(), batch)
        self.rows += batch.num_rows
        if self.on_flush is not None:
            self.on_flush(self.rows, float(batch.column("ended_at")[-1].as_py()))

    def _write_and_add(self, writer: pq.ParquetWriter, batch: pa.Table) -> None:
        batch = batch.combine_chunks()  # one chunk per column and row group (here, off the simulating thread)
        writer.write_table(batch)
        self.accumulator.add(batch)

    def close(self) -> None:
        if self._held:
            whole = pa.concat_tables(self._parts) if len(self._parts) > 1 else self._parts[0]
            self._parts, self._held = [], 0
            self._write(whole)
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        self._pool.shutdown()
        if self.parts_dir is None:
            self._target().close()
            return
        self.checkpoint()
        with pq.ParquetWriter(self.path, ARROW_SCHEMA, **store.PARQUET_OPTIONS) as out:  # the parts, in order
            for k in range(self.part):
                part = self.parts_dir / f"part-{k:05d}.parquet"
                with pq.ParquetFile(part) as f:
                    for g in range(f.num_row_groups):
                        out.write_table(f.read_row_group(g))
        for k in range(self.part):
            (self.parts_dir / f"part-{k:05d}.parquet").unlink()
        if self.parts_dir.exists():
            self.parts_dir.rmdir()
