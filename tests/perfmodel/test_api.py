"""Deployment step time: hand-computed roofline, closed-form decode spans, errors."""

from __future__ import annotations

import math

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel import Deployment, build_deployment
from infermeter.perfmodel.calibration import Calibration, EngineDefaults, Entry

IDEAL = Calibration(
    entries=tuple(Entry("*", "*", "*", ph, "*", 1.0, "test") for ph in ("prefill", "decode")),
    engines=(EngineDefaults("vllm", 0.0, 0.0, 0.0, 256, 8192, "current", "total", "test"),),
    smooth=math.inf,
)
ROUND_GPU = """
round-gpu: {name: Round, family: test, memory_gb: 100, memory_bandwidth_gbs: 1000, tflops: {bf16: 1000},
            interconnect: {kind: link, bandwidth_gbs: 200, latency_us: 10}, tdp_w: 100, source: 'https://example', date: '2026-01-01'}
"""


@pytest.fixture()
def round_file(tmp_path):
    f = tmp_path / "round.yaml"
    f.write_text(ROUND_GPU)
    return str(f)


def test_single_token_decode_is_weight_bytes_over_bandwidth(round_file):
    d = build_deployment("llama-3.1-8b", "round-gpu", hardware_file=round_file, calibration=IDEAL)
    # 32 layers x 218,112,000 + lm_head 525,336,576 params, 2 B each, at 1e12 B/s; plus 128 KiB of KV
    weights_s = (32 * 218_112_000 + 525_336_576) * 2 / 1e12
    assert d.step_time(1, 1, 1) == pytest.approx(weights_s + 131072 / 1e12 + 131072 / 1e12, rel=1e-12)


def test_large_prefill_is_compute_bound(round_file):
    d = build_deployment("llama-3.1-8b", "round-gpu", hardware_file=round_file, calibration=IDEAL)
    t = 4096
    kv_read = t * 131072 / 1e12
    lin = max((2 * 32 * 218_112_000 * t + 2 * 525_336_576) / 1e15, (32 * 218_112_000 + 525_336_576) * 2 / 1e12 + kv_read)
    att = max(4 * 32 * 32 * 128 * t * (t + 1) / 2 / 1e15, kv_read)
    assert d.step_time(t, t, 1) == pytest.approx(lin + att, rel=1e-12)
    assert lin > 3 * (32 * 218_112_000 + 525_336_576) * 2 / 1e12  # compute-bound by a wide margin


def test_tensor_parallel_adds_two_allreduces_per_layer(round_file):
    d1 = build_deployment("llama-3.1-8b", "round-gpu", hardware_file=round_file, calibration=IDEAL)
    d2 = build_deployment("llama-3.1-8b", "2xround-gpu:tp2", hardware_file=round_file, calibration=IDEAL)
    # latency 10 us each, bandwidth term 2(t-1)/t x 4096 x 2 B / (100 GB/s x 0.8)
    comm = 2 * 32 * (10e-6 + 1 * 4096 * 2 / 80e9)
    weights = ((32 * (218_112_000 - 2 * 4096 * 1024) / 2 + 32 * 2 * 4096 * 512) + 525_336_576 / 2) * 2 / 1e12
    kv = 2 * 32 * 4 * 128 * 2 / 1e12
    assert d2.step_time(1, 1, 1) == pytest.approx(weights + 2 * kv + comm, rel=1e-9)
    assert d2.step_time(1, 1, 1) < d1.step_time(1, 1, 1)


def test_pipeline_parallel_adds_stage_transfers(round_file):
    d1 = build_deployment("llama-3.1-8b", "round-gpu", hardware_file=round_file, calibration=IDEAL)
    d2 = build_deployment("llama-3.1-8b", "2xround-gpu:pp2", hardware_file=round_file, calibration=IDEAL)
    assert d2.pipeline_depth == 2
    assert d2.step_time(1, 1, 1) - d1.step_time(1, 1, 1) == pytest.approx(10e-6 + 4096 * 2 / 80e9, rel=1e-6)


@pytest.mark.parametrize("model,config,dtype", [
    ("llama-3.1-8b", "h100-sxm", "bf16"),
    ("llama-3.1-70b", "4xa100-80gb:tp4", "bf16"),
    ("mixtral-8x7b", "2xh100-sxm:tp2", "fp8"),
    ("llama-3.1-70b", "8xl40s:tp4,pp2", "fp8"),
])
def test_decode_span_equals_sum_of_step_times(model, config, dtype):
    d = build_deployment(model, config, dtype=dtype)
    for n, k0, steps in ((1, 10, 1), (8, 8 * 700, 50), (96, 96 * 3000, 400)):
        total = sum(d.step_time(n, k0 + j * n, n) for j in range(steps))
        assert d.decode_span(n, k0, steps) == pytest.approx(total, rel=1e-9)
    assert d.decode_span(4, 100, 0) == 0.0


@pytest.mark.parametrize("budget", [0.0, 0.001, 0.05, 1.0, 30.0])
def test_steps_within_is_the_largest_span_inside_the_budget(budget):
    d = build_deployment("llama-3.1-8b", "h100-sxm")
    s = d.steps_within(32, 32 * 1000, budget)
    assert d.decode_span(32, 32 * 1000, s) <= budget < d.decode_span(32, 32 * 1000, s + 1)


def test_step_time_grows_with_work_and_is_zero_for_empty_batches():
    d = build_deployment("llama-3.1-8b", "h100-sxm")
    assert d.step_time(0, 0, 0) == 0.0
    assert d.step_time(8, 8000, 8) < d.step_time(8, 16000, 8) < d.step_time(64, 16000, 64)
    # attn_pairs=None is exact for a single prefill from an empty cache: T(T+1)/2
    assert d.step_time(512, 512, 1) == d.step_time(512, 512, 1, attn_pairs=512 * 513 / 2)


def test_deployment_fields():
    d = build_deployment("llama-3.1-8b", "2xh100-sxm:tp1", dtype="fp8", kv_dtype="fp8")
    assert isinstance(d, Deployment)
    assert (d.config.replicas, d.config.tp, d.dtype, d.kv_dtype, d.kv_bytes_per_token) == (2, 1, "fp8", "fp8", 65536)
    assert d.fits and d.kv_capacity_tokens > 100_000 and d.max_model_len == 131072
    with pytest.raises(AttributeError):
        d.fits = False  # frozen
    small = build_deployment("llama-3.1-70b", "2xh100-sxm:tp2", max_model_len=131072)
    assert not small.fits and "fewer than one 131,072-token sequence" in small.why_not


@pytest.mark.parametrize("kwargs,match", [
    (dict(model="llama-9"), "unknown model 'llama-9'"),
    (dict(config="v100"), "unknown hardware 'v100'"),
    (dict(dtype="fp7"), "--dtype 'fp7' unknown"),
    (dict(engine="ollama"), "--engine 'ollama' unknown"),
    (dict(config="3xh100-sxm:tp3"), "tp3 does not divide"),
    (dict(config="2xcpu-epyc-9654:tp2"), "no device interconnect"),
])
def test_errors_name_the_input(kwargs, match):
    args = {"model": "llama-3.1-8b", "config": "h100-sxm", **kwargs}
    with pytest.raises(ConfigError, match=match):
        build_deployment(args.pop("model"), args.pop("config"), **args)


def test_with_values_matches_a_deployment_built_with_those_values():
    """The fit's fast path (rescaling a built deployment) gives the step times a fresh build would."""
    from infermeter.perfmodel.calibration import load_calibration

    base = build_deployment("llama-3.1-70b", "4xh100-sxm:tp4", dtype="fp8", engine="trtllm@0.6.1")
    cal = load_calibration()
    values = {"prefill": 0.41, "decode": 0.66, "step_overhead": 1.7, "kv_reread": 0.3, "seq_overhead": 9.0}
    extra = tuple(Entry("*", eng, "fp8" if ph in ("prefill", "decode") else "*", ph, "*", v, "test", prior=v)
                  for ph, v, eng in (("prefill", values["prefill"], "*"), ("decode", values["decode"], "*"),
                                     ("step_overhead", values["step_overhead"], "trtllm<0.8"), ("kv_reread", values["kv_reread"], "trtllm<0.8"),
                                     ("seq_overhead", values["seq_overhead"], "trtllm")))
    rebuilt = build_deployment("llama-3.1-70b", "4xh100-sxm:tp4", dtype="fp8", engine="trtllm@0.6.1",
                               calibration=cal.with_entries(extra + tuple(e for e in cal.entries if not e.fitted)))
    assert (rebuilt.mfu, rebuilt.mbu, rebuilt.step_overhead_ms, rebuilt.kv_reread, rebuilt.seq_overhead_us) == (0.41, 0.66, 1.7, 0.3, 9.0)
    fast = base.with_values(mfu=0.41, mbu=0.66, step_overhead_ms=1.7, layer_overhead_us=0.0, kv_reread=0.3,
                            request_overhead_ms=rebuilt.request_overhead_s * 1e3, seq_overhead_us=9.0)
    for args in ((1, 2000, 1), (64, 64 * 1500, 64), (2048, 2048, 1)):
        assert fast.step_time(*args) == pytest.approx(rebuilt.step_time(*args), rel=1e-9)
    assert fast.kv_reread_factor == pytest.approx(1 + 0.3 * 7)  # 64 query heads over 8 K/V heads


def test_engine_version_and_scheduler_overrides():
    d = build_deployment("llama-3.1-8b", "h100-sxm", engine="trtllm@0.6.1", max_num_seqs=64, max_batched_tokens=4096)
    assert d.engine == "trtllm@0.6.1" and d.engine_defaults.max_num_seqs == 64 and d.engine_defaults.max_batched_tokens == 4096
    with pytest.raises(ConfigError, match="max_num_seqs 0 must be >= 1"):
        build_deployment("llama-3.1-8b", "h100-sxm", max_num_seqs=0)


def test_llamacpp_pays_a_per_layer_launch_cost():
    d8 = build_deployment("llama-3-8b", "h100-pcie", dtype="q4_k_m", engine="llamacpp")
    d70 = build_deployment("llama-3-70b", "h100-pcie", dtype="q4_k_m", engine="llamacpp")
    assert d8.layer_overhead_us > 0
    per_layer = (d70.step_overhead_s - d8.step_overhead_s) / (80 - 32)
    assert per_layer == pytest.approx(d8.layer_overhead_us * 1e-6)
