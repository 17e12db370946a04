"""An infermeter run written in another tool's result schema (``infermeter export``).

Promise: :func:`export_run` writes the measure-phase records of a run directory as a ``vllm bench
serve --save-result --save-detailed`` JSON, a GuideLLM ``benchmarks.json`` (one benchmark, its
per-request statistics) or AIPerf ``profile_export.jsonl`` records, filling each field where it has a
meaning: per-request arrays from infermeter's timestamps (``start_times`` = ``sent_at``, ``queue_times``
= schedule lag, ``ttfts``, ``itls`` = gaps between token-bearing chunks, ``latencies`` = E2E to the
finishing event), aggregates by the tool's own rule (vllm bench's ``mean_tpot_ms`` = (latency - TTFT) /
(n - 1), GuideLLM's ``time_per_output_token_ms`` TTFT included). Importing the file again gives the
same summary figures (the round trip of ``tests/interop``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from infermeter import __version__
from infermeter.errors import DataError
from infermeter.records.store import RUN, load_table, read_json

FORMATS = ("vllm-bench", "guidellm", "aiperf")


def _rows(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    table: pa.Table = load_table(run_dir)
    run = read_json(run_dir / RUN) if (run_dir / RUN).exists() else {}
    rows = [r for r in table.to_pylist() if r.get("phase", "measure") == "measure" and r.get("outcome") in ("ok", "error")]
    if not rows:
        raise DataError(f"{run_dir}: no finished measure-phase requests to export")
    return run, rows


def _gaps(r: dict[str, Any]) -> list[float]:
    times = r.get("chunk_times") or []
    return [float(b - a) for a, b in zip(times, times[1:])]


def _stats(values: list[float], prefix: str, name: str) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values) * 1e3
    return {f"mean_{name}_ms": float(a.mean()), f"median_{name}_ms": float(np.median(a)),
            f"std_{name}_ms": float(a.std()), f"p99_{name}_ms": float(np.percentile(a, 99))}


def to_vllm_bench(run: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["outcome"] == "ok"]
    start = min(r["sent_at"] for r in rows if r.get("sent_at") is not None)
    end = max(r["ended_at"] for r in rows if r.get("ended_at") is not None)
    duration = end - start
    n_in = sum(int(r.get("prompt_tokens") or 0) for r in ok)
    n_out = sum(int(r.get("completion_tokens") or 0) for r in ok)
    load = run.get("load") or {}
    ttfts = [r["first_token_at"] - r["sent_at"] for r in ok]
    tpots = [(r["ended_at"] - r["first_token_at"]) / (r["completion_tokens"] - 1) for r in ok
             if (r.get("completion_tokens") or 0) > 1]
    out: dict[str, Any] = {
        "date": None, "endpoint_type": "openai", "backend": "openai", "label": run.get("label"),
        "model_id": run.get("model"), "tokenizer_id": run.get("model"), "num_prompts": len(rows),
        "request_rate": load.get("target_rate") if load.get("open_loop") and load.get("target_rate") else "inf",
        "burstiness": 1.0, "max_concurrency": None,
        "duration": duration, "completed": len(ok), "failed": len(rows) - len(ok),
        "total_input_tokens": n_in, "total_output_tokens": n_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0, "request_goodput": None,
        "output_throughput": n_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (n_in + n_out) / duration if duration > 0 else 0.0,
        "input_lens": [int(r.get("prompt_tokens") or 0) for r in rows],
        "output_lens": [int(r.get("completion_tokens") or 0) if r["outcome"] == "ok" else 0 for r in rows],
        "ttfts": [r["first_token_at"] - r["sent_at"] if r["outcome"] == "ok" else 0.0 for r in rows],
        "itls": [_gaps(r) if r["outcome"] == "ok" else [] for r in rows],
        "latencies": [r["ended_at"] - r["sent_at"] if r["outcome"] == "ok" else 0.0 for r in rows],
        "start_times": [r["sent_at"] for r in rows],
        "queue_times": [max(0.0, r["sent_at"] - r["intended_at"]) for r in rows],
        "generated_texts": ["" for _ in rows],
        "errors": ["" if r["outcome"] == "ok" else (r.get("error_detail") or r.get("error_class") or "error") for r in rows],
        "exported_by": f"infermeter {__version__}",
    }
    out |= _stats(ttfts, "", "ttft") | _stats(tpots, "", "tpot")
    out |= _stats([g for r in ok for g in _gaps(r)], "", "itl") | _stats([r["ended_at"] - r["sent_at"] for r in ok], "", "e2el")
    return out


def _wall(run: dict[str, Any]) -> float:
    from datetime import datetime
    try:
        return datetime.fromisoformat(str(run.get("started_at"))).timestamp()
    except ValueError:
        return 0.0


def to_guidellm(run: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    w = _wall(run)
    reqs: dict[str, list[dict[str, Any]]] = {"successful": [], "errored": [], "incomplete": []}
    for r in rows:
        ok = r["outcome"] == "ok"
        n = int(r.get("completion_tokens") or 0)
        first = r.get("first_token_at")
        last_tok = (r.get("chunk_times") or [first])[-1] if ok else None
        timings = {"targeted_start": w + r["intended_at"], "request_start": w + r["sent_at"],
                   "first_token_iteration": w + first if first is not None else None,
                   "first_output_token_iteration": w + (r.get("first_answer_at") or first) if first is not None else None,
                   "last_token_iteration": w + last_tok if last_tok is not None else None,
                   "last_request_iteration": w + r["ended_at"] if r.get("ended_at") is not None else None,
                   "request_end": w + r["ended_at"] if r.get("ended_at") is not None else None,
                   "token_iterations": int(r.get("stream_tokens") or 0)}
        stat: dict[str, Any] = {"type_": "generative_request_stats", "request_id": str(r["request_id"]),
                                "info": {"status": "completed" if ok else "errored", "timings": timings,
                                         "error": None if ok else r.get("error_detail")},
                                "prompt_tokens": r.get("prompt_tokens"), "output_tokens": n if ok else None,
                                "request_start_time": timings["request_start"], "request_end_time": timings["request_end"]}
        if ok and first is not None and last_tok is not None:
            lat = r["ended_at"] - r["sent_at"]
            stat |= {"request_latency": lat, "time_to_first_token_ms": (first - r["sent_at"]) * 1e3,
                     "inter_token_latency_ms": (last_tok - first) / (n - 1) * 1e3 if n > 1 else None,
                     "time_per_output_token_ms": (last_tok - r["sent_at"]) / n * 1e3 if n else None,
                     "output_tokens_per_second": n / lat if lat > 0 else None}
        reqs["successful" if ok else "errored"].append(stat)
    start = min(w + r["sent_at"] for r in rows)
    end = max(w + r["ended_at"] for r in rows if r.get("ended_at") is not None)
    load = run.get("load") or {}
    return {"metadata": {"version": 2, "guidellm_version": None, "exported_by": f"infermeter {__version__}"},
            "benchmarks": [{"type_": "generative_benchmark",
                            "config": {"strategy": {"type_": "poisson" if load.get("open_loop") else "concurrent",
                                                    "rate": load.get("target_rate")},
                                       "backend": {"model": run.get("model")}},
                            "requests": reqs, "start_time": start, "end_time": end, "duration": end - start}]}


def to_aiperf(run: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    w_ns = int(round(_wall(run) * 1e6)) * 1000  # integers: a float of ~1.8e18 ns is 256 ns coarse

    def ns(t: float) -> int:
        return w_ns + int(round(t * 1e9))

    out = []
    for r in rows:
        meta = {"request_start_ns": ns(r["sent_at"]), "credit_issued_ns": ns(r["intended_at"]),
                "request_end_ns": ns(r["ended_at"]) if r.get("ended_at") is not None else None,
                "benchmark_phase": "profiling", "was_cancelled": False}
        rec: dict[str, Any] = {"metadata": meta, "metrics": {}}
        if r["outcome"] == "ok":
            ms = {"time_to_first_token": (r["first_token_at"] - r["sent_at"]) * 1e3,
                  "request_latency": (r["ended_at"] - r["sent_at"]) * 1e3,
                  "inter_chunk_latency": [g * 1e3 for g in _gaps(r)],
                  "usage_completion_tokens": r.get("completion_tokens"), "usage_prompt_tokens": r.get("prompt_tokens"),
                  "output_sequence_length": r.get("completion_tokens"), "input_sequence_length": r.get("prompt_tokens")}
            if r.get("first_answer_at") is not None:
                ms["time_to_first_output_token"] = (r["first_answer_at"] - r["sent_at"]) * 1e3
            rec["metrics"] = {k: {"value": v, "unit": "ms" if "token" not in k or k.startswith("time") else "tokens"}
                              for k, v in ms.items()}
        else:
            rec["error"] = {"type": r.get("error_class"), "message": r.get("error_detail")}
        out.append(rec)
    return out


def export_run(run_dir: Path, fmt: str, out: Path) -> int:
    """Write ``run_dir`` as ``fmt`` to ``out``; returns the number of requests written."""
    if fmt not in FORMATS:
        raise DataError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    run, rows = _rows(Path(run_dir))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "vllm-bench":
        out.write_text(json.dumps(to_vllm_bench(run, rows)) + "\n", encoding="utf-8")
    elif fmt == "guidellm":
        out.write_text(json.dumps(to_guidellm(run, rows)) + "\n", encoding="utf-8")
    else:
        out.write_text("".join(json.dumps(rec) + "\n" for rec in to_aiperf(run, rows)), encoding="utf-8")
    return len(rows)
