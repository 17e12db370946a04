"""Memory plan: KV bytes per token, TP/PP splits, capacity, fit verdict (hand-computed values)."""

from __future__ import annotations

import pytest

from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.memory import GIB, plan_memory
from infermeter.perfmodel.models import get_model
from infermeter.perfmodel.precision import resolve_precision

H100 = get_hardware("h100-sxm")


def _plan(model, tp=1, pp=1, dtype="bf16", kv=None, hw=H100, **kw):
    return plan_memory(get_model(model), hw, resolve_precision(hw, dtype, kv), tp=tp, pp=pp, **kw)


@pytest.mark.parametrize("model,kv,expected", [
    ("llama-3.1-8b", None, 131072),   # 2 x 32 x 8 x 128 x 2 B = 128 KiB
    ("llama-3.1-8b", "fp8", 65536),
    ("llama-3.1-70b", None, 327680),  # 320 KiB
    ("llama-3.1-405b", None, 516096),  # 504 KiB
    ("llama-2-7b", None, 524288),     # MHA: 512 KiB
])
def test_kv_bytes_per_token(model, kv, expected):
    assert _plan(model, kv=kv).kv_bytes_per_token == expected


def test_kv_split_by_tp_and_pp_and_replicated_beyond_kv_heads():
    assert _plan("llama-3.1-70b", tp=2).kv_bytes_per_token_per_gpu == 163840
    assert _plan("llama-3.1-70b", tp=8).kv_bytes_per_token_per_gpu == 40960
    # tp16 > 8 KV heads: each GPU still holds one head (replicated), not half of one
    assert _plan("llama-3.1-405b", tp=16, hw=get_hardware("b200")).kv_bytes_per_token_per_gpu == 2 * 126 * 1 * 128 * 2
    assert _plan("llama-3.1-70b", tp=2, pp=2).kv_bytes_per_token_per_gpu == 2 * 40 * 4 * 128 * 2


def test_weights_per_gpu():
    assert _plan("llama-3.1-8b").weights_gib_per_gpu == pytest.approx(8_030_261_248 * 2 / GIB)
    # pp2: 40 of 80 layers plus the larger of embedding and lm_head (equal here), split over tp2
    m = get_model("llama-3.1-70b")
    assert _plan("llama-3.1-70b", tp=2, pp=2).weights_gib_per_gpu == pytest.approx(
        (40 * m.layer_params + 128256 * 8192) * 2 / 2 / GIB)


def test_kv_capacity_by_hand():
    p = _plan("llama-3.1-8b")
    # 0.9 x 79.6 GiB - 14.9575 GiB weights - (1 GiB + 8192 x (2x14336 + 4x4096) x 2 B + 256 x 128256 x 4 B)
    kv = 0.9 * 79.6 * GIB - 8_030_261_248 * 2 - (GIB + 738_197_504 + 131_334_144)
    assert p.kv_capacity_tokens == int(kv // 131072) // 16 * 16
    assert p.max_concurrency(1200) == p.kv_capacity_tokens // 1200  # 1200 is a whole number of 16-token blocks
    assert p.max_concurrency(1201) == p.kv_capacity_tokens // 1216


def test_70b_bf16_does_not_fit_one_h100_and_says_why():
    p = _plan("llama-3.1-70b")
    assert not p.fits_weights and p.kv_capacity_tokens == 0
    assert p.why_not().startswith("weights need 131.4 GiB per GPU")
    assert "71.6 GiB of 79.6 GiB" in p.why_not()
    assert _plan("llama-3.1-70b", tp=2).fits_weights


def test_free_memory_fraction_mode():
    total = _plan("llama-3.1-8b", kv_fraction_of="total")
    free = _plan("llama-3.1-8b", kv_fraction_of="free")
    assert free.kv_gib_per_gpu == pytest.approx(0.9 * (79.6 - total.weights_gib_per_gpu - total.reserve_gib_per_gpu))
