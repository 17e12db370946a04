"""--workers N: one striped schedule, one timeline, every request exactly once; calibration and --strict."""

import asyncio
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from infermeter.measure import Measurement, RunConfig


def test_two_workers_share_one_timeline_open_loop(emulator, tmp_path):
    res = asyncio.run(Measurement(RunConfig(url=emulator.base_url, workers=2, rate=80, arrival="constant", requests=120,
                                            warmup=4, output_tokens="4", scrape=False, calibrate=False,
                                            out=str(tmp_path / "w"))).run())
    t = pq.read_table(tmp_path / "w" / "requests.parquet")
    ids = t.column("request_id").to_numpy()
    assert ids.tolist() == list(range(124))
    assert (t.column("worker").to_numpy() == ids % 2).all()
    # intended times are the single schedule's: k / 80 s, on one clock shared by both processes
    assert t.column("intended_at").to_numpy() == pytest.approx(ids / 80, abs=1e-9)
    lag = t.column("sent_at").to_numpy() - t.column("intended_at").to_numpy()
    # sends follow the shared schedule (timing quality on this shared machine is the benchmark's job)
    assert lag.min() >= 0 and np.percentile(lag, 50) < 0.010
    s = res.summary
    assert s["completed"] == 120 and s["achieved_rate"] == pytest.approx(80, rel=0.1)
    run = json.loads((tmp_path / "w" / "run.json").read_text())
    assert run["runtime"]["merge"] == {"records": 124, "per_worker": [62, 62], "duplicates": 0, "missing": 0}
    assert len({w["pid"] for w in run["runtime"]["workers"]}) == 2
    assert run["load"]["backend"] == "processes" and not (tmp_path / "w" / "workers").exists()


def test_closed_loop_streams_are_split_and_every_request_counted_once(emulator, tmp_path):
    asyncio.run(Measurement(RunConfig(url=emulator.base_url, workers=3, concurrency=5, requests=50, output_tokens="3",
                                      scrape=False, out=str(tmp_path / "c"))).run())
    t = pq.read_table(tmp_path / "c" / "requests.parquet")
    assert sorted(t.column("request_id").to_pylist()) == list(range(50))
    run = json.loads((tmp_path / "c" / "run.json").read_text())
    assert [w["max_in_flight"] for w in run["runtime"]["workers"]] == [2, 2, 1]


def test_calibration_warns_and_strict_refuses(emulator, tmp_path, cli):
    args = ["run", "--url", emulator.base_url, "--rate", "1000000", "--requests", "20", "--output-tokens", "2",
            "--no-scrape"]
    p = cli(*args, "--strict", "--out", str(tmp_path / "s"))
    assert p.returncode == 2 and "--strict: client_capacity: requested 1000000 req/s exceeds 80%" in p.stderr
    assert not (tmp_path / "s").exists()
    p = cli(*args, "--out", str(tmp_path / "w"))
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "w" / "summary.json").read_text())
    assert any(w.startswith("client_capacity:") for w in s["warnings"])
    cal = json.loads((tmp_path / "w" / "run.json").read_text())["calibration"]
    assert cal["capacity_rps"] > 100 and cal["tokens_per_request"] == 2.0
