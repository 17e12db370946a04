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
