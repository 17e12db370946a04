"""How long `infermeter report` takes over 10M+ request records (the issue's goal: under a minute on 2 cores).

    python benchmarks/report_scale.py                 # 2 runs x 6M records = 12M
    python benchmarks/report_scale.py --runs 1 --records 10000000 --keep /tmp/big

Writes synthetic result directories (columnar, never a Python object per
request; chunk_times are left empty since reports never read them), then
times build_report() over them and prints the figures: records, seconds,
records per second, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from infermeter.records.record import ARROW_SCHEMA
from infermeter.report.build import ReportOptions, build_report

CHUNK = 1_000_000


def _chunk(start: int, n: int, rate: float, rng: np.random.Generator) -> pa.Table:
    idx = np.arange(start, start + n)
    intended = idx / rate
    sent = intended + rng.uniform(0.0002, 0.002, n)
    first = sent + rng.lognormal(np.log(0.2), 0.4, n)
    out_tok = rng.integers(20, 400, n)
    ended = first + rng.lognormal(np.log(0.02), 0.2, n) * (out_tok - 1)
    ok = rng.random(n) > 0.002
    none_f = pa.nulls(n, pa.float64())
    cols = {
        "request_id": pa.array(idx, pa.int64()), "phase": pa.array(np.full(n, "measure")),
        "worker": pa.array(np.zeros(n, np.int32)), "intended_at": pa.array(intended), "sent_at": pa.array(sent),
        "first_byte_at": pa.array(np.where(ok, first, np.nan), from_pandas=True),
        "first_token_at": pa.array(np.where(ok, first, np.nan), from_pandas=True),
        "ended_at": pa.array(np.where(ok, ended, sent + 0.05)),
        "chunk_times": pa.array([[]] * n, pa.list_(pa.float64())), "chunk_tokens": pa.array([[]] * n, pa.list_(pa.int32())),
        "outcome": pa.array(np.where(ok, "ok", "error")), "error_class": pa.array(np.where(ok, None, "http_5xx")),
        "error_detail": pa.nulls(n, pa.string()), "http_status": pa.array(np.where(ok, 200, 503).astype(np.int32)),
        "requested_input_tokens": pa.array(rng.integers(100, 2000, n)), "requested_output_tokens": pa.array(out_tok),
        "prompt_tokens": pa.array(rng.integers(100, 2000, n)),
        "completion_tokens": pa.array(np.where(ok, out_tok, 0), mask=~ok),
        "stream_tokens": pa.array(np.where(ok, out_tok, 0)), "usage_source": pa.array(np.where(ok, "server", None)),
        "cached_tokens": pa.nulls(n, pa.int64()), "conversation_id": pa.nulls(n, pa.int64()),
        "prefix_group": pa.nulls(n, pa.int64()),
    }
    del none_f
    return pa.table(cols, schema=ARROW_SCHEMA)


def write_big_run(path: Path, records: int, rate: float, hardware: str, seed: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(path / "requests.parquet", ARROW_SCHEMA) as w:
        for start in range(0, records, CHUNK):
            w.write_table(_chunk(start, min(CHUNK, records - start), rate, rng))
    duration = records / rate
    dist = {k: None for k in ("count", "mean", "stdev", "min", "max", "p50", "p90", "p95", "p99", "p999")}
    summary = {"schema_version": 1, "source": "simulated", "label": path.name, "model": "bench-model",
               "hardware": hardware, "profile": "chat", "completed": records, "failed": 0, "dropped": 0,
               "duration_s": duration, "request_throughput": rate, "input_token_throughput": rate * 1000,
               "output_token_throughput": rate * 210, "total_token_throughput": rate * 1210, "goodput": None,
               "valid": True, "invalid_reasons": [], "ttft_ms": dist, "tpot_ms": dist, "e2e_ms": dist,
               "error_rate": 0.002, "target_rate": rate, "achieved_rate": rate}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "run.json").write_text(json.dumps({"schema_version": 1, "label": path.name, "source": "simulated",
                                               "model": "bench-model", "hardware": hardware, "profile": "chat",
                                               "started_at": "2025-01-01T00:00:00Z"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--records", type=int, default=6_000_000, help="records per run")
    ap.add_argument("--keep", type=Path, default=None, help="write the runs here and keep them")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="infermeter-scale-"))
    try:
        t0 = time.perf_counter()
        dirs = []
        for i in range(args.runs):
            d = root / f"run{i}"
            if not (d / "summary.json").exists():
                write_big_run(d, args.records, rate=500.0, hardware=("h100-sxm", "a100-80gb")[i % 2], seed=i)
            dirs.append(d)
        t1 = time.perf_counter()
        build_report(dirs, root / "report", ReportOptions())
        t2 = time.perf_counter()
        total = args.runs * args.records
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"records: {total:,} in {args.runs} run(s) (written in {t1 - t0:.1f} s)")
        print(f"report: {t2 - t1:.1f} s  ({total / (t2 - t1):,.0f} records/s), peak RSS {rss_mb:,.0f} MiB")
        print(f"html: {(root / 'report' / 'report.html').stat().st_size / 1024:,.0f} KiB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
