"""``summary.json`` from a records table and the run's description.

``build_summary(table, run=run_json)`` is the one function that turns records
into the summary, for measured runs, simulated runs and ``infermeter
summarize`` alike. Only ``phase == "measure"`` rows count. The measured window
runs from the first measured request's intended send to the last measured end;
throughputs divide by it. Token counts come from server usage when present,
otherwise from the stream (``token_count_source``); ``usage_mismatches``
counts requests whose server usage and stream chunk count differ.
Goodput counts successful requests meeting every SLO, with latencies measured
from the *intended* send (see docs/metrics.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.analysis.metrics import col, inter_token_latencies, not_streamed, request_metrics
from infermeter.analysis.stats import distribution
from infermeter.analysis.verdict import verdict
from infermeter.records.record import SCHEMA_VERSION

MS = 1000.0
SLO_KEYS = {"ttft_ms": "ttft_intended", "tpot_ms": "tpot", "e2e_ms": "e2e_intended", "itl_ms": None}


def _strings(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, None, dtype=object)
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


def build_summary(table: pa.Table, *, run: dict[str, Any] | None = None) -> dict[str, Any]:
    run = run or {}
    if "phase" in table.column_names and table.num_rows:
        table = table.filter(pc.equal(table.column("phase"), "measure"))
    outcome = _strings(table, "outcome")
    ok = outcome == "ok"
    err = outcome == "error"
    okt = table.filter(pa.array(ok)) if table.num_rows else table
    m = request_metrics(okt)
    intended = col(table, "intended_at")
    sent = col(table, "sent_at")
    ended = col(table, "ended_at")
    start = np.nanmin(intended) if table.num_rows else np.nan
    # Cancelled requests end when the run gave up on them: they must not stretch the window.
    fin = ended[ok | err]
    end = np.nanmax(fin) if fin.size and np.isfinite(fin).any() else np.nan
    duration = float(end - start) if np.isfinite(start) and np.isfinite(end) and end > start else 0.0
    completed = int(ok.sum())
    n_in = np.nansum(m.n_in)
    n_out = np.nansum(m.n_out)

    def per_s(x: float) -> float | None:
        return float(x / duration) if duration > 0 else None

    errors: dict[str, int] = {}
    for cls in _strings(table, "error_class")[err]:
        errors[str(cls)] = errors.get(str(cls), 0) + 1

    # Schedule adherence (all sent requests).
    was_sent = np.isfinite(sent)
    lag = (sent - intended)[was_sent]
    load = run.get("load") or {}
    open_loop = bool(load.get("open_loop"))
    scheduled_rate = achieved_rate = None
    if was_sent.sum() >= 2:
        s_sorted, i_sorted = np.sort(sent[was_sent]), np.sort(intended[was_sent])
        span_s, span_i = s_sorted[-1] - s_sorted[0], i_sorted[-1] - i_sorted[0]
        achieved_rate = float((was_sent.sum() - 1) / span_s) if span_s > 0 else None
        if open_loop and span_i > 0:
            # The rate this run's own schedule asked for: a Poisson schedule of N requests
            # differs from its mean rate by ~1/sqrt(N), which is not the client's fault.
            scheduled_rate = float((was_sent.sum() - 1) / span_i)
    configured_rate = float(load["target_rate"]) if open_loop and load.get("target_rate") else None
    target_rate = configured_rate if configured_rate is not None else scheduled_rate

    # Token accounting.
    usage_src = _strings(okt, "usage_source")
    n_server = int((usage_src == "server").sum())
    stream_tok = col(okt, "stream_tokens")
    # A request that ends on EOS: the server counts the EOS token, which streams no text.
    eos_extra = (_strings(okt, "finish_reason") == "stop") & (m.n_out - stream_tok == 1)
    mismatches = int(np.sum((usage_src == "server") & np.isfinite(m.n_out) & (stream_tok != m.n_out) & ~eos_extra))
    source = "server" if n_server == completed and completed else ("stream" if n_server == 0 else "mixed")

    # Goodput.
    slo = run.get("slo") or {}
    goodput = None
    if slo:
        meets = np.ones(completed, dtype=bool)
        for key, limit in slo.items():
            if key == "ttft_ms":
                meets &= m.ttft_intended * MS <= limit
            elif key == "tpot_ms":
                meets &= ~(m.tpot * MS > limit)  # NaN TPOT (1-token output) does not break the SLO
            elif key == "e2e_ms":
                meets &= m.e2e_intended * MS <= limit
        goodput = per_s(float(meets.sum()))

    itl = inter_token_latencies(okt)
    n_not_streamed = not_streamed(okt)
    runtime = run.get("runtime") or {}
    lag_d = distribution(lag, MS)
    v = verdict({
        "open_loop": open_loop, "lag_p99_ms": lag_d["p99"], "target_rate": scheduled_rate,
        "achieved_rate": achieved_rate, "cap_held": runtime.get("cap_held", 0), "completed": completed,
        "failed": int(err.sum()), "ttft_count": int(np.isfinite(m.ttft).sum()), "client_cpu": runtime.get("client_cpu"),
        "run": run, "records": int(table.num_rows),
    })
    if n_not_streamed:
        v.warnings.append(f"not_streamed: {n_not_streamed} responses came as one JSON body; their TTFT/TPOT/ITL are undefined")
    return {
        "schema_version": SCHEMA_VERSION,
        "source": run.get("source", "measured"),
        "label": run.get("label"),
        "model": run.get("model"),
        "hardware": run.get("hardware"),
        "profile": run.get("profile"),
        "load": load.get("describe"),
        "completed": completed,
        "failed": int(err.sum()),
        "dropped": int((outcome == "dropped").sum()),
        "cancelled": int((outcome == "cancelled").sum()),
        "duration_s": duration,
        "request_throughput": per_s(completed),
        "input_token_throughput": per_s(n_in),
        "output_token_throughput": per_s(n_out),
        "total_token_throughput": per_s(n_in + n_out),
        "goodput": goodput,
        "slo": slo or None,
        "valid": v.valid,
        "invalid_reasons": v.invalid_reasons,
        "warnings": v.warnings,
        "ttft_ms": distribution(m.ttft, MS),
        "tpot_ms": distribution(m.tpot, MS),
        "itl_ms": distribution(itl, MS),
        "e2e_ms": distribution(m.e2e, MS),
        "ttft_from_intended_ms": distribution(m.ttft_intended, MS),
        "e2e_from_intended_ms": distribution(m.e2e_intended, MS),
        "schedule_lag_ms": lag_d,
        "output_tokens_per_s_per_request": distribution(m.out_tps),
        "errors": errors,
        "error_rate": float(err.sum() / max(1, completed + int(err.sum()))),
        "target_rate": target_rate,
        "scheduled_rate": scheduled_rate,
        "achieved_rate": achieved_rate,
        "mean_input_tokens": float(np.nanmean(m.n_in)) if completed and np.isfinite(m.n_in).any() else None,
        "mean_output_tokens": float(np.nanmean(m.n_out)) if completed and np.isfinite(m.n_out).any() else None,
        "total_input_tokens": int(n_in),
        "total_output_tokens": int(n_out),
        "token_count_source": source,
        "usage_mismatches": mismatches,
        "cached_prompt_tokens": int(np.nansum(col(okt, "cached_tokens"))) if "cached_tokens" in okt.column_names and okt.column("cached_tokens").null_count < okt.num_rows else None,
        "server_metrics": run.get("server_metrics"),
        "gpu": run.get("gpu"),
        "alerts": run.get("alerts", []),
        "client": {k: runtime.get(k) for k in ("client_cpu", "cap_held", "max_in_flight") if k in runtime} or None,
    }
