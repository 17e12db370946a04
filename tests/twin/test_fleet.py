"""Fleets: the same records and summary on 1 process, 2 processes and Ray; routers; cost that follows the work."""

from __future__ import annotations

import hashlib
import json

import pytest

from infermeter.errors import ConfigError
from infermeter.measure import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.loop import EventLoop, ListSource, VirtualClock, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import SimRequest
from infermeter.twin.router import Router
from infermeter.twin.spec import TwinSpec

FLEET = "24xa100-80gb:tp4"  # 6 replicas of 70B on TP4


def _run(tmp_path, name, *, workers=1, ray=None, router="round-robin", duration=150.0, rate=20.0):
    cfg = RunConfig(model="llama-3.1-70b", rate=rate, duration_s=duration, profile="chat", seed=3, workers=workers,
                    ray=ray, out=str(tmp_path / name), label="fleet")
    plan = SimPlan(cfg, TwinSpec(model="llama-3.1-70b", gpu=FLEET, router=router), token_times="off")
    res = plan.run()
    summary = (res.run_dir / "summary.json").read_text().replace(str(res.run_dir), "RUN")
    parquet = hashlib.sha256((res.run_dir / "requests.parquet").read_bytes()).hexdigest()
    return res, summary, parquet


@pytest.mark.parametrize("router", ["round-robin", "session"])
def test_two_processes_give_the_same_bytes_as_one(tmp_path, router):
    one, s1, p1 = _run(tmp_path, "one", router=router)
    two, s2, p2 = _run(tmp_path, "two", workers=2, router=router)
    three, s3, p3 = _run(tmp_path, "three", workers=3, router=router)
    assert two.run["runtime"]["workers"] == 2 and three.run["runtime"]["workers"] == 3
    assert s1 == s2 == s3  # summary.json, byte for byte (its run_dir aside)
    assert p1 == p2 == p3  # and requests.parquet
    summary = json.loads(s1)
    # a saturated fleet (round-robin loses the chats' prefix hits): enough finished work to compare byte for byte
    assert summary["completed"] > 50 and summary["server_metrics"]["engine_steps"] > 0


def test_session_routing_keeps_prefix_hits_that_round_robin_loses(tmp_path):
    rr, _, _ = _run(tmp_path, "rr", duration=100.0)
    ses, _, _ = _run(tmp_path, "ses", router="session", duration=100.0)
    hit = {r: x.run["server_metrics"]["prefix_cache_hit_rate"] for r, x in (("rr", rr), ("ses", ses))}
    # a chat turn resends its history: on its conversation's replica most of it is cached
    assert hit["ses"] > 0.5 and hit["ses"] > 2 * hit["rr"]
    assert rr.run["target"]["emulated"]["router"] == "round-robin"
    assert ses.run["config"]["simulate"]["router"] == "session"


def test_ray_workers_give_the_same_summary_as_one_process(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (extra 'distributed')")
    try:
        # address="local": a new local cluster, never one an earlier test (or the user) left in /tmp/ray
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # noqa: BLE001 - a machine where Ray cannot start
        pytest.skip(f"Ray cannot start a local cluster here: {exc}")
    try:
        _, s1, p1 = _run(tmp_path, "one", router="session", duration=80.0)
        res, s2, p2 = _run(tmp_path, "ray", workers=2, ray="auto", router="session", duration=80.0)
    finally:
        ray.shutdown()
    assert res.run["runtime"]["backend"] == "ray" and res.run["runtime"]["workers"] == 2
    assert s1 == s2 and p1 == p2


def test_a_split_fleet_refuses_what_couples_its_replicas():
    spec = TwinSpec(model="llama-3.1-70b", gpu=FLEET, router="least-outstanding")
    with pytest.raises(ConfigError, match="least-outstanding"):
        SimPlan(RunConfig(rate=5, duration_s=10, workers=2), spec)
    spec = TwinSpec(model="llama-3.1-70b", gpu=FLEET)
    with pytest.raises(ConfigError, match="closed loop"):
        SimPlan(RunConfig(concurrency=4, requests=10, workers=2), spec)
    with pytest.raises(ConfigError, match="--max-concurrency"):
        SimPlan(RunConfig(rate=5, duration_s=10, max_concurrency=3, workers=2), spec)


def test_routers_decide_as_documented():
    rr = Router("round-robin", 3)
    assert [rr.pick(i, 5, None) for i in range(6)] == [0, 1, 2, 0, 1, 2]
    s = Router("session", 8)
    conv = {s.replica_of(i, 42, None) for i in range(50)} | {s.replica_of(i, 42, 3) for i in range(5)}
    assert len(conv) == 1  # a conversation stays on one replica, whatever its request index
    assert len({s.replica_of(0, c, None) for c in range(200)}) == 8  # conversations spread over all
    assert s.replica_of(7, None, None) == 7 % 8  # neither id: round-robin
    lor = Router("least-outstanding", 3)
    assert [lor.pick(i, None, None) for i in range(3)] == [0, 1, 2]
    lor.done(1)
    assert lor.pick(3, None, None) == 1
    assert lor.pick(4, None, None) == 0  # ties: the lowest index
    with pytest.raises(ConfigError, match="--router"):
        Router("random", 2)


def test_least_outstanding_routes_by_requests_not_yet_finished():
    p = LinearStepTime(base_s=0.01, per_token_s=0.001)
    engines = [Engine(p, EngineConfig(), 256) for _ in range(2)]
    long = SimRequest(rid=0, arrival=0.0, prompt_tokens=16, max_tokens=50)
    short = [SimRequest(rid=i, arrival=0.1 * i, prompt_tokens=16, max_tokens=1) for i in range(1, 4)]
    done: list[SimRequest] = []
    run_virtual(engines, ListSource([long, *short]), done.append, VirtualClock(),
                router=Router("least-outstanding", 2))
    # r0 holds replica 0 for 50 steps; r1 goes to replica 1 and is done before r2 and r3 arrive
    assert [r.replica for r in sorted(done, key=lambda r: r.rid)] == [0, 1, 1, 1]


def test_a_pickled_least_outstanding_router_goes_on_deciding_alike():
    """Checkpoints pickle the loop's router mid-run (both builds: Router.__reduce__)."""
    import pickle

    r = Router("least-outstanding", 3)
    for i in range(5):
        r.pick(i, None, None)
    r.done(1)
    r.done(1)
    back = pickle.loads(pickle.dumps(r))
    assert (back.name, back.replicas, back._out) == ("least-outstanding", 3, r._out) == ("least-outstanding", 3, [2, 0, 1])
    assert [back.pick(i, None, None) for i in range(5, 9)] == [r.pick(i, None, None) for i in range(5, 9)] == [1, 1, 2, 0]


def test_idle_replicas_cost_nothing_and_spans_follow_only_their_own_arrivals():
    p = LinearStepTime(base_s=0.01, per_token_s=1e-4)
    calls = [0]

    class Counting(Engine):
        def schedule(self, now, horizon=float("inf")):
            calls[0] += 1
            return super().schedule(now, horizon)

    def run(replicas):
        calls[0] = 0
        engines = [Counting(p, EngineConfig(), 4096) for _ in range(replicas)]
        reqs = [SimRequest(rid=i, arrival=0.5 * i, prompt_tokens=64, max_tokens=200) for i in range(40)]
        done: list[SimRequest] = []
        run_virtual(engines, ListSource(reqs), done.append, VirtualClock(), router=Router("round-robin", replicas))
        assert len(done) == 40
        return calls[0]

    small, huge = run(4), run(400)
    # the same 40 requests: 400 replicas (396 of them idle, the rest rarely shared) cost at most
    # what their requests need, not replicas x time
    assert huge <= 4 * 40 and huge <= 2 * small + 40


def test_interrupted_spans_give_the_step_by_step_results():
    p = LinearStepTime(base_s=0.005, per_token_s=2e-4, per_kv_token_s=3e-7)
    import numpy as np

    rng = np.random.default_rng(4)
    t = np.cumsum(rng.exponential(0.01, 400))
    base = [(float(t[i]), int(rng.integers(16, 200)), int(rng.integers(1, 60))) for i in range(400)]
    results = []
    for span in (1, 1 << 30):
        engines = [Engine(p, EngineConfig(max_num_seqs=16, max_num_batched_tokens=256), 300, max_span_steps=span)
                   for _ in range(3)]
        reqs = [SimRequest(rid=i, arrival=a, prompt_tokens=n, max_tokens=o) for i, (a, n, o) in enumerate(base)]
        done: list[SimRequest] = []
        loop = EventLoop(engines, router=Router("round-robin", 3))
        for _ in loop.run(ListSource(reqs), done.append, VirtualClock()):
            pass
        results.append((engines, sorted(done, key=lambda r: r.rid)))
    (e1, d1), (e2, d2) = results
    assert [e.steps for e in e1] == [e.steps for e in e2]
    assert sum(e.num_preemptions for e in e1) == sum(e.num_preemptions for e in e2)
    for a, b in zip(d1, d2):
        assert a.first_token_at == pytest.approx(b.first_token_at, abs=1e-9)
        assert a.ended_at == pytest.approx(b.ended_at, abs=1e-9)
