"""Keyless streams (issue 16): a workload whose prompts share no cache block is simulated without keys or text.

The simulation must not change: the same summary, record for record, as the keyed stream of the
same requests; the keyed path stays for every workload whose prompts can share blocks.
"""

from __future__ import annotations

import dataclasses
import json

import pyarrow.parquet as pq
import pytest

from infermeter.measure import RunConfig
from infermeter.measure.feeder import needs_keys
from infermeter.measure.fleet import fleet_jobs
from infermeter.measure.fleetpart import FleetPart
from infermeter.measure.simplan import SimPlan
from infermeter.twin.deploy import build_twin
from infermeter.twin.spec import TwinSpec
from infermeter.workload import build_workload


@pytest.mark.parametrize(("kw", "keyed"), [
    ({"input_tokens": "32"}, False),
    ({"profile": "fixed"}, False),
    ({"input_tokens": "300", "prefix_tokens": 64, "prefix_groups": 3}, True),
    ({"profile": "code"}, True),
    ({"profile": "chat"}, True),
    ({"profile": "classification"}, True),
])
def test_only_workloads_that_share_no_block_go_keyless(kw, keyed):
    assert needs_keys(build_workload(seed=1, **kw)) is keyed


def _plan(tmp_path, name, **wl):
    cfg = RunConfig(model="llama-3.1-8b", rate=30.0, requests=1500, seed=4, out=str(tmp_path / name), label=name,
                    **wl)
    return SimPlan(cfg, twin=build_twin("llama-3.1-8b", "l4"), token_times="off")


@pytest.mark.parametrize("wl", [{"input_tokens": "600,300", "output_tokens": "60,30"}, {"profile": "fixed"}])
def test_a_keyless_simulation_gives_the_keyed_ones_records_and_summary(tmp_path, wl):
    keyless = _plan(tmp_path, "keyless", **wl)
    keyed = _plan(tmp_path, "keyed", **wl)
    assert keyless.keys is False
    keyed.keys = True  # the path every workload took before
    a, b = keyless.run(), keyed.run()
    assert a.run["config"]["simulate"]["prefix_keys"].startswith("none")
    assert b.run["config"]["simulate"]["prefix_keys"] == "prompt text"
    # an overloaded L4: batches, KV exhaustion and recompute preemptions (a preempted request's own blocks stay
    # cached and hit when it is readmitted, keyed or not), clients timing out
    sm = a.run["server_metrics"]
    assert a.summary["completed"] > 100 and sm["num_requests_running_max"] > 1
    assert sm["num_preemptions"] > 0 and sm["prefix_cache_hits"] > 0 and sm["kv_cache_usage_max"] == 1.0
    assert a.summary["failed"] > 0
    drop = {"run_dir", "label"}
    assert {k: v for k, v in a.summary.items() if k not in drop} == {k: v for k, v in b.summary.items() if k not in drop}
    assert pq.read_table(a.run_dir / "requests.parquet").equals(pq.read_table(b.run_dir / "requests.parquet"))
    assert json.loads((a.run_dir / "summary.json").read_text())["ttft_ms"] == a.summary["ttft_ms"]


def _fleet(tmp_path, name, workers, keys):
    cfg = RunConfig(model="llama-3.1-70b", rate=40.0, duration_s=60.0, input_tokens="500,200", output_tokens="80,40",
                    seed=3, workers=workers, out=str(tmp_path / name), label="fleet")
    plan = SimPlan(cfg, TwinSpec(model="llama-3.1-70b", gpu="12xa100-80gb:tp4", router="round-robin"),
                   token_times="off")
    assert plan.keys is False
    plan.keys = keys
    return plan


def test_a_split_fleet_goes_keyless_with_the_same_bytes(tmp_path):
    one = _fleet(tmp_path, "one", 1, True).run()
    two = _fleet(tmp_path, "two", 2, False).run()  # the routed feeder and its workers, keyless
    assert two.run["runtime"]["workers"] == 2 and one.summary["completed"] > 1000
    assert (one.run_dir / "summary.json").read_text().replace(str(one.run_dir), "RUN") == \
           (two.run_dir / "summary.json").read_text().replace(str(two.run_dir), "RUN")
    assert (one.run_dir / "requests.parquet").read_bytes() == (two.run_dir / "requests.parquet").read_bytes()


def test_a_ray_workers_own_stream_goes_keyless_with_the_same_windows(tmp_path):
    # a Ray actor makes its own requests (FleetPart without a feed): keyless and keyed, the same windows
    plan = _fleet(tmp_path, "part", 2, False)
    job = dataclasses.replace(fleet_jobs(plan, 2)[1], window=256)  # windows of 256 sends
    assert job.keys is False
    bare = list(FleetPart(job).windows())
    keyed = list(FleetPart(dataclasses.replace(job, keys=True)).windows())
    assert len(bare) == len(keyed) > 1
    for (k1, t1, a), (k2, t2, b) in zip(bare, keyed):
        assert (k1, t1) == (k2, t2)
        assert (a is None and b is None) or a.equals(b)
    assert sum(t.num_rows for _, _, t in bare if t is not None) > 500


def test_prompts_cut_from_code_go_keyless_without_losing_a_hit(tmp_path):
    # The synthetic profile over the code source (repeated lines): its openings used to repeat a few hundred
    # requests apart and hit a big cache (H200); now no two share a block, keyed or keyless alike.
    def plan(name):
        cfg = RunConfig(model="llama-3.1-8b", rate=20.0, requests=1200, seed=7, input_tokens="64", output_tokens="8",
                        profile_overrides={"source": "code"}, out=str(tmp_path / name), label=name)
        return SimPlan(cfg, twin=build_twin("llama-3.1-8b", "h200"), token_times="off")

    keyless, keyed = plan("keyless"), plan("keyed")
    assert keyless.keys is False
    keyed.keys = True
    a, b = keyless.run(), keyed.run()
    assert b.run["server_metrics"]["prefix_cache_hits"] == a.run["server_metrics"]["prefix_cache_hits"] == 0
    assert pq.read_table(a.run_dir / "requests.parquet").equals(pq.read_table(b.run_dir / "requests.parquet"))
