"""Write ``results.json``: a schema-faithful inference-benchmarker results file (not the tool's own output).

inference-benchmarker is a Rust binary, not installable from the package index here, so this script applies
its result rules, as read in its source (github.com/huggingface/inference-benchmarker, v1.1.0, commit
dfef39d56b3d697b735c90381e9d533b09d3b0c6: ``src/writers.rs`` BenchmarkReportWriter / BenchmarkResultsWriter,
``src/results.rs``, ``src/requests.rs`` TextGenerationAggregatedResponse), to the records of infermeter's own
run in ``../native`` (same server, same workload: its ``--benchmark-kind throughput``, 4 VUs):

- responses are kept in completion order; ``duration`` = the last one's end - the first one's start;
- ``time_to_first_token`` = the first non-empty content delta - start; ``inter_token_latency`` = per request,
  the gaps after the first token summed / (tokens - 1); ``e2e_latency`` = end ([DONE]) - start;
- percentiles interpolate linearly (numpy's default), durations truncate to microseconds before ``/ 1000``;
- ``token_throughput_secs`` = generated tokens / duration, ``request_rate`` = successful / duration,
  ``total_tokens_sent`` = prompt tokens of the successful requests, ``duration_ms`` an integer.

The tool's first result is always its warmup step (``id: warmup``); here it is computed from the first four
requests only so that the schema is complete (the importer skips it). Run from the repository root:
``python tests/data/interop/inference-benchmarker/make_sample.py``.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).parent
NATIVE = HERE.parent / "native"


def _ms(seconds: float) -> float:
    return math.floor(seconds * 1e6) / 1000.0  # Duration::as_micros() as f64 / 1000.


def _pct(values: list[float]) -> dict[str, float]:
    out = {f"p{q}": _ms(float(np.percentile(values, q))) for q in (50, 60, 70, 80, 90, 95, 99)}
    out["avg"] = _ms(sum(values) / len(values))
    return out


def result(rows: list[dict], rid: str, executor: str, config: dict) -> dict:
    rows = sorted(rows, key=lambda r: r["ended_at"])  # BenchmarkResults.add_response in completion order
    ok = [r for r in rows if r["outcome"] == "ok"]
    duration = rows[-1]["ended_at"] - rows[0]["sent_at"]
    n = [sum(r["chunk_tokens"]) for r in ok]
    ttft = [r["chunk_times"][0] - r["sent_at"] for r in ok]
    itl = [(r["chunk_times"][-1] - r["chunk_times"][0]) / (k - 1) if k > 1 else 0.0 for r, k in zip(ok, n)]
    e2e = [r["ended_at"] - r["sent_at"] for r in ok]
    return {"id": rid, "executor_type": executor, "config": config, "total_requests": len(rows),
            "total_tokens": sum(n), "token_throughput_secs": sum(n) / duration,
            "duration_ms": math.floor(duration * 1e6) // 1000, "time_to_first_token_ms": _pct(ttft),
            "inter_token_latency_ms": _pct(itl), "failed_requests": len(rows) - len(ok),
            "successful_requests": len(ok), "request_rate": len(ok) / duration,
            "total_tokens_sent": sum(int(r["prompt_tokens"]) for r in ok), "e2e_latency_ms": _pct(e2e)}


def main() -> None:
    rows = [r for r in pq.read_table(NATIVE / "requests.parquet").to_pylist() if r["phase"] == "measure"]
    rows.sort(key=lambda r: r["sent_at"])
    # the report's own start/end: native's start, one warmup second before, and its last response
    run = json.loads((NATIVE / "run.json").read_text())
    end = datetime.fromisoformat(run["started_at"]) + timedelta(seconds=max(r["ended_at"] for r in rows))
    start = datetime.fromisoformat(run["started_at"]) - timedelta(seconds=1)
    tokens = {"num_tokens": 64, "min_tokens": 64, "max_tokens": 64, "variance": 0}
    report = {
        "config": {"max_vus": 4, "duration_secs": 6, "benchmark_kind": "Throughput", "warmup_duration_secs": 1,
                   "rates": None, "num_rates": 10, "prompt_options": tokens,
                   "decode_options": {**tokens, "num_tokens": 16, "min_tokens": 16, "max_tokens": 16},
                   "tokenizer": "HuggingFaceTB/SmolLM2-135M-Instruct", "model_name": "smollm2", "profile": None,
                   "meta": {"engine": "infermeter-emulator", "device": "cpu"}, "run_id": "3f9c2a1"},
        "results": [result(rows[:4], "warmup", "ConstantVUs", {"max_vus": 1, "duration_secs": 1, "rate": None}),
                    result(rows, "throughput", "ConstantVUs", {"max_vus": 4, "duration_secs": 6, "rate": None})],
        "start_time": start.isoformat(), "end_time": end.isoformat(),
        "system": {"cpu": ["Intel Xeon cpu0@2200MHz", "Intel Xeon cpu1@2200MHz"], "memory": "7.76 GB",
                   "os_name": "Ubuntu", "os_version": "24.04", "kernel": "6.8.0", "hostname": "bench-host"},
    }
    (HERE / "results.json").write_text(json.dumps(report, separators=(",", ":")))  # serde_json::to_string's form


if __name__ == "__main__":
    main()
