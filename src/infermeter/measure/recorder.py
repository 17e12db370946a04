"""Simulated requests to ``requests.parquet``, in batches, plus streaming totals.

:class:`RecordSink` turns each finished (or rejected) :class:`SimRequest` into one
row of :data:`infermeter.records.record.ARROW_SCHEMA` and writes row groups of
``batch_rows`` with a ``pyarrow.parquet.ParquetWriter`` (on a helper thread: parquet
encoding releases the GIL), so memory does not grow with the run. Each batch also goes to
the run's :class:`~infermeter.analysis.accumulator.Accumulator` (the one summary builder), so
no run, however long, reads its records back to be summarized::

    sink = RecordSink(out_dir / "requests.parquet", Accumulator.for_run(run), warmup=0, token_times=False)
    for r in finished: sink.add(r)
    sink.close()
    sink.accumulator.summary(run).ttft_ms.p50     # ms

What a simulated row holds: ``sent_at = arrival`` (when the engine got it; later than
``intended_at`` only when ``--max-concurrency`` held it), ``first_byte_at = sent_at``
(a streaming server sends its headers at once), ``first_token_at`` and ``ended_at``
from the engine, usage as a server reports it (``usage_source="server"``),
``cached_tokens`` = prefix-cache hit at admission. With ``token_times`` the
per-token times go to ``chunk_times`` (one token per chunk, as vLLM streams per
step); without (huge runs) the chunk lists are empty and inter-token latency is
derived per request as ``(ended_at - first_token_at) / (completion_tokens - 1)`` (the
accumulator's ``derive_itl``).
Rejected requests (prompt + max_tokens over ``max_model_len``) are ``error`` /
``http_4xx`` / 400, as vLLM answers them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from infermeter.analysis.accumulator import Accumulator
from infermeter.records.record import ARROW_SCHEMA
from infermeter.twin.request import FINISHED, SimRequest


class RecordSink:
    """Batches rows into a parquet file and into an accumulator; see the module docstring."""

    def __init__(
        self,
        path: Path,
        accumulator: Accumulator,
        *,
        warmup: int = 0,
        token_times: bool = False,
        batch_rows: int = 1 << 16,
        on_flush: Callable[[int, float], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.warmup = warmup
        self.token_times = token_times
        self.batch_rows = batch_rows
        self.accumulator = accumulator
        self.on_flush = on_flush  # (rows written so far, end time of the batch's last request)
        self.rows = 0
        self._writer = pq.ParquetWriter(self.path, ARROW_SCHEMA, compression="zstd")
        self._buf: list[SimRequest] = []
        # parquet encoding and compression release the GIL: write on a helper thread
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infermeter-records")
        self._pending: Future[None] | None = None

    def add(self, r: SimRequest) -> None:
        self._buf.append(r)
        if len(self._buf) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        buf = self._buf
        if not buf:
            return
        self._buf = []
        n = len(buf)
        (rid_l, intended_l, sent_l, first_l, ended_l, n_in_l, n_out_l, cached_l, max_l, conv_l, grp_l, state_l,
         details) = zip(*[(r.rid, r.arrival if r.intended_at is None else r.intended_at, r.arrival,
                           r.first_token_at, r.ended_at, r.prompt_tokens, r.outputs, r.cached_tokens, r.max_tokens,
                           r.conversation_id, r.prefix_group, r.state, r.error) for r in buf])
        ok = np.array(state_l, dtype=np.int64) == FINISHED
        all_ok = bool(ok.all())
        okp = pa.array(ok)
        rid = np.array(rid_l, dtype=np.int64)
        intended = np.array(intended_l, dtype=np.float64)
        sent = np.array(sent_l, dtype=np.float64)
        first = np.array(first_l, dtype=np.float64)  # None -> nan
        ended = np.array(ended_l, dtype=np.float64)
        n_in = np.array(n_in_l, dtype=np.int64)
        n_out = np.array(n_out_l, dtype=np.int64)
        cached = pa.array(cached_l, pa.int64())
        if self.token_times:
            chunk_times = pa.array([r.token_times or [] for r in buf], pa.list_(pa.float64()))
            chunk_tokens = pa.array([[1] * len(r.token_times or ()) for r in buf], pa.list_(pa.int32()))
        else:
            zeros = pa.array(np.zeros(n + 1, dtype=np.int32))
            chunk_times = pa.ListArray.from_arrays(zeros, pa.array([], pa.float64()))
            chunk_tokens = pa.ListArray.from_arrays(zeros, pa.array([], pa.int32()))
        n_out_ok = np.where(ok, n_out, 0) if not all_ok else n_out
        no_str, no_int = pa.scalar(None, pa.string()), pa.scalar(None, pa.int32())
        table = pa.table(
            {
                "request_id": rid,
                "phase": pc.if_else(pa.array(rid < self.warmup), "warmup", "measure"),
                "worker": pa.array(np.zeros(n, dtype=np.int32)),
                "intended_at": intended,
                "sent_at": sent,
                "first_byte_at": sent,
                "first_token_at": pa.array(first, pa.float64(), from_pandas=True),
                "ended_at": ended,
                "chunk_times": chunk_times,
                "chunk_tokens": chunk_tokens,
                "outcome": pc.if_else(okp, "ok", "error"),
                "error_class": pc.if_else(okp, no_str, "http_4xx"),
                "error_detail": pa.nulls(n, pa.string()) if all_ok else pa.array(details, pa.string()),
                "http_status": pc.if_else(okp, no_int, pa.scalar(400, pa.int32())),
                "requested_input_tokens": n_in,
                "requested_output_tokens": pa.array(max_l, pa.int64()),
                "prompt_tokens": n_in,
                "completion_tokens": n_out_ok,
                "stream_tokens": n_out_ok,
                "usage_source": pc.if_else(okp, "server", no_str),
                "cached_tokens": cached,
                "conversation_id": pa.array(conv_l, pa.int64()),
                "prefix_group": pa.array(grp_l, pa.int64()),
                "finish_reason": pa.array(np.where(ok, "length", None), pa.string()),
            },
            schema=ARROW_SCHEMA,
        )
        if self._pending is not None:  # one write in flight at most: bounded memory
            self._pending.result()
        self._pending = self._pool.submit(self._writer.write_table, table)
        self.rows += n
        self.accumulator.add(table)
        if self.on_flush is not None:
            self.on_flush(self.rows, float(ended[-1]))

    def close(self) -> None:
        self.flush()
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        self._pool.shutdown()
        self._writer.close()
