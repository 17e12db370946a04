"""Soak windows, error budget, default alerts and fleet sizing, on hand-made records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from infermeter.study.config import Configuration, Slo
from infermeter.study.soak import default_alerts, error_budget, soak_fleet, soak_windows, window_label


def _write(path: Path, rows: list[tuple[float, float, float, str, str | None, int]]) -> Path:
    """rows: (intended_at, ttft_s, e2e_s, outcome, error_class, completion_tokens); sent = intended."""
    cols = list(zip(*rows))
    intended = pa.array(cols[0], pa.float64())
    first = [i + t if o == "ok" else None for i, t, o in zip(cols[0], cols[1], cols[3])]
    ended = [i + e for i, e in zip(cols[0], cols[2])]
    pq.write_table(pa.table({"phase": ["measure"] * len(rows), "intended_at": intended, "sent_at": intended,
                             "first_token_at": pa.array(first, pa.float64()), "ended_at": pa.array(ended, pa.float64()),
                             "outcome": list(cols[3]), "error_class": list(cols[4]),
                             "completion_tokens": pa.array(cols[5], pa.int64())}), path)
    return path


@pytest.fixture
def records(tmp_path: Path) -> Path:
    return _write(tmp_path / "requests.parquet", [
        (1.0, 0.1, 1.0, "ok", None, 10),          # window 0
        (2.0, 3.0, 4.0, "ok", None, 20),          # window 0, TTFT 3 s: misses a 2 s SLO
        (5.0, 0.0, 0.5, "error", "http_5xx", 0),  # window 0
        (12.0, 0.2, 2.0, "ok", None, 30),         # window 1
        (25.0, 0.3, 20.0, "ok", None, 40),        # window 2, E2E 20 s: a timeout with timeout_s=10
    ])


def test_windows_count_throughput_misses_and_burn_rate(records: Path) -> None:
    ws = soak_windows(records, window_s=10, duration_s=30, slo=Slo(ttft_ms=2000), objective=0.9, timeout_s=10)
    assert [window_label(w) for w in ws] == ["0–10 s", "10–20 s", "20–30 s"]
    w0, w1, w2 = ws
    assert (w0["sent"], w0["completed"], w0["failed"], w0["slo_misses"], w0["bad"]) == (3, 2, 1, 1, 2)
    assert w0["errors"] == {"http_5xx": 1}
    assert w0["output_token_throughput"] == pytest.approx(30 / 10)
    assert w0["request_throughput"] == pytest.approx(2 / 10)
    assert w0["burn_rate"] == pytest.approx((2 / 3) / 0.1)
    assert w0["ttft_ms"]["max"] == pytest.approx(3000.0)
    assert (w1["bad"], w1["burn_rate"], w1["error_rate"]) == (0, 0.0, 0.0)
    assert w2["errors"] == {"timeout": 1} and w2["completed"] == 0 and w2["ttft_ms"]["count"] == 0


def test_error_budget_is_exhausted_in_the_first_window_past_it(records: Path) -> None:
    ws = soak_windows(records, window_s=10, duration_s=30, slo=Slo(ttft_ms=2000), objective=0.9, timeout_s=10)
    b = error_budget(ws, 0.9)
    assert (b["requests"], b["bad"], b["failed"], b["slo_misses"]) == (5, 3, 2, 1)
    assert b["allowed_bad"] == pytest.approx(0.5)
    assert b["consumed"] == pytest.approx(6.0)
    assert b["exhausted_at_s"] == 10


def test_without_a_timeout_a_slow_request_is_a_success(records: Path) -> None:
    ws = soak_windows(records, window_s=10, duration_s=30, slo=Slo(), objective=0.999)
    assert ws[2]["errors"] == {} and ws[2]["completed"] == 1 and ws[0]["slo_misses"] == 0


def test_default_alerts_follow_the_slo_and_objective() -> None:
    assert default_alerts(Slo(ttft_ms=500, e2e_ms=8000, percentile="p99"), 0.999) == [
        "ttft_p99_ms>500", "e2e_p99_ms>8000", "error_rate>0.001"]


def _cell(cap: float | None, sat: float) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(capacity=None if cap is None else {"requests_per_s": cap}, saturation={"requests_per_s": sat})


def test_fleet_is_sized_like_capacity_planning() -> None:
    # 10 req/s over 4 req/s per replica kept 20% free: ceil(10 / 3.2) = 4 replicas
    assert soak_fleet(Configuration(config="h100-sxm"), _cell(4.0, 9.0), 10.0, "auto", 0.2)[:2] == ("4xh100-sxm:tp1", 4)
    # no SLO capacity: saturation's 9 req/s -> ceil(10 / 7.2) = 2 replicas of a 4-GPU tp4 deployment
    assert soak_fleet(Configuration(config="4xa100-80gb:tp4"), _cell(None, 9.0), 10.0, "auto", 0.2)[:2] == \
        ("8xa100-80gb:tp4", 2)
    assert soak_fleet(Configuration(config="h200"), None, 10.0, 3, 0.2)[:2] == ("3xh200:tp1", 3)


def test_requests_cancelled_at_the_end_count_as_failed_in_their_window(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.parquet", [(1.0, 0.1, 1.0, "ok", None, 10), (2.0, 0.0, 9.0, "cancelled", None, 0)])
    (w,) = soak_windows(path, window_s=10, duration_s=10, slo=Slo(), objective=0.9)
    assert (w["sent"], w["completed"], w["failed"], w["errors"]) == (2, 1, 1, {"cancelled": 1})


def test_a_soak_runs_its_fleet_split_over_processes_with_the_configured_router(tmp_path: Path) -> None:
    import json

    from infermeter.study.config import build_study
    from infermeter.study.soak import run_soaks

    study = build_study({"model": "llama-3.1-8b", "configurations": ["h100-sxm"], "profiles": ["chat"],
                         "soak": {"duration_s": 60, "rate_per_s": 6.0, "window_s": 30, "replicas": 3, "workers": 2,
                                  "router": "session"}}, "test")
    lines: list[str] = []
    (soak,) = run_soaks(study, [], tmp_path / "soak", progress=lines.append)
    assert soak.hardware == "3xh100-sxm:tp1" and soak.replicas == 3
    assert soak.router == "session" and soak.workers == 2
    run = json.loads((Path(soak.run_dir) / "run.json").read_text())
    assert run["runtime"]["backend"] == "processes" and run["target"]["emulated"]["router"] == "session"
    assert any("router session; 2 worker process(es)" in line for line in lines)
    assert sum(w["sent"] for w in soak.windows) == soak.budget["requests"] > 300


@pytest.mark.parametrize(("soak", "needle"), [({"router": "least-outstanding"}, "router"), ({"workers": 0}, "workers")])
def test_soak_fleet_settings_are_checked(soak: dict, needle: str) -> None:
    from infermeter.errors import ConfigError
    from infermeter.study.config import build_study

    with pytest.raises(ConfigError, match=needle):
        build_study({"model": "llama-3.1-8b", "configurations": ["h100-sxm"], "profiles": ["chat"],
                     "soak": {"duration_s": 60, "rate_per_s": 1.0, **soak}}, "test")
