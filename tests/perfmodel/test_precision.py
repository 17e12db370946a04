"""Precision rules: bytes per weight, compute dtype, refusals."""

from __future__ import annotations

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.precision import resolve_precision


def test_fp8_is_native_on_hopper_and_weight_only_on_ampere():
    p = resolve_precision(get_hardware("h100-sxm"), "fp8")
    assert (p.bytes_per_weight, p.compute_dtype, p.weight_only, p.notes) == (1.0, "fp8", False, ())
    for hid in ("a100-80gb", "a10g"):
        q = resolve_precision(get_hardware(hid), "fp8")
        assert (q.bytes_per_weight, q.compute_dtype, q.weight_only) == (1.0, "bf16", True)
        assert "no FP8 tensor cores" in q.notes[0] and "BF16 rate" in q.notes[0]


def test_group_quantised_bytes():
    h = get_hardware("h100-sxm")
    assert resolve_precision(h, "int4").bytes_per_weight == pytest.approx((4 + 16 / 128 + 4 / 128) / 8)
    assert resolve_precision(h, "awq").compute_dtype == "bf16"
    assert resolve_precision(get_hardware("b200"), "fp4").bytes_per_weight == pytest.approx(4.5 / 8)
    assert resolve_precision(get_hardware("rtx-4090"), "q4_k_m", engine="llamacpp").bytes_per_weight == pytest.approx(4.85 / 8)


def test_kv_dtype_defaults_to_16_bit_and_fp8_halves_it():
    h = get_hardware("h100-sxm")
    assert resolve_precision(h, "fp8").kv_bytes == 2.0
    assert resolve_precision(h, "bf16", "fp8").kv_bytes == 1.0


def test_refusals_name_the_input():
    with pytest.raises(ConfigError, match="--dtype fp4 needs FP4 tensor cores.*'h100-sxm'"):
        resolve_precision(get_hardware("h100-sxm"), "fp4")
    with pytest.raises(ConfigError, match="--engine trtllm runs only on NVIDIA GPUs, not on 'mi300x'"):
        resolve_precision(get_hardware("mi300x"), "bf16", engine="trtllm")
    with pytest.raises(ConfigError, match="--dtype 'fp7' unknown"):
        resolve_precision(get_hardware("h100-sxm"), "fp7")
    with pytest.raises(ConfigError, match="--kv-dtype 'int3' unknown"):
        resolve_precision(get_hardware("h100-sxm"), "bf16", "int3")
    with pytest.raises(ConfigError, match="GGUF type"):
        resolve_precision(get_hardware("h100-sxm"), "q4_k_m", engine="trtllm")


@pytest.mark.parametrize("engine,dtype,hw,kv", [
    ("trtllm", "fp4", "b200", "fp8"),          # FP4 checkpoints carry an FP8 KV cache under TensorRT-LLM
    ("trtllm", "fp8", "h100-sxm", "fp8"),
    ("trtllm@0.6.1", "fp8", "h100-sxm", "fp8"),  # a version does not change the rule
    ("trtllm", "bf16", "h100-sxm", "bf16"),
    ("trtllm", "int4", "h100-sxm", "bf16"),
    ("vllm", "fp8", "h100-sxm", "bf16"),       # vLLM keeps the model dtype unless --kv-cache-dtype is given
    ("vllm", "fp4", "b200", "bf16"),
])
def test_default_kv_dtype_follows_the_engine(engine, dtype, hw, kv):
    p = resolve_precision(get_hardware(hw), dtype, None, engine)
    assert p.kv_dtype == kv
    assert any("fp8 KV cache" in n for n in p.notes) == (kv == "fp8")
    assert resolve_precision(get_hardware(hw), dtype, "auto", engine).kv_dtype == kv
    assert resolve_precision(get_hardware(hw), dtype, "bf16", engine).kv_dtype == "bf16"  # an explicit choice wins
