"""Per-request metrics, defined once, computed column-wise from the records table.

Every metric here is documented with its formula in ``docs/metrics.md``. Times
are seconds on the run clock; the functions return numpy arrays (seconds, or
tokens/s) aligned with the rows passed in, NaN where a metric is undefined.

    ttft          = first_token_at - sent_at
    ttft_intended = first_token_at - intended_at     (coordinated-omission safe)
    ttfo          = first_answer_at - sent_at         (time to first output token: the first
                  token of the answer, after a reasoning model's thinking; = ttft for a
                  response without thinking, or a record without the column; NaN when
                  thinking came and no answer)
    thinking      = ttfo - ttft
    e2e           = ended_at - sent_at
    e2e_intended  = ended_at - intended_at
    tpot          = (ended_at - first_token_at) / (n_out - 1),  n_out >= 2
    itl           pooled gaps between token-bearing chunks; a chunk carrying k
                  tokens contributes k gaps of (gap / k) -- as one value of weight
                  k (:func:`itl_samples`), never k copies
    schedule_lag  = sent_at - intended_at
    out_tps       = n_out / e2e                      (per-request output tokens/s)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.records.record import NOT_STREAMED


def col(table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float64 with nulls as NaN."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    c = table.column(name)
    if c.null_count:
        c = pc.fill_null(c.cast(pa.float64()), float("nan"))
    return np.asarray(c.to_numpy(zero_copy_only=False), dtype=np.float64)


@dataclass(frozen=True)
class RequestMetrics:
    ttft: np.ndarray
    ttft_intended: np.ndarray
    e2e: np.ndarray
    e2e_intended: np.ndarray
    tpot: np.ndarray
    schedule_lag: np.ndarray
    out_tps: np.ndarray
    n_out: np.ndarray
    n_in: np.ndarray
    ttfo: np.ndarray
    n_reasoning: np.ndarray  # thinking tokens (NaN: not known)
    n_answer: np.ndarray  # answer tokens (NaN: not known)


def request_metrics(table: pa.Table) -> RequestMetrics:
    intended = col(table, "intended_at")
    sent = col(table, "sent_at")
    first = col(table, "first_token_at")
    ended = col(table, "ended_at")
    n_out = col(table, "completion_tokens")
    n_in = col(table, "prompt_tokens")
    n_reasoning = col(table, "reasoning_tokens")
    first_answer = col(table, "first_answer_at")
    first_answer = np.where(np.isfinite(first_answer), first_answer, np.where(n_reasoning > 0, np.nan, first))
    e2e = ended - sent
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out >= 2, (ended - first) / (n_out - 1), np.nan)
        out_tps = np.where(e2e > 0, n_out / e2e, np.nan)
    return RequestMetrics(
        ttft=first - sent,
        ttft_intended=first - intended,
        e2e=e2e,
        e2e_intended=ended - intended,
        tpot=tpot,
        schedule_lag=sent - intended,
        out_tps=out_tps,
        n_out=n_out,
        n_in=n_in,
        ttfo=first_answer - sent,
        n_reasoning=n_reasoning,
        n_answer=col(table, "answer_tokens"),
    )


def inter_token_latencies(table: pa.Table) -> np.ndarray:
    """Pooled ITL samples (seconds) over all rows, each repeated by its weight; for small tables (one
    recorded stream, tests) -- summaries use :func:`itl_samples`, which allocates nothing per token."""
    values, weights = itl_samples(table)
    return np.repeat(values, weights)


def itl_samples(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Pooled ITL samples (seconds) over all rows with their weights (the tokens of the later chunk);
    see the module docstring. The arrays have one entry per chunk gap, whatever the token counts."""
    if table.num_rows == 0 or "chunk_times" not in table.column_names:
        return np.empty(0), np.empty(0, dtype=np.int64)
    times_col = table.column("chunk_times").combine_chunks()
    toks_col = table.column("chunk_tokens").combine_chunks()
    times = np.asarray(pc.list_flatten(times_col).to_numpy(zero_copy_only=False), dtype=np.float64)
    if times.size < 2:
        return np.empty(0), np.empty(0, dtype=np.int64)
    parents = np.asarray(pc.list_parent_indices(times_col).to_numpy(zero_copy_only=False))
    toks = np.asarray(pc.list_flatten(toks_col).to_numpy(zero_copy_only=False), dtype=np.int64)
    if toks.size != times.size:  # records without per-chunk counts: one token per chunk
        toks = np.ones(times.size, dtype=np.int64)
    same = parents[1:] == parents[:-1]
    gaps = (times[1:] - times[:-1])[same]
    k = np.maximum(toks[1:][same], 1)
    return gaps / k, k


def not_streamed(table: pa.Table) -> int:
    """Rows whose server answered with one JSON body (no token timing), marked by the client."""
    if table.num_rows == 0 or "error_detail" not in table.column_names:
        return 0
    detail = pc.fill_null(table.column("error_detail"), "")
    return int(pc.sum(pc.starts_with(detail, NOT_STREAMED)).as_py() or 0)
