"""Offline simulation end to end: result files, Little's law, saturation, KV pressure, prefix hits."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from infermeter.load.shapes import ConstantArrivalRate, TraceReplay
from infermeter.measure.feeder import ChildStream, FeedSpec, local_stream
from infermeter.measure.simulate import simulate
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import build_twin, fake_twin
from infermeter.twin.hashing import calibrate_chars_per_block
from infermeter.twin.loop import VirtualClock, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.sources import ClosedLoopSource, OpenLoopSource
from infermeter.workload import build_workload

HEADER = {"schema_version": 1, "tool": "infermeter", "label": "t", "model": "m", "hardware": None, "profile": None}


def _open(rate, n, seed=0, **wl):
    work = build_workload(seed=seed, **wl)
    shape = ConstantArrivalRate(rate_per_s=rate)
    cpb = calibrate_chars_per_block(iter(work.requests()))
    return OpenLoopSource(local_stream(shape, iter(work.requests()), seed=seed, chars_per_block=cpb), requests=n)


def _sim(tmp_path, twin, source, name="run", **kw):
    run = {**HEADER, "load": {"open_loop": isinstance(source, OpenLoopSource)}}
    return simulate(twin, source, out_dir=tmp_path / name, run=run, **kw)


def test_result_files_follow_the_run_layout(tmp_path):
    res = _sim(tmp_path, fake_twin(), _open(20.0, 200, input_tokens="100", output_tokens="20"), token_times=True)
    run = json.loads((res.run_dir / "run.json").read_text())
    summary = json.loads((res.run_dir / "summary.json").read_text())
    table = pq.read_table(res.run_dir / "requests.parquet")
    assert run["source"] == summary["source"] == "simulated"
    assert table.num_rows == 200 and summary["completed"] == 200
    assert summary["summary_method"] == "exact"
    assert summary["mean_input_tokens"] == 100 and summary["mean_output_tokens"] == 20
    times = table.column("chunk_times").to_pylist()
    assert all(len(t) == 20 for t in times)
    assert table.column("first_token_at").to_pylist()[0] == times[0][0]
    assert table.column("ended_at").to_pylist()[0] == times[0][-1]
    assert set(run["server_metrics"]) >= {"kv_cache_usage_mean", "num_requests_waiting_max", "prefix_cache_hit_rate",
                                          "num_preemptions"}


def test_a_simulation_allocates_its_record_batches_with_malloc(tmp_path, monkeypatch):
    """Arrow's default pool (mimalloc) faults freed pages in again for every record batch: a simulation runs on
    malloc's pool and restores the previous one after, unless the user chose one with ARROW_DEFAULT_MEMORY_POOL."""
    import pyarrow as pa

    try:
        mimalloc = pa.mimalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no mimalloc pool")
    before = pa.default_memory_pool()
    seen: list[str] = []

    def during(t, n):
        seen.append(pa.default_memory_pool().backend_name)

    try:
        pa.set_memory_pool(mimalloc)
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        _sim(tmp_path, fake_twin(), _open(20.0, 50, input_tokens="100", output_tokens="20"), name="kept",
             on_progress=during)
        assert set(seen) == {"mimalloc"}
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        seen.clear()
        res = _sim(tmp_path, fake_twin(), _open(20.0, 50, input_tokens="100", output_tokens="20"), on_progress=during)
        assert seen and set(seen) == {"system"}
        assert pa.default_memory_pool().backend_name == "mimalloc"  # restored
        assert pq.read_table(res.run_dir / "requests.parquet").num_rows == 50
    finally:
        pa.set_memory_pool(before)


def test_littles_law_holds_in_the_results(tmp_path):
    res = _sim(tmp_path, fake_twin(predictor=LinearStepTime(base_s=0.01, per_token_s=2e-4)),
               _open(30.0, 1500, input_tokens="200,50", output_tokens="40,10"))
    s = res.summary
    t = pq.read_table(res.run_dir / "requests.parquet", columns=["sent_at", "ended_at"])
    sent, ended = np.asarray(t.column(0)), np.asarray(t.column(1))
    # L measured from the records: time-average number in the system over the summary's window
    lo, hi = sent.min(), ended.max()
    L = (ended - sent).sum() / (hi - lo)
    lam = s["request_throughput"]
    W = s["e2e_ms"]["mean"] / 1000.0
    assert L == pytest.approx(lam * W, rel=0.01)
    # and from the engine's own occupancy integral (the loop's clock starts at 0)
    engine_L = res.run["server_metrics"]["in_system_mean"] * res.virtual_s / (hi - lo)
    assert engine_L == pytest.approx(L, rel=1e-6)


def test_throughput_saturates_at_the_linear_models_closed_form(tmp_path):
    p = LinearStepTime(base_s=0.02, per_token_s=1e-4)
    twin = fake_twin(predictor=p, engine=EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096))
    work = build_workload(input_tokens="100", output_tokens="50", seed=1)
    src = ClosedLoopSource(64, local_stream(None, iter(work.requests())), requests=3000)
    res = _sim(tmp_path, twin, src)
    assert res.summary["request_throughput"] == pytest.approx(p.saturation_rate(100, 50, 32), rel=0.03)


def test_throughput_saturates_near_the_performance_models_figure():
    from infermeter.perfmodel import build_deployment
    from infermeter.perfmodel.serving import saturation

    d = build_deployment("llama-3.1-8b", "h100-sxm")
    sat_tok_s, _ = saturation(d, 512, 128)
    twin = build_twin("llama-3.1-8b", "h100-sxm")
    work = build_workload(input_tokens="512", output_tokens="128", seed=0)
    done = []
    n = 3000
    src = ClosedLoopSource(600, local_stream(None, iter(work.requests()), keys=False), requests=n)
    run_virtual(twin.engines(), src, done.append, VirtualClock())
    ends = np.sort([r.ended_at for r in done])
    lo, hi = ends[n // 4], ends[3 * n // 4]  # steady state: the middle half
    toks = sum(r.outputs for r in done if lo < r.ended_at <= hi)
    assert toks / (hi - lo) == pytest.approx(sat_tok_s, rel=0.10)


def test_ttft_rises_once_kv_is_full_and_undersized_kv_preempts(tmp_path):
    p = LinearStepTime(base_s=0.01, per_token_s=1e-4)
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048)
    kw = {"input_tokens": "256", "output_tokens": "256"}
    roomy = _sim(tmp_path, fake_twin(predictor=p, engine=cfg, num_blocks=4096), _open(15.0, 400, **kw), "roomy")
    tight = _sim(tmp_path, fake_twin(predictor=p, engine=cfg, num_blocks=200), _open(15.0, 400, **kw), "tight")
    sr, st = roomy.run["server_metrics"], tight.run["server_metrics"]
    assert sr["num_preemptions"] == 0 and sr["kv_cache_usage_max"] < 0.9
    assert st["kv_cache_usage_max"] == pytest.approx(1.0, abs=0.02)
    assert st["num_preemptions"] > 0
    assert tight.summary["ttft_ms"]["p50"] > 3 * roomy.summary["ttft_ms"]["p50"]
    assert tight.summary["completed"] == roomy.summary["completed"] == 400


def test_repeated_prefixes_hit_the_prefix_cache_and_distinct_prompts_do_not(tmp_path):
    twin = fake_twin()
    shared = _sim(tmp_path, twin, _open(10.0, 300, input_tokens="320", output_tokens="8", prefix_tokens=256,
                                        prefix_groups=2), "shared")
    plain = _sim(tmp_path, twin, _open(10.0, 300, input_tokens="320", output_tokens="8"), "plain")
    hit = shared.run["server_metrics"]["prefix_cache_hit_rate"]
    assert hit == pytest.approx(256 / 320 * 298 / 300, abs=0.05)  # all but each group's first hit the prefix
    cached = pq.read_table(shared.run_dir / "requests.parquet", columns=["cached_tokens"]).column(0).to_pylist()
    assert cached[:2] == [0, 0] or min(cached[:2]) == 0  # the first of a group misses
    assert sum(c > 0 for c in cached) >= 295 and all(c % 16 == 0 for c in cached)
    assert plain.run["server_metrics"]["prefix_cache_hit_rate"] == 0.0
    assert shared.summary["cached_prompt_tokens"] == sum(cached)


def test_streaming_summary_matches_the_exact_one(tmp_path):
    p = LinearStepTime(base_s=0.01, per_token_s=2e-4)
    kw = {"input_tokens": "200,80", "output_tokens": "50,20"}
    exact = _sim(tmp_path, fake_twin(predictor=p), _open(20.0, 2000, **kw), "exact").summary
    stream = _sim(tmp_path, fake_twin(predictor=p), _open(20.0, 2000, **kw), "stream", exact_summary_limit=0).summary
    assert stream["summary_method"].startswith("streaming")
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens", "cached_prompt_tokens"):
        assert stream[key] == exact[key]
    for key in ("duration_s", "request_throughput", "output_token_throughput", "achieved_rate"):
        assert stream[key] == pytest.approx(exact[key], rel=1e-9)
    for dist in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
        for stat in ("count", "mean", "min", "max"):
            assert stream[dist][stat] == pytest.approx(exact[dist][stat], rel=1e-6), (dist, stat)
        for stat in ("p50", "p90", "p99"):
            assert stream[dist][stat] == pytest.approx(exact[dist][stat], rel=0.006), (dist, stat)
    assert set(stream) == set(exact)


def _local_and_child(wl, keys=True):
    """300 requests of ``wl`` made here (keyed) and by a child feeder (``keys``): the same requests."""
    shape = ConstantArrivalRate(rate_per_s=7.0)
    local = local_stream(shape, iter(build_workload(**wl).requests()), seed=5)
    a = [next(local) for _ in range(300)]
    child = ChildStream(FeedSpec(workload=wl, shape=shape, seed=5, limit=300, keys=keys))
    try:
        b = list(child)
    finally:
        child.close()
    assert [(r.rid, r.arrival, r.prompt_tokens, r.max_tokens, r.prefix_group) for r in a] == \
           [(r.rid, r.arrival, r.prompt_tokens, r.max_tokens, r.prefix_group) for r in b]
    return a, b


def test_a_keyless_child_stream_gives_the_keyed_requests_without_keys():
    a, b = _local_and_child({"input_tokens": "96,16,48,160", "output_tokens": "16,4", "seed": 5}, keys=False)
    assert all(len(r.keys) >= 1 for r in a) and all(len(r.keys) == 0 for r in b)
    assert len({r.keys[0] for r in a}) == len(a)  # the keyed stream's first blocks: all distinct


def test_a_keyless_child_stream_sends_columns_cut_as_the_spec_stream():
    """Over several batches: the first ``skip`` requests passed over, none sent at or after the duration."""
    from infermeter.measure.feeder import BATCH, length_columns

    wl = {"input_tokens": "300,100", "output_tokens": "40,20", "seed": 3}
    shape = ConstantArrivalRate(rate_per_s=50.0, arrival="gamma", burstiness=0.5)
    assert length_columns(build_workload(**wl), shape, 1) is not None  # the column path
    local = local_stream(shape, iter(build_workload(**wl).requests()), seed=1)
    a = []
    for r in local:
        if r.arrival >= 1000.0:
            break
        if r.rid >= 7000:
            a.append(r)
    assert len(a) > 3 * BATCH // 2
    child = ChildStream(FeedSpec(workload=wl, shape=shape, seed=1, duration_s=1000.0, keys=False, skip=7000))
    try:
        b = list(child)
    finally:
        child.close()
    assert [(r.rid, r.arrival, r.intended_at, r.prompt_tokens, r.max_tokens, r.conversation_id, r.prefix_group)
            for r in a] == \
           [(r.rid, r.arrival, r.intended_at, r.prompt_tokens, r.max_tokens, r.conversation_id, r.prefix_group)
            for r in b]


def test_child_stream_gives_the_same_requests_as_the_local_one():
    a, b = _local_and_child({"input_tokens": "96,16,48,160", "output_tokens": "16", "prefix_tokens": 32,
                             "prefix_groups": 3, "seed": 5})

    def pattern(rs):  # which requests share their first key (hash values are per process)
        first = {}
        return [first.setdefault(r.keys[0], r.rid) if len(r.keys) else None for r in rs]

    assert pattern(a) == pattern(b)


def test_max_concurrency_holds_sends_and_records_the_lag(tmp_path):
    work = build_workload(input_tokens="64", output_tokens="32", seed=0)
    shape = ConstantArrivalRate(rate_per_s=200.0, arrival="constant")
    src = OpenLoopSource(local_stream(shape, iter(work.requests())), requests=50, max_concurrency=2)
    res = _sim(tmp_path, fake_twin(), src)
    t = pq.read_table(res.run_dir / "requests.parquet", columns=["intended_at", "sent_at", "ended_at"]).to_pydict()
    assert src.held > 0 and res.summary["schedule_lag_ms"]["max"] > 0
    events = sorted([(s, 1) for s in t["sent_at"]] + [(e, -1) for e in t["ended_at"]], key=lambda x: (x[0], x[1]))
    in_flight = peak = 0
    for _, d in events:
        in_flight += d
        peak = max(peak, in_flight)
    assert peak == 2
    assert all(s >= i for s, i in zip(t["sent_at"], t["intended_at"]))


def test_replay_uses_trace_times_scaled():
    from types import SimpleNamespace

    specs = [SimpleNamespace(input_tokens=20, max_tokens=5, prompt="x" * 80, messages=None, conversation_id=None,
                             prefix_group=None, arrival_s=t) for t in (0.0, 1.5, 4.0)]
    reqs = list(local_stream(TraceReplay(time_scale=2.0), iter(specs)))
    assert [r.arrival for r in reqs] == [0.0, 3.0, 8.0]
    assert [r.rid for r in reqs] == [0, 1, 2]


def test_chars_per_block_follows_the_workload_text():
    from infermeter.twin.hashing import workload_chars_per_block

    work = build_workload(input_tokens="200", seed=0)
    specs = [s for _, s in zip(range(256), work.requests())]
    chars = sum(len(s.messages[0]["content"]) for s in specs)
    tokens = sum(s.input_tokens for s in specs)
    assert workload_chars_per_block(input_tokens="200", seed=0) == round(16 * chars / tokens)
