"""Claims against the ideal-hardware ceiling."""

from __future__ import annotations

import math

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.check import check_claim, ideal_calibration


def test_single_stream_claim_beyond_bandwidth_is_impossible():
    v = check_claim("decode_tokens_per_s", 115, "llama-3.1-70b", "2xh100-sxm:tp2", dtype="bf16")
    # per GPU and token: 80 layers x 855,654,400 / 2 x 2 B + lm_head 128,256 x 8192 / 2 x 2 B
    # + KV read of 1100 context tokens and write of 1, 160 KiB each; all at 3.35 TB/s
    per_gpu = 80 * 855_654_400 + 1_050_673_152 + 1101 * 163840
    assert v.ceiling == pytest.approx(1 / (per_gpu / 3.35e12), rel=1e-3)
    assert v.verdict == "impossible" and v.ratio_to_ceiling == pytest.approx(115 / v.ceiling)
    assert "IMPOSSIBLE" in v.sentence() and "x the physical limit" in v.sentence()


def test_reasonable_claims_are_possible_and_near_ones_implausible():
    v = check_claim("decode", 25, "llama-3.1-70b", "2xh100-sxm:tp2")
    assert v.verdict == "possible" and v.predicted < v.ceiling
    near = check_claim("decode", 0.95 * v.ceiling, "llama-3.1-70b", "2xh100-sxm:tp2")
    assert near.verdict == "implausible"


def test_latency_claims_use_the_floor():
    v = check_claim("ttft_ms", 5, "llama-3.1-8b", "h100-sxm", input_tokens=2000)
    assert v.verdict == "impossible" and v.ceiling > 5 and v.ratio_to_ceiling == pytest.approx(v.ceiling / 5)
    assert check_claim("ttft", 500, "llama-3.1-8b", "h100-sxm", input_tokens=2000).verdict == "possible"


def test_model_that_cannot_fit_is_impossible_with_the_reason():
    v = check_claim("throughput", 100, "llama-3.1-70b", "h100-sxm")
    assert v.verdict == "impossible" and math.isnan(v.ceiling)
    assert "cannot run on h100-sxm" in v.sentence() and "131.4 GiB" in v.sentence()


def test_unknown_metric_names_the_input():
    with pytest.raises(ConfigError, match="--check metric 'speed' unknown"):
        check_claim("speed", 1, "llama-3.1-8b", "h100-sxm")


def test_the_ceiling_has_no_engine_costs_even_for_llamacpp():
    """The ideal hardware pays no launch overheads: llama.cpp's per-layer cost is gone from the ceiling too."""
    v = check_claim("tpot_ms", 1.0, "llama-3-8b", "rtx-4090", dtype="q4_k_m", engine="llamacpp")
    assert v.ceiling < v.predicted  # the prediction pays the launches and efficiencies the ceiling does not
    d = build_deployment("llama-3-8b", "rtx-4090", dtype="q4_k_m", engine="llamacpp", calibration=ideal_calibration())
    assert d.step_overhead_s == 0.0


def test_the_verdict_sets_the_prediction_interval_beside_the_bound():
    v = check_claim("tpot_ms", 8.0, "llama-3.1-8b", "h100-sxm", dtype="fp8", engine="trtllm")
    assert v.interval is not None and v.interval_basis is not None
    lo, hi = v.interval
    assert lo < v.predicted < hi and v.ceiling < hi  # the bound is a floor for a latency
    assert v.interval_basis["basis"] == "calibrated" and v.interval_basis["n"] > 0
    assert "80% interval" in v.sentence() and "published rows behind it" in v.sentence()
    unseen = check_claim("tpot_ms", 8.0, "llama-3.1-8b", "mi300x", dtype="bf16", engine="sglang")  # no SGLang MI300X BF16 row
    assert unseen.interval_basis is not None and unseen.interval_basis["basis"] == "unseen"
    assert unseen.interval is not None and unseen.interval[0] < unseen.predicted < unseen.interval[1]
