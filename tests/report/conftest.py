"""Result directories for report tests, made here (no server): realistic records, then build_summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from infermeter.analysis.accumulator import build_summary
from infermeter.records.record import ARROW_SCHEMA


def request_table(n: int, rate: float, ttft_s: float, tpot_s: float, seed: int, error_rate: float = 0.0) -> pa.Table:
    """Open-loop arrivals at a constant rate; lognormal TTFT/TPOT; output 20-200 tokens; some errors."""
    rng = np.random.default_rng(seed)
    intended = np.arange(n) / rate
    sent = intended + rng.uniform(0.0002, 0.002, n)
    ttft = rng.lognormal(np.log(ttft_s), 0.35, n)
    tpot = rng.lognormal(np.log(tpot_s), 0.15, n)
    out_tok = rng.integers(20, 200, n)
    in_tok = rng.integers(100, 1000, n)
    first = sent + ttft
    ended = first + tpot * (out_tok - 1)
    failed = rng.random(n) < error_rate
    cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
    for i in range(n):
        ok = not failed[i]
        k = int(min(out_tok[i], 8))
        times = list(np.linspace(first[i], ended[i], k)) if ok else []
        per = [int(out_tok[i]) // k] * k if ok else []
        if ok:
            per[-1] += int(out_tok[i]) - sum(per)
        row = {
            "request_id": i, "phase": "measure", "worker": 0, "intended_at": float(intended[i]), "sent_at": float(sent[i]),
            "first_byte_at": float(first[i]) if ok else None, "first_token_at": float(first[i]) if ok else None,
            "ended_at": float(ended[i]) if ok else float(sent[i] + 0.05), "chunk_times": times, "chunk_tokens": per,
            "outcome": "ok" if ok else "error", "error_class": None if ok else "http_5xx",
            "error_detail": None if ok else "503 Service Unavailable", "http_status": 200 if ok else 503,
            "requested_input_tokens": int(in_tok[i]), "requested_output_tokens": int(out_tok[i]),
            "prompt_tokens": int(in_tok[i]) if ok else None, "completion_tokens": int(out_tok[i]) if ok else None,
            "stream_tokens": int(out_tok[i]) if ok else 0, "usage_source": "server" if ok else None,
            "cached_tokens": None, "conversation_id": None, "prefix_group": None,
            "finish_reason": "length" if ok else None,
        }
        for name in ARROW_SCHEMA.names:
            cols[name].append(row.get(name))  # columns added since (reasoning): null
    return pa.table(cols, schema=ARROW_SCHEMA)


def write_run(path: Path, *, label: str = "run", model: str = "llama-3-8b", hardware: str | None = "h100-sxm",
              profile: str | None = "chat", source: str = "measured", n: int = 400, rate: float = 20.0,
              ttft_s: float = 0.15, tpot_s: float = 0.02, seed: int = 0, error_rate: float = 0.0,
              started_at: str = "2025-01-06T10:00:00Z", telemetry: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    table = request_table(n, rate, ttft_s, tpot_s, seed, error_rate)
    pq.write_table(table, path / "requests.parquet")
    run = {
        "schema_version": 1, "tool": "infermeter", "version": "0.1.0", "source": source, "label": label,
        "started_at": started_at, "seed": seed, "model": model, "hardware": hardware, "profile": profile,
        "target": {"url": "http://127.0.0.1:8000", "engine": "vllm", "emulated": None},
        "load": {"open_loop": True, "target_rate": rate, "describe": f"{rate:g} req/s constant"},
        "workload": {}, "host": {}, "config": {},
    }
    duration = float(np.nanmax(table.column("ended_at").to_numpy(zero_copy_only=False)))
    if telemetry:
        t = np.arange(0.0, duration, 0.5)
        rng = np.random.default_rng(seed + 1)
        kv = np.clip(0.2 + 0.5 * t / max(duration, 1.0) + rng.normal(0, 0.02, t.size), 0, 1)
        pq.write_table(pa.table({"t": t, "kv_cache_usage": kv, "num_requests_waiting": rng.integers(0, 5, t.size),
                                 "num_requests_running": rng.integers(5, 30, t.size)}), path / "server_metrics.parquet")
        gt = np.repeat(t, 2)
        pq.write_table(pa.table({"t": gt, "gpu": np.tile(["0", "1"], t.size), "name": ["H100"] * gt.size,
                                 "temperature_c": 45 + 10 * gt / max(duration, 1.0), "power_w": 350 + rng.normal(0, 20, gt.size)}),
                       path / "gpu.parquet")
        run["server_metrics"] = {"kv_cache_usage_mean": float(kv.mean()), "kv_cache_usage_max": float(kv.max()),
                                 "num_requests_waiting_max": 4, "num_requests_running_max": 29,
                                 "prefix_cache_hit_rate": None, "num_preemptions": 0}
    summary = build_summary(table, run=run).to_json()
    (path / "run.json").write_text(json.dumps(run))
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def write_sweep(path: Path, rates: list[float], *, label: str = "sweep", capacity: float = 40.0, **kw: Any) -> Path:
    """Steps whose latency climbs as the rate nears ``capacity`` (req/s)."""
    path.mkdir(parents=True, exist_ok=True)
    steps = []
    for k, rate in enumerate(rates):
        load = min(rate / capacity, 0.95)
        d = write_run(path / "steps" / str(k), label=label, rate=rate, ttft_s=0.1 / (1 - load), seed=k, n=150,
                      telemetry=False, **kw)
        s = json.loads((d / "summary.json").read_text())
        steps.append({"dir": f"steps/{k}", "offered_rate": rate, "meets_slo": s["valid"],
                      "output_token_throughput": s["output_token_throughput"]})
    first = json.loads((path / "steps" / "0" / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**first, "label": label}))
    (path / "summary.json").write_text(json.dumps({"schema_version": 1, "source": first["source"], "label": label,
                                                   "model": first["model"], "hardware": first["hardware"],
                                                   "profile": first["profile"], "steps": steps}))
    return path


@pytest.fixture
def make_run():
    return write_run


@pytest.fixture
def make_sweep():
    return write_sweep


@pytest.fixture(scope="module")
def make_sweep_module():
    return write_sweep


@pytest.fixture(scope="session")
def grid_runs(tmp_path_factory) -> list[Path]:
    """A 3 hardware × 3 profile set: faster hardware has lower latency; one run is a simulation."""
    root = tmp_path_factory.mktemp("grid")
    out = []
    speed = {"a100-80gb": 1.6, "h100-sxm": 1.0, "l40s": 2.2}
    profiles = {"chat": (0.12, 0.02), "rag": (0.35, 0.025), "code": (0.2, 0.03)}
    for i, (hw, f) in enumerate(speed.items()):
        for j, (prof, (ttft, tpot)) in enumerate(profiles.items()):
            out.append(write_run(root / f"{hw}-{prof}", label=f"{hw}-{prof}", hardware=hw, profile=prof,
                                 ttft_s=ttft * f, tpot_s=tpot * f, seed=10 * i + j, n=200,
                                 source="simulated" if (hw, prof) == ("l40s", "code") else "measured",
                                 started_at=f"2025-01-0{i + 1}T1{j}:00:00Z", telemetry=(i == 0)))
    return out


@pytest.fixture(scope="session")
def chromium(chromium_browser):
    """``inspect(page, extra)`` in headless Chromium (tests/conftest.py ``chromium_browser``)."""
    return chromium_browser.inspect
