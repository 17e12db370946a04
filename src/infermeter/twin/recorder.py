"""Simulated requests to ``requests.parquet``, in batches, plus streaming totals.

:class:`RecordSink` turns each finished (or rejected) :class:`SimRequest` into one
row of :data:`infermeter.records.record.ARROW_SCHEMA` and writes row groups of
``batch_rows`` with a ``pyarrow.parquet.ParquetWriter`` (on a helper thread: parquet
encoding releases the GIL), so memory does not grow with the run. It also feeds
:class:`~infermeter.analysis.sketch.LogHistogram` totals, from which huge runs get their
summary without reading the file back::

    sink = RecordSink(out_dir / "requests.parquet", warmup=0, token_times=False)
    for r in finished: sink.add(r)
    sink.close()
    sink.totals.ttft.distribution(1000.0)     # ms

What a simulated row holds: ``sent_at = arrival`` (when the engine got it; later than
``intended_at`` only when ``--max-concurrency`` held it), ``first_byte_at = sent_at``
(a streaming server sends its headers at once), ``first_token_at`` and ``ended_at``
from the engine, usage as a server reports it (``usage_source="server"``),
``cached_tokens`` = prefix-cache hit at admission. With ``token_times`` the
per-token times go to ``chunk_times`` (one token per chunk, as vLLM streams per
step); without (huge runs) the chunk lists are empty and inter-token latency is
derived per request as ``(ended_at - first_token_at) / (completion_tokens - 1)``.
Rejected requests (prompt + max_tokens over ``max_model_len``) are ``error`` /
``http_4xx`` / 400, as vLLM answers them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from infermeter.records.record import ARROW_SCHEMA
from infermeter.twin.request import FINISHED, SimRequest
from infermeter.analysis.sketch import LogHistogram



@dataclass
class Totals:
    """Streaming aggregates over measured rows (the summary of huge runs)."""

    completed: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    first_intended: float = np.inf
    last_end: float = -np.inf
    first_sent: float = np.inf
    last_sent: float = -np.inf
    first_intended_sent: float = np.inf
    last_intended_sent: float = -np.inf
    sent: int = 0
    n_in: float = 0.0
    n_out: float = 0.0
    cached: float = 0.0
    ttft: LogHistogram = field(default_factory=LogHistogram)
    ttft_intended: LogHistogram = field(default_factory=LogHistogram)
    e2e: LogHistogram = field(default_factory=LogHistogram)
    e2e_intended: LogHistogram = field(default_factory=LogHistogram)
    tpot: LogHistogram = field(default_factory=LogHistogram)
    itl: LogHistogram = field(default_factory=LogHistogram)
    lag: LogHistogram = field(default_factory=LogHistogram)
    out_tps: LogHistogram = field(default_factory=LogHistogram)
    slo_met: int = 0


class RecordSink:
    """Batches rows into a parquet file and into :class:`Totals`; see the module docstring."""

    def __init__(
        self,
        path: Path,
        *,
        warmup: int = 0,
        token_times: bool = False,
        batch_rows: int = 1 << 16,
        slo: dict[str, float] | None = None,
        on_flush: Callable[[int, float], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.warmup = warmup
        self.token_times = token_times
        self.batch_rows = batch_rows
        self.slo = slo or {}
        self.on_flush = on_flush  # (rows written so far, end time of the batch's last request)
        self.totals = Totals()
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
        measure = rid >= self.warmup
        self._account(measure, ok, intended, sent, first, ended, n_in, n_out, cached)
        if self.on_flush is not None:
            self.on_flush(self.rows, float(ended[-1]))

    def _account(self, measure: np.ndarray, ok: np.ndarray, intended: np.ndarray, sent: np.ndarray,
                 first: np.ndarray, ended: np.ndarray, n_in: np.ndarray, n_out: np.ndarray,
                 cached: pa.Array) -> None:
        t = self.totals
        if not measure.any():
            return
        t.first_intended = min(t.first_intended, float(intended[measure].min()))
        t.last_end = max(t.last_end, float(np.nanmax(ended[measure])))
        t.first_sent = min(t.first_sent, float(sent[measure].min()))
        t.last_sent = max(t.last_sent, float(sent[measure].max()))
        t.first_intended_sent = min(t.first_intended_sent, float(intended[measure].min()))
        t.last_intended_sent = max(t.last_intended_sent, float(intended[measure].max()))
        t.sent += int(measure.sum())
        t.lag.add((sent - intended)[measure])
        bad = measure & ~ok
        if bad.any():
            t.failed += int(bad.sum())
            t.errors["http_4xx"] = t.errors.get("http_4xx", 0) + int(bad.sum())
        m = measure & ok
        if not m.any():
            return
        t.completed += int(m.sum())
        t.n_in += float(n_in[m].sum())
        t.n_out += float(n_out[m].sum())
        c = np.asarray(cached.to_numpy(zero_copy_only=False), dtype=np.float64)[m]
        t.cached += float(np.nansum(c))
        ttft = (first - sent)[m]
        ttft_i = (first - intended)[m]
        e2e = (ended - sent)[m]
        e2e_i = (ended - intended)[m]
        no = n_out[m].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(no >= 2, (ended - first)[m] / (no - 1), np.nan)
            tps = np.where(e2e > 0, no / e2e, np.nan)
        t.ttft.add(ttft)
        t.ttft_intended.add(ttft_i)
        t.e2e.add(e2e)
        t.e2e_intended.add(e2e_i)
        t.tpot.add(tpot)
        t.itl.add(tpot, weights=np.maximum(no - 1, 0))
        t.out_tps.add(tps)
        if self.slo:
            meets = np.ones(ttft.size, dtype=bool)
            if "ttft_ms" in self.slo:
                meets &= ttft_i * 1000 <= self.slo["ttft_ms"]
            if "tpot_ms" in self.slo:
                meets &= ~(tpot * 1000 > self.slo["tpot_ms"])
            if "e2e_ms" in self.slo:
                meets &= e2e_i * 1000 <= self.slo["e2e_ms"]
            t.slo_met += int(meets.sum())

    def close(self) -> None:
        self.flush()
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        self._pool.shutdown()
        self._writer.close()
