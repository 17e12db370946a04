"""Engine scheduling against hand-computed timelines (LinearStepTime: base 10 ms + 1 ms/token)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.loop import ListSource, VirtualClock, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import ABORTED, FINISHED, REJECTED, SimRequest

P = LinearStepTime(base_s=0.01, per_token_s=0.001)


def run(reqs, *, blocks=1024, predictor=P, **cfg):
    eng = Engine(predictor, EngineConfig(**cfg), blocks, **{k: v for k, v in {}.items()})
    done: list[SimRequest] = []
    run_virtual(eng, ListSource(reqs), done.append, VirtualClock())
    return eng, {r.rid: r for r in done}


def req(rid, at=0.0, prompt=32, out=3, keys=()):
    return SimRequest(rid=rid, arrival=at, prompt_tokens=prompt, max_tokens=out, keys=list(keys))


def test_single_request_timeline():
    # prefill 32 tokens: 0.010 + 0.032; then 2 decode steps of 0.011
    eng, done = run([req(0)])
    r = done[0]
    assert r.first_token_at == pytest.approx(0.042)
    assert r.ended_at == pytest.approx(0.064)
    assert r.outputs == 3 and r.state == FINISHED
    assert eng.generation_tokens_total == 3 and eng.prompt_tokens_total == 32
    assert eng.pool.num_free == 1024


def test_token_times_one_per_step():
    eng = Engine(P, EngineConfig(), 64, keep_token_times=True)
    done: list[SimRequest] = []
    run_virtual(eng, ListSource([req(0, out=4)]), done.append, VirtualClock())
    assert done[0].token_times == pytest.approx([0.042, 0.053, 0.064, 0.075])


def test_chunked_prefill_splits_the_prompt_by_the_token_budget():
    # 100 tokens with a 40-token budget: chunks 40, 40, 20 -> 0.05 + 0.05 + 0.03
    _, done = run([req(0, prompt=100, out=1)], max_num_seqs=4, max_num_batched_tokens=40)
    assert done[0].first_token_at == pytest.approx(0.13)
    assert done[0].ended_at == pytest.approx(0.13)


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget():
    eng = Engine(P, EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=False), 64)
    done: list[SimRequest] = []
    # r0 decoding uses 1 token of the budget; r1's 64-token prompt must wait until r0 is done
    run_virtual(eng, ListSource([req(0, prompt=16, out=3), req(1, at=0.03, prompt=64, out=1)]), done.append,
                VirtualClock())
    assert done[1].first_token_at == pytest.approx(done[0].ended_at + 0.074)


def test_max_num_seqs_holds_the_third_request():
    _, done = run([req(i, prompt=16, out=2) for i in range(3)], max_num_seqs=2)
    assert done[0].first_token_at == pytest.approx(0.042) and done[1].first_token_at == pytest.approx(0.042)
    assert done[0].ended_at == pytest.approx(0.054)
    assert done[2].scheduled_at == pytest.approx(0.054)
    assert done[2].first_token_at == pytest.approx(0.080)
    assert done[2].ended_at == pytest.approx(0.091)


def test_admission_waits_for_free_blocks():
    # 4 blocks; each 48-token prompt needs 3, so r1 waits for r0 (which takes the 4th block to decode)
    eng, done = run([req(0, prompt=48, out=2), req(1, prompt=48, out=2)], blocks=4)
    assert done[0].ended_at == pytest.approx(0.058 + 0.011)
    assert done[1].scheduled_at == pytest.approx(0.069)
    assert done[1].ended_at == pytest.approx(0.069 + 0.058 + 0.011)
    assert eng.num_preemptions == 0 and eng.max_usage == 1.0


def test_undersized_kv_preempts_the_newest_request_and_recomputes_it():
    eng, done = run([req(0, prompt=32, out=40), req(1, prompt=32, out=40)], blocks=6)
    assert eng.num_preemptions >= 1
    assert done[1].preemptions >= 1 and done[0].preemptions == 0  # FCFS: the newest goes
    assert all(r.outputs == 40 for r in done.values())
    assert eng.prefix_hits >= 16  # the recompute found its own computed blocks
    eng.pool.check()
    assert eng.pool.num_free == 6


def test_prefix_cache_hit_on_a_repeated_prompt():
    keys = [101, 102, 103]
    eng, done = run([req(0, prompt=50, out=2, keys=keys), req(1, at=1.0, prompt=50, out=2, keys=keys)])
    assert done[0].cached_tokens == 0
    assert done[1].cached_tokens == 48
    assert done[1].first_token_at == pytest.approx(1.0 + 0.012)  # only 2 tokens computed
    assert eng.prefix_queries == 100 and eng.prefix_hits == 48


def test_a_fully_cached_prompt_still_computes_its_last_block():
    keys = [1, 2, 3]
    _, done = run([req(0, prompt=48, out=1, keys=keys), req(1, at=1.0, prompt=48, out=1, keys=keys)])
    assert done[1].cached_tokens == 32  # at most num_tokens - 1 tokens hit, in whole blocks


def test_no_hits_with_prefix_caching_off():
    keys = [1, 2, 3]
    eng, done = run([req(0, prompt=50, out=1, keys=keys), req(1, at=1.0, prompt=50, out=1, keys=keys)],
                    enable_prefix_caching=False)
    assert done[1].cached_tokens == 0 and eng.prefix_hits == 0


def test_too_long_requests_are_rejected_with_a_reason():
    eng = Engine(P, EngineConfig(max_model_len=100), 64)
    r = req(0, prompt=90, out=20)
    assert not eng.add(r)
    assert r.state == REJECTED and "max_model_len (100)" in r.error


def test_engine_config_names_the_conflict():
    with pytest.raises(ValidationError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=512, max_num_batched_tokens=256)


def _random_requests(n, seed, keys=True):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.02, n))
    out = []
    for i in range(n):
        p = int(rng.integers(16, 300))
        group = int(rng.integers(0, 3))
        ks = [group * 1000 + j for j in range(p // 16)] if keys else []
        out.append(SimRequest(rid=i, arrival=float(t[i]), prompt_tokens=p, max_tokens=int(rng.integers(1, 80)),
                              keys=ks))
    return out


@pytest.mark.parametrize("blocks", [4096, 60])
def test_decode_spans_agree_with_single_steps(blocks):
    pred = LinearStepTime(base_s=0.005, per_token_s=2e-4, per_kv_token_s=3e-7)
    results = []
    for span in (1, 1 << 30):
        eng = Engine(pred, EngineConfig(max_num_seqs=16, max_num_batched_tokens=256), blocks, max_span_steps=span)
        done: list[SimRequest] = []
        run_virtual(eng, ListSource(_random_requests(300, 7)), done.append, VirtualClock())
        results.append((eng, sorted(done, key=lambda r: r.rid)))
        eng.pool.check()
    (e1, d1), (e2, d2) = results
    assert e1.steps == e2.steps
    assert e1.num_preemptions == e2.num_preemptions
    assert e1.prefix_hits == e2.prefix_hits
    for a, b in zip(d1, d2):
        assert (a.outputs, a.cached_tokens) == (b.outputs, b.cached_tokens)
        assert a.first_token_at == pytest.approx(b.first_token_at, abs=1e-9)
        assert a.ended_at == pytest.approx(b.ended_at, abs=1e-9)
    if blocks == 60:
        assert e1.num_preemptions > 0


def test_abort_waiting_and_running():
    eng = Engine(P, EngineConfig(max_num_seqs=1, max_num_batched_tokens=64), 64)
    a, b = req(0, out=50), req(1, out=5)
    eng.add(a)
    eng.add(b)
    t = eng.schedule(0.0)
    eng.complete(t)
    eng.abort(b, t)  # still waiting (max_num_seqs=1)
    assert b.state == ABORTED and not eng.waiting
    eng.abort(a, t)  # running: dropped before the next step
    assert eng.schedule(t) is None
    assert a.state == ABORTED and eng.idle and eng.pool.num_free == 64
