"""Multi-model fleets (``simulate --fleet``): the shipped example, routing, cascade, autoscaling, sizing, bad files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from infermeter.analysis.results import ModelResult, Summary
from infermeter.cli.main import app
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig
from infermeter.measure.multifleet import FleetPlan, plan_fleet
from infermeter.twin.fleetfile import FleetFile, load_fleet
from infermeter.twin.fleetroute import FleetSource, RateProfile, replica_seconds
from infermeter.twin.request import SimRequest

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "fleet-8b-70b.yaml"
runner = CliRunner()


def _fleet(**data) -> FleetFile:
    return FleetFile.model_validate(data)


def _run(fleet: FleetFile, tmp_path: Path, name: str = "r", **cfg) -> dict:
    base = {"input_tokens": "256", "output_tokens": "64", "out": str(tmp_path / name)}
    return FleetPlan(RunConfig(**{**base, **cfg}), fleet).run().summary


def test_the_shipped_two_model_fleet_has_per_model_results(tmp_path):
    out = tmp_path / "fleet"
    res = runner.invoke(app, ["simulate", "--fleet", str(EXAMPLE), "--duration", "60", "--input-tokens", "512",
                              "--output-tokens", "64", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    s = Summary.read(out / "summary.json")
    assert s.models is not None and set(s.models) == {"llama-3.1-8b", "llama-3.1-70b"}
    small, large = s.models["llama-3.1-8b"], s.models["llama-3.1-70b"]
    assert isinstance(small, ModelResult)
    assert small.scheduled + large.scheduled == s.scheduled
    assert small.scheduled > large.scheduled  # shares 0.75 / 0.25
    assert small.slo == {"ttft_ms": 500, "tpot_ms": 30} and large.slo == {"ttft_ms": 2000, "tpot_ms": 60}
    for m in (small, large):
        assert m.slo_attainment is not None and 0 <= m.slo_attainment <= 1
        assert m.utilisation is not None and 0 < m.utilisation <= 1
    # the 70B model's tokens take longer than the 8B's on these GPUs
    assert large.tpot_ms.p50 > small.tpot_ms.p50
    pools = s.pools or {}
    assert pools["large"]["gpu"] == "2xh100-sxm:tp2" and pools["large"]["replicas"] == 2
    assert pools["large"]["gpu_hours"] > pools["small"]["gpu_hours"]  # 4 GPUs vs 1 over the same run
    run = json.loads((out / "run.json").read_text())
    assert set(run["target"]["emulated"]["fleet"]) == {"small", "large"}


def test_shares_split_the_arrivals(tmp_path):
    f = _fleet(pools=[{"name": "a", "model": "llama-3.1-8b", "gpu": "h100-sxm", "share": 0.8},
                      {"name": "b", "model": "llama-3.1-8b", "gpu": "h100-sxm", "share": 0.2}],
               traffic={"rate": 20})
    s = _run(f, tmp_path, requests=2000)
    n = s["pools"]["a"]["scheduled"] + s["pools"]["b"]["scheduled"]
    assert n == 2000
    sd = math.sqrt(n * 0.8 * 0.2)
    assert abs(s["pools"]["a"]["scheduled"] - 0.8 * n) < 5 * sd
    # one model served by both pools: models has one entry holding both
    assert s["models"]["llama-3.1-8b"]["pools"] == ["a", "b"]


def test_least_loaded_pools_one_models_traffic_across_pools(tmp_path):
    pools = [{"name": "big", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 3, "share": 0.5},
             {"name": "one", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1, "share": 0.5}]
    by_model = _run(_fleet(pools=pools, traffic={"rate": 40}), tmp_path, "m", requests=3000)
    least = _run(_fleet(pools=pools, traffic={"rate": 40}, routing="least-loaded"), tmp_path, "l", requests=3000)
    share = least["pools"]["big"]["scheduled"] / 3000
    assert abs(by_model["pools"]["big"]["scheduled"] / 3000 - 0.5) < 0.05
    assert share > 0.6  # three replicas take more than the half by-model gives them


def test_cascade_escalates_its_share_to_the_large_pool(tmp_path):
    f = _fleet(pools=[{"name": "small", "model": "llama-3.1-8b", "gpu": "h100-sxm", "share": 1.0},
                      {"name": "large", "model": "llama-3.1-70b", "gpu": "2xh100-sxm:tp2"}],
               routing="cascade", cascade={"from": "small", "to": "large", "escalation": 0.3},
               traffic={"rate": 4})
    s = _run(f, tmp_path, duration_s=120)
    c = s["cascade"]
    done = s["pools"]["small"]["completed"]
    assert abs(c["escalated"] - 0.3 * done) < 5 * math.sqrt(done * 0.3 * 0.7)
    assert s["pools"]["large"]["scheduled"] == c["escalated"]  # it takes only escalations
    # an escalated answer ends after the small model's answer and the large model's
    assert c["end_to_end_ms"]["min"] > s["pools"]["small"]["e2e_ms"]["min"] + s["pools"]["large"]["e2e_ms"]["min"] - 1


def test_rate_profile_inverts_its_intensity():
    p = RateProfile([(0, 2), (100, 10), (200, 10), (300, 0), (400, 0), (500, 5)])
    for u in np.linspace(0.1, p.intensity(900), 37):
        assert p.intensity(p.inverse(u)) == pytest.approx(u, rel=1e-9, abs=1e-9)
    assert 300 <= p.inverse(p.intensity(300) + 1e-9) <= 500  # no arrivals in the zero-rate stretch but its end
    assert p.rate(150) == 10 and p.rate(50) == 6


def _content():
    while True:
        yield SimRequest(0, 0.0, 16, 4)


@pytest.mark.parametrize("headroom,loading", [(0.0, 1), (0.2, 2)])
def test_the_scaling_rule_keeps_headroom_above_the_queue_depth(headroom, loading):
    f = _fleet(pools=[{"model": "llama-3.1-8b", "gpu": "h100-sxm", "rate": 1.0,
                       "autoscale": {"min": 1, "max": 8, "headroom": headroom, "target": 32, "load_s": [60, 90]}}])
    src = FleetSource(f, _content(), offsets=[0], seed=1, duration_s=10_000)
    src.out[0] = 64  # 64 requests in the pool: 2 replicas' worth at target 32, 2.4 with 20 % headroom
    src._tick(15.0)
    assert len(src.ready[0]) == 1 and len(src.loading[0]) == loading
    assert all(75.0 <= t <= 105.0 for t, _ in src.loading[0])  # ready 60-90 s after the decision
    src._tick(200.0)
    assert len(src.ready[0]) == 1 + loading and not src.loading[0]
    rs = replica_seconds(src.changes[0], 200.0)
    assert rs["provisioned_replica_s"] > rs["ready_replica_s"]  # a loading replica is paid for, and idle


def test_autoscaling_day_cold_starts_cost_slo_misses(tmp_path):
    def pool(load_s):
        return {"name": "chat", "model": "llama-3.1-8b", "gpu": "h100-sxm",
                "profile": [[0, 2], [60, 2], [120, 80], [400, 80]], "slo": {"ttft_ms": 1000},
                "autoscale": {"min": 1, "max": 8, "headroom": 0.2, "target": 160, "load_s": load_s}}

    cold = _run(_fleet(pools=[pool([60, 90])]), tmp_path, "cold", output_tokens="128")["pools"]["chat"]
    warm = _run(_fleet(pools=[pool(0)]), tmp_path, "warm", output_tokens="128")["pools"]["chat"]
    for p in (cold, warm):
        a = p["autoscale"]
        assert a["scale_ups"] >= 1 and 1 <= a["min_ready"] <= a["max_ready"] <= 8
    assert cold["autoscale"]["loading_replica_s"] > 0 and warm["autoscale"]["loading_replica_s"] == 0
    assert cold["slo_attainment"] < warm["slo_attainment"]


def test_plan_sizes_each_pool_to_its_slo():
    f = _fleet(pools=[{"name": "small", "model": "llama-3.1-8b", "gpu": "h100-sxm", "share": 1.0,
                       "slo": {"ttft_ms": 300}, "slo_attainment": 0.95, "price_per_gpu_hour": 2.0}],
               traffic={"rate": 30})
    plan = plan_fleet(RunConfig(duration_s=60, input_tokens="2000", output_tokens="128"), f)
    p = plan["pools"]["small"]
    n = p["replicas"]
    assert n is not None and n >= 2 and p["tried"][str(n)] >= 0.95
    assert p["tried"][str(n - 1)] < 0.95  # the fewest passing count
    assert plan["total_usd_per_hour"] == pytest.approx(2.0 * n)


@pytest.mark.parametrize("text,needle", [
    ("pools:\n  - model: llama-3.1-8b\n    share: 1\n", "line 2: pools[0].gpu: Field required"),
    ("pools:\n  - {model: llama-3.1-8b, gpu: h100-sxm, slo: {ttft: 5}}\n", "unknown SLO key 'ttft'"),
    ("pools:\n  - {model: a, gpu: h100-sxm}\nrouting: cascade\ncascade: {from: a, to: b, escalation: 0.1}\n",
     "cascade names pool 'b'"),
    ("pools: [}\n", "not valid YAML (line 1"),
    ("pools:\n  - {model: m, gpu: h100-sxm, share: 1, rate: 2}\n", "give one of share, rate or profile"),
])
def test_a_bad_fleet_file_is_one_line_naming_file_and_field(tmp_path, text, needle):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_fleet(path)
    msg = str(e.value)
    assert msg.startswith(f"fleet file {path}") and needle in msg and "\n" not in msg


def test_bad_fleet_on_the_command_line_is_one_line(tmp_path, cli):
    path = tmp_path / "f.yaml"
    path.write_text("pools:\n  - {model: no-such-model, gpu: h100-sxm}\n")
    res = cli("simulate", "--fleet", str(path), "--rate", "1", "--requests", "5", "--out", str(tmp_path / "o"))
    assert res.returncode != 0
    err = res.stderr.strip()
    assert "pools[0] (no-such-model)" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_plan_fleet_on_the_command_line(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("pools:\n  - {name: a, model: llama-3.1-8b, gpu: h100-sxm, rate: 2, slo: {ttft_ms: 1000},\n"
                    "     price_per_gpu_hour: 3}\n")
    res = runner.invoke(app, ["plan", "--fleet", str(path), "--input-tokens", "128", "--output-tokens", "16", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert plan["pools"]["a"]["replicas"] == 1 and plan["total_usd_per_hour"] == pytest.approx(3.0)


@pytest.mark.parametrize("flags,needle", [(["--workers", "2"], "--workers"), (["--concurrency", "4"], "--concurrency")])
def test_fleet_refuses_flags_it_cannot_honour(tmp_path, flags, needle):
    f = load_fleet(EXAMPLE)
    key = {"--workers": "workers", "--concurrency": "concurrency"}[flags[0]]
    with pytest.raises(ConfigError, match=needle):
        FleetPlan(RunConfig(requests=10, **{key: int(flags[1])}), f)


def test_a_scaled_down_replica_drains_and_gets_no_new_requests():
    f = _fleet(pools=[{"model": "llama-3.1-8b", "gpu": "h100-sxm", "rate": 1.0, "replicas": 3,
                       "autoscale": {"min": 1, "max": 3, "target": 32, "cooldown_s": 30, "interval_s": 10}}])
    src = FleetSource(f, _content(), offsets=[0], seed=1, duration_s=10_000)
    src.out[:] = [4, 0, 5]  # nine requests in flight: the pool wants one replica
    src._tick(10.0)
    src._tick(40.0)  # wanted fewer for 30 s: one replica goes, the one with the fewest in flight (idle: stops)
    assert src.scale_downs[0] == 1 and src.ready[0] == [0, 2] and not src.draining and 1 in src.free[0]
    src._tick(70.0)  # and another: replica 0 (4 in flight) drains
    assert src.scale_downs[0] == 2 and src.ready[0] == [2] and src.draining == {0}
    while src.next_time() < 75.0:  # (before the next decision, at 80 s)
        assert src.pop().replica == 2  # nothing new for the draining (or stopped) replicas
    for _ in range(4):
        r = SimRequest(0, 0.0, 16, 4, replica=0)
        r.state = 3
        src.finished(r, 120.0)
    assert not src.draining and 0 in src.free[0]
    assert src.changes[0][-1] == (120.0, 1, 1)  # provisioned falls to the one ready replica when it is empty
