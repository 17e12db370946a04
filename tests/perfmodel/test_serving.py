"""Serving estimates built from step times: single user, queueing, saturation, replicas."""

from __future__ import annotations

import pytest

from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.serving import at_concurrency, max_concurrency, saturation


@pytest.fixture(scope="module")
def d8():
    return build_deployment("llama-3.1-8b", "h100-sxm")


def test_single_user_is_prefill_then_plain_decode_steps(d8):
    e = at_concurrency(d8, 1000, 200, 1)
    assert e.ttft_s == pytest.approx(d8.request_overhead_s + d8.prefill_time(1000, 8192))
    assert e.tpot_s == pytest.approx(d8.step_time(1, 1100, 1))
    assert e.e2e_s == pytest.approx(e.ttft_s + 199 * e.tpot_s)
    assert e.output_tokens_per_s == pytest.approx(200 / e.e2e_s)
    assert e.per_user_tokens_per_s == pytest.approx(1 / e.tpot_s)
    assert e.bound == "memory"


def test_more_users_raise_throughput_and_latency(d8):
    a, b = at_concurrency(d8, 1000, 200, 1), at_concurrency(d8, 1000, 200, 32)
    assert b.output_tokens_per_s > 10 * a.output_tokens_per_s
    assert b.tpot_s > a.tpot_s and b.ttft_s > a.ttft_s


def test_users_beyond_capacity_queue_for_a_slot():
    d = build_deployment("llama-3.1-70b", "2xh100-sxm:tp2")
    limit = max_concurrency(d, 1000, 200)
    at, over = at_concurrency(d, 1000, 200, limit), at_concurrency(d, 1000, 200, 2 * limit)
    assert over.running_per_replica == limit
    assert over.ttft_s == pytest.approx(at.ttft_s + at.e2e_s, rel=1e-6)  # one full request time in the queue
    assert over.output_tokens_per_s == pytest.approx(at.output_tokens_per_s, rel=1e-6)


def test_replicas_multiply_saturation_throughput():
    one = build_deployment("llama-3.1-8b", "h100-sxm")
    four = build_deployment("llama-3.1-8b", "4xh100-sxm:tp1")
    assert saturation(four, 1000, 200)[0] == pytest.approx(4 * saturation(one, 1000, 200)[0])
    assert saturation(one, 1000, 200)[1] == 256  # vLLM's max_num_seqs, KV is not the limit here


def test_saturation_is_the_steady_state_mixed_step(d8):
    tput, batch = saturation(d8, 128, 128)
    # each step decodes `batch` tokens and prefills batch*128/128 prompt tokens
    step = d8.step_time(2 * batch, batch * (128 + 64) + batch, batch, attn_pairs=batch * (128 + 64) + batch * 129 / 2)
    assert tput == pytest.approx(batch / step)


def test_static_batch_runs_the_whole_batch_to_completion(d8):
    from infermeter.perfmodel.serving import static_batch

    e = static_batch(d8, 128, 256, 64)
    assert e.running_per_replica == 64
    assert e.e2e_s == pytest.approx(e.ttft_s + 255 * e.tpot_s)
    assert e.output_tokens_per_s == pytest.approx(64 * 256 / e.e2e_s)
    # a batch four times the engine's limit runs in four waves: the same rate, four times the latency
    limit = d8.engine_defaults.max_num_seqs
    one, four = static_batch(d8, 128, 256, limit), static_batch(d8, 128, 256, 4 * limit)
    assert four.output_tokens_per_s == pytest.approx(one.output_tokens_per_s) and four.e2e_s == pytest.approx(4 * one.e2e_s)
    # a static batch waits for its longest member: continuous batching of the same users is no slower
    assert static_batch(d8, 1000, 200, 32).output_tokens_per_s <= at_concurrency(d8, 1000, 200, 32).output_tokens_per_s * 1.05


def test_serving_uses_the_deployments_own_engine_limits():
    d = build_deployment("llama-3.1-8b", "h100-sxm", max_num_seqs=16)
    assert saturation(d, 1000, 200)[1] == 16
    assert max_concurrency(d, 1000, 200) == 16
