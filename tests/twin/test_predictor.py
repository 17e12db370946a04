"""The linear fake's closed forms, and the real deployment's agreement with the Protocol."""

from __future__ import annotations

import pytest

from infermeter.twin.predictor import LinearStepTime, StepTimePredictor

P = LinearStepTime(base_s=0.004, per_token_s=1e-4, per_kv_token_s=2e-7, per_seq_s=1e-5, per_pair_s=1e-8)


def test_step_time_is_the_linear_sum():
    # 0.004 + 1e-4*10 + 2e-7*1000 + 1e-5*4 + 1e-8*5000
    assert P.step_time(10, 1000, 4, 5000) == pytest.approx(0.00529)
    # pure decode: pairs default to kv
    assert P.step_time(4, 1000, 4) == pytest.approx(0.004 + 4e-4 + 2e-4 + 4e-5 + 1e-5)


def test_decode_span_equals_the_sum_of_its_steps():
    n, kv = 8, 800
    direct = sum(P.step_time(n, kv + j * n, n) for j in range(37))
    assert P.decode_span(n, kv, 37) == pytest.approx(direct, rel=1e-12)
    assert P.decode_span(n, kv, 0) == 0.0


@pytest.mark.parametrize("budget", [0.0, 0.004, 0.05, 1.0, 12.34])
def test_steps_within_inverts_decode_span(budget):
    k = P.steps_within(8, 800, budget)
    assert P.decode_span(8, 800, k) <= budget < P.decode_span(8, 800, k + 1)


def test_saturation_rate_closed_form():
    p = LinearStepTime(base_s=0.01, per_token_s=0.001)
    # per request: 0.01*O/B + 0.001*(I+O-1) with I=100, O=10, B=5 -> 0.02 + 0.109
    assert p.saturation_rate(100, 10, 5) == pytest.approx(1 / 0.129)


def test_perfmodel_deployment_satisfies_the_protocol():
    from infermeter.perfmodel import build_deployment

    d = build_deployment("llama-3.1-8b", "h100-sxm")
    assert isinstance(d, StepTimePredictor)
    assert isinstance(P, StepTimePredictor)
    span = d.decode_span(16, 16 * 500, 5)
    assert span == pytest.approx(sum(d.step_time(16, 16 * 500 + 16 * j, 16) for j in range(5)), rel=1e-9)


def test_twin_engines_time_steps_with_the_deployments_formula():
    """A Deployment's step time is its bare arithmetic (perfmodel.steptime, compiled in the fast build): the
    documented formula's floats; a twin's engines call that object, and keep it in a pickle."""
    import math
    import pickle

    from infermeter.perfmodel import build_deployment
    from infermeter.perfmodel.steptime import DEQUANT_MIN_TOKENS
    from infermeter.twin.deploy import build_twin

    for model, gpu, kw in (("llama-3.1-70b", "4xa100-80gb:tp4", {}), ("mixtral-8x7b", "2xh100-sxm:tp2", {}),
                           ("llama-3-8b", "h100-pcie", {"dtype": "q4_k_m", "engine": "llamacpp"})):
        d = build_deployment(model, gpu, **kw)
        assert d._k == 2.0 and (d._moe_miss > 0) == (model == "mixtral-8x7b") and (d._dequant > 0) == ("dtype" in kw)
        for t, kv, n, pairs in ((64, 64 * 900, 64, None), (544, 2000, 3, 5000.0), (1, 300, 1, None)):
            a = t * (kv / n - 0.5 * t / n + 0.5) if pairs is None else pairs
            w = d._w_dense + d._w_expert * ((1.0 - d._moe_miss**t) if d._moe_miss else 1.0)
            if 0 < d._ubatch < t:  # llama.cpp: equal micro-batches, pass j at the cache it has reached
                m = math.ceil(t / d._ubatch)
                want = sum(math.hypot(d._lin_tok * (t / m) + d._lin_seq * (n / m), w + d._kv_write * (t / m))
                           + math.hypot(d._att_pair * a / m, (d._kv_read + d._score * (t / m)) * max(kv - t + j * t / m, t / m))
                           + d._comm_step + d._comm_tok * t / m + d._oh_step + d._dequant for j in range(1, m + 1)) + d._oh_seq * n
                assert d.step_time(t, kv, n, pairs) == pytest.approx(want, rel=1e-12)
                continue
            want = (math.hypot(d._lin_tok * t + d._lin_seq * n, w + d._kv_write * t)
                    + math.hypot(d._att_pair * a, d._kv_read * kv + d._score * t * kv) + d._comm_step + d._comm_tok * t + d._oh_step
                    + d._oh_seq * n)
            if d._expert_lat:  # MoE: the fixed cost of each touched expert, the touched share 1 - miss^T of them all
                want += d._expert_lat * (1.0 - d._moe_miss**t) if d._moe_miss else d._expert_lat
            assert (d._expert_lat > 0) == (model == "mixtral-8x7b")
            want = want + d._dequant if t > DEQUANT_MIN_TOKENS else want
            assert d.step_time(t, kv, n, pairs) == want  # the same operations in the same order: the same bits
    twin = build_twin("llama-3.1-70b", "4xa100-80gb:tp4")
    d, eng = twin.predictor, twin.engines()[0]
    assert eng.predictor is d.step_cost
    back = pickle.loads(pickle.dumps(eng))
    span = back.predictor.decode_span(8, 8 * 700, 30)
    assert span == pytest.approx(sum(d.step_time(8, 8 * 700 + 8 * j, 8) for j in range(30)), rel=1e-9)
    assert back.predictor.steps_within(8, 8 * 700, span) == 30 == d.steps_within(8, 8 * 700, span)
