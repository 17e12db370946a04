"""A simulated run ends as a measured one: grace_s after --duration, what is in flight is cancelled;
the waiting queue at the start and the end of the run is evidence of saturation."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from infermeter.measure import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.series import LevelSeries, series_mean, sum_series

P = LinearStepTime(base_s=0.02, per_token_s=1e-4)
CAP = P.saturation_rate(100, 50, 32)  # requests/s the fake serves at full batch


def _plan(tmp_path, name, rate, *, duration=60.0, grace=5.0, requests=None):
    twin = fake_twin(predictor=P, engine=EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096))
    cfg = RunConfig(rate=rate, arrival="constant", duration_s=None if requests else duration, requests=requests,
                    grace_s=grace, input_tokens="100", output_tokens="50", out=str(tmp_path / name), seed=1)
    return SimPlan(cfg, twin=twin, token_times="off")


def test_an_overloaded_run_ends_grace_after_the_duration_with_cancelled_records(tmp_path):
    res = _plan(tmp_path, "over", 3 * CAP).run()
    assert res.virtual_s == pytest.approx(65.0)  # not after the whole queue drained
    s = res.summary
    t = pq.read_table(res.run_dir / "requests.parquet").to_pydict()
    cancelled = [i for i, o in enumerate(t["outcome"]) if o == "cancelled"]
    assert s["cancelled"] == len(cancelled) > 0 and s["unfinished"] == s["cancelled"]
    assert s["scheduled"] == len(t["outcome"]) == s["completed"] + s["cancelled"]
    assert all(t["ended_at"][i] == pytest.approx(65.0) for i in cancelled)
    assert all(t["completion_tokens"][i] is None and t["usage_source"][i] is None for i in cancelled)
    some = [t["stream_tokens"][i] for i in cancelled if t["first_token_at"][i] is not None]
    assert some and all(0 < n < 50 for n in some)  # what they had streamed
    assert s["saturated"] and any("never finished" in e for e in s["saturation"]["evidence"])
    run = json.loads((res.run_dir / "run.json").read_text())
    assert run["runtime"]["cancelled"] == s["cancelled"] and run["load"]["limits"]["grace_s"] == 5.0


def test_the_waiting_queue_grows_when_saturated_and_not_otherwise(tmp_path):
    over = _plan(tmp_path, "over", 2 * CAP).run().run["server_metrics"]
    under = _plan(tmp_path, "under", 0.5 * CAP).run().run["server_metrics"]
    assert over["num_requests_waiting_end"] > over["num_requests_waiting_start"] + 50
    assert under["num_requests_waiting_end"] < 1 and under["num_requests_waiting_start"] < 1
    assert over["num_requests_waiting_end"] <= over["num_requests_waiting_max"]


def test_runs_without_a_duration_drain_as_measured_ones_do(tmp_path):
    res = _plan(tmp_path, "req", 3 * CAP, requests=600).run()
    assert res.summary["completed"] == 600 and res.summary["cancelled"] == 0


def test_level_series_means_over_any_interval():
    s = LevelSeries(width=1.0, max_buckets=8)
    s.set(0.0, 1)
    s.set(4.0, 3)
    s.close(20.0)  # past 8 buckets of 1 s: coarsened to 4 s
    assert s.width == 4.0
    assert s.mean(0.0, 4.0) == pytest.approx(1.0) and s.mean(4.0, 20.0) == pytest.approx(3.0)
    t = LevelSeries(width=1.0, max_buckets=64)
    t.set(0.0, 2)
    t.close(20.0)
    total = sum_series([s.state(), t.state()])
    assert series_mean(total, 0.0, 4.0) == pytest.approx(3.0)
    assert series_mean(total, 8.0, 20.0) == pytest.approx(5.0)


def test_eta_from_the_pace_so_far(monkeypatch):
    from infermeter.measure import eta as eta_mod

    now = [100.0]
    monkeypatch.setattr(eta_mod.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    e = eta_mod.Eta(lines.append, virtual_s=3600.0, every_s=5.0, first_s=2.0)
    e(60.0, 100)
    assert lines == []  # nothing in the first seconds
    now[0] = 103.0
    e(360.0, 1000)  # a tenth of the hour in 3 s: 27 s to go
    assert e.eta_s == pytest.approx(27.0) and "ETA 27 s" in lines[-1] and "0.10 of 1 h" in lines[-1]
    now[0] = 104.0
    e(400.0, 1100)
    assert len(lines) == 1  # at most every 5 s


def test_clients_give_up_as_measured_ones_do_and_the_queue_stays_bounded(tmp_path):
    twin = fake_twin(predictor=P, engine=EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096))
    cfg = RunConfig(rate=3 * CAP, arrival="constant", duration_s=120.0, grace_s=5.0, input_tokens="100",
                    output_tokens="50", first_token_timeout_s=10.0, timeout_s=30.0, out=str(tmp_path / "t"), seed=1)
    res = SimPlan(cfg, twin=twin, token_times="off").run()
    s, sm = res.summary, res.run["server_metrics"]
    t = pq.read_table(res.run_dir / "requests.parquet").to_pydict()
    timed = [i for i, c in enumerate(t["error_class"]) if c == "first_token_timeout"]
    assert timed and s["errors"]["first_token_timeout"] == len(timed)
    assert all(t["outcome"][i] == "error" and t["first_token_at"][i] is None for i in timed)
    assert all(t["ended_at"][i] - t["sent_at"][i] == pytest.approx(10.0) for i in timed)
    # the engine let go of them: its queue holds about 10 s of arrivals, not the whole backlog
    assert sm["num_requests_waiting_max"] <= 3 * CAP * 10 + 40
    assert s["scheduled"] == len(t["outcome"]) == s["completed"] + s["failed"] + s["cancelled"]
