"""Shared builders for the study tests: synthetic cells (no simulation) and a tiny records table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from infermeter.study.cells import CellResult
from infermeter.study.config import build_study

TODAY = dt.date(2026, 11, 30)


def make_cell(config: str, profile: str, out_tps: float, *, hardware: str | None = None, source: str = "simulated",
              model: str | None = "meta-llama/Llama-3.1-8B-Instruct", rps: float | None = None,
              cap_rps: float | None = None, kv_max: float | None = 0.5, preempt: int | None = 0,
              waiting_max: int | None = 10, running_max: int | None = 256, prefix: float | None = 0.5,
              e2e_p99: tuple[float, float] = (1000.0, 5000.0), ttft_p95: float = 100.0,
              unl: tuple[float, float] = (20.0, 8.0), bracket: float | None = 0.0) -> CellResult:
    """A cell whose figures are given directly: output tokens/s at saturation, capacity, server state. ``bracket``:
    how far above the capacity the next rate tried missed the SLO (0: exactly there; None: nothing above it missed,
    the capacity is a lower bound)."""
    rps = rps if rps is not None else out_tps / 100.0

    def lat(ttft95: float, e2e99: float, ttft50: float = 10.0, tpot50: float = 10.0) -> dict[str, dict[str, float]]:
        return {"ttft_ms": {"p50": ttft50, "p90": ttft95, "p95": ttft95, "p99": ttft95},
                "tpot_ms": {"p50": tpot50, "p90": tpot50, "p95": tpot50, "p99": tpot50},
                "e2e_ms": {"p50": e2e99, "p90": e2e99, "p95": e2e99, "p99": e2e99}}

    sat = {"requests_per_s": rps, "input_tokens_per_s": rps * 200, "output_tokens_per_s": out_tps,
           "total_tokens_per_s": out_tps + rps * 200, "step": 1, "describe": "concurrency 256", "kind": "saturation",
           "concurrency": 256, "offered_rate": None, "fraction": None, "method": "steady window", "window_s": 10.0}
    cap = None
    if cap_rps is not None:
        cap = {**sat, "requests_per_s": cap_rps, "output_tokens_per_s": cap_rps * 100,
               "input_tokens_per_s": cap_rps * 200, "total_tokens_per_s": cap_rps * 300, "step": 2, "kind": "rate",
               "knee_low_rps": cap_rps, "knee_high_rps": None if bracket is None else cap_rps * (1 + bracket),
               "knee_precision": bracket}
    latency = {"saturation": lat(ttft_p95, e2e_p99[1]), "unloaded": lat(unl[0], e2e_p99[0], unl[0], unl[1])}
    if cap is not None:
        latency["capacity"] = lat(ttft_p95 / 2, e2e_p99[1] / 2)
    steps = [{"k": 0, "kind": "synchronous", "meets_slo": cap is not None, "slo_failures": [] if cap else ["ttft p95 9,000 ms > 2000 ms"],
              "request_throughput": 0.5, "output_token_throughput": 50.0, "ttft_ms_p95": unl[0], "valid": True}]
    return CellResult(config=config, hardware=hardware or config, profile=profile, source=source, model=model,
                      run_dir=f"/tmp/{config}/{profile}", steps=steps, saturation=sat, capacity=cap, latency=latency,
                      server={"kv_cache_usage_mean": (kv_max or 0) / 2 if kv_max is not None else None,
                              "kv_cache_usage_max": kv_max, "prefix_cache_hit_rate": prefix,
                              "num_requests_waiting_mean": 1.0, "num_requests_waiting_max": waiting_max,
                              "num_requests_running_max": running_max, "num_preemptions": preempt},
                      errors={"error_rate_all": 0.0, "error_rate_saturation": 0.0, "completed": 100, "failed": 0,
                              "by_class": {}},
                      tokens={"mean_input": 200.0, "mean_output": 100.0})


def study_of(configs: list[Any], profiles: list[str], **extra: Any) -> Any:
    return build_study({"model": "llama-3.1-8b", "configurations": configs, "profiles": profiles, **extra}, "test")


@pytest.fixture
def kit() -> Any:
    """The builders above, for tests (conftest is not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(make_cell=make_cell, study_of=study_of, today=TODAY)
