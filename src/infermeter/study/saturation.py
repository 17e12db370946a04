"""Saturation throughput of a closed-loop run, over the window where every stream was busy.

A closed loop of ``C`` streams ramps up (the first ``C`` requests arrive together) and drains at
the end (streams stop one by one), so whole-run throughput understates what the deployment
sustains, by 10-25 % with a few hundred requests. :func:`steady_throughput` measures only the
steady window ``[a, b)``: ``a`` = the send time of request ``C + 1`` (the first request of the
second round: the burst is over), ``b`` = the last send (until then every stream had a request
in flight)::

    >>> sent = np.repeat(np.arange(10) * 1.08, 8)      # 8 streams in lock step, 10 rounds; each request:
    >>> records = pa.table({"sent_at": sent, "first_token_at": sent + 0.1, "ended_at": sent + 1.08,  # 50 tokens
    ...                     "outcome": ["ok"] * 80, "completion_tokens": [50] * 80, "prompt_tokens": [200] * 80})
    >>> s = steady_throughput(records, concurrency=8)   # (a real run: pq.read_table("steps/1/requests.parquet"))
    >>> round(s.output_tokens_per_s, 1), round(s.window_s, 2), s.method     # 8 x 50 / 1.08 over [1.08, 9.72)
    (370.4, 8.64, 'steady window')

Output tokens: each successful request's tokens are spread evenly over ``[first_token_at,
ended_at]`` and the part inside the window counts. Requests/s = output tokens/s / mean output
tokens per request (steadier than counting completions, which favours short requests); input
tokens/s = requests/s x mean input tokens. With too few requests for a window (``<= C + 1``
sent) it returns ``None`` and the caller uses the whole-run summary.

An open-loop step that keeps up serves what arrives, so :func:`arrival_throughput` gives its
throughput as the achieved send rate x the share of sent requests that succeeded (tokens/s = that x
the mean tokens per request) — the whole-run figure would count the drain after the last send.
This is the sustained rate of :mod:`infermeter.analysis.sustained` (``open_loop_rate``), the one
definition ``capacity``, ``cost`` and ``find-max`` use too.
It also returns the schedule's own realized rate (``schedule_rate_per_s``: a Poisson schedule of
N requests differs from its mean rate by about 1/sqrt(N)).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from infermeter.analysis.metrics import col
from infermeter.analysis.sustained import open_loop_rate

METHOD = "steady window"
ARRIVAL = "arrival rate"


@dataclass(frozen=True)
class Steady:
    requests_per_s: float
    input_tokens_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    start_s: float
    end_s: float
    method: str = METHOD
    schedule_rate_per_s: float | None = None
    send_rate_per_s: float | None = None

    @property
    def window_s(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "window_s": self.window_s}


def _tokens(table: pa.Table, name: str, fallback: str) -> np.ndarray:
    v = col(table, name)
    alt = col(table, fallback)
    return np.where(np.isfinite(v), v, alt)


def steady_throughput(table: pa.Table, concurrency: int) -> Steady | None:
    """Throughput over the busy window of a closed loop of ``concurrency`` streams (see the module docstring)."""
    sent = np.sort(col(table, "sent_at")[np.isfinite(col(table, "sent_at"))])
    if concurrency < 1 or sent.size <= concurrency + 1:
        return None
    a, b = float(sent[concurrency]), float(sent[-1])
    if not b > a:
        return None
    outcome = np.asarray(table.column("outcome").to_numpy(zero_copy_only=False), dtype=object) \
        if "outcome" in table.column_names else np.full(table.num_rows, "ok", dtype=object)
    ok = outcome == "ok"
    first, ended = col(table, "first_token_at")[ok], col(table, "ended_at")[ok]
    n_out = _tokens(table, "completion_tokens", "stream_tokens")[ok]
    n_in = col(table, "prompt_tokens")[ok]
    good = np.isfinite(first) & np.isfinite(ended) & np.isfinite(n_out)
    first, ended, n_out = first[good], ended[good], n_out[good]
    if n_out.size == 0 or not np.nansum(n_out) > 0:
        return None
    span = ended - first
    with np.errstate(invalid="ignore", divide="ignore"):
        overlap = np.clip((np.minimum(ended, b) - np.maximum(first, a)) / span, 0.0, 1.0)
    instant = ((ended >= a) & (ended < b)).astype(float)
    share = np.where(span > 0, overlap, instant)
    out_tps = float((n_out * share).sum() / (b - a))
    mean_out = float(n_out.mean())
    mean_in = float(np.nanmean(n_in)) if np.isfinite(n_in).any() else 0.0
    rps = out_tps / mean_out if mean_out > 0 else 0.0
    return Steady(requests_per_s=rps, input_tokens_per_s=rps * mean_in, output_tokens_per_s=out_tps,
                  total_tokens_per_s=out_tps + rps * mean_in, start_s=a, end_s=b)


def _rate(times: np.ndarray) -> float | None:
    t = times[np.isfinite(times)]
    if t.size < 2 or not t.max() > t.min():
        return None
    return float((t.size - 1) / (t.max() - t.min()))


def arrival_throughput(table: pa.Table) -> Steady | None:
    """Throughput of an open-loop step from its send rate (see the module docstring)."""
    if "phase" in table.column_names:
        phase = np.asarray(table.column("phase").to_numpy(zero_copy_only=False), dtype=object)
        table = table.filter(pa.array(phase == "measure"))
    intended, sent = col(table, "intended_at"), col(table, "sent_at")
    send = _rate(sent)
    if send is None:
        return None
    outcome = np.asarray(table.column("outcome").to_numpy(zero_copy_only=False), dtype=object)
    ok = outcome == "ok"
    n_ok, n_err, n_cancel = int(ok.sum()), int((outcome == "error").sum()), int((outcome == "cancelled").sum())
    n_out = _tokens(table, "completion_tokens", "stream_tokens")[ok]
    n_in = col(table, "prompt_tokens")[ok]
    if not n_ok + n_err or not np.isfinite(n_out).any():
        return None
    rps = open_loop_rate(send, n_ok, n_err, n_cancel)
    mean_out = float(np.nanmean(n_out))
    mean_in = float(np.nanmean(n_in)) if np.isfinite(n_in).any() else 0.0
    t = sent[np.isfinite(sent)]
    return Steady(requests_per_s=rps, input_tokens_per_s=rps * mean_in, output_tokens_per_s=rps * mean_out,
                  total_tokens_per_s=rps * (mean_in + mean_out), start_s=float(t.min()), end_s=float(t.max()),
                  method=ARRIVAL, schedule_rate_per_s=_rate(intended), send_rate_per_s=send)
