"""MoE and MLA models in the catalog: total vs active parameters, expert load at batch, MXFP4 experts, compressed KV."""

from __future__ import annotations

import pytest

from infermeter.perfmodel.api import build_deployment
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.models import card_params, catalog_names, from_hf_config, get_model
from infermeter.perfmodel.planner import plan

GIB = 2**30


def test_computed_totals_match_the_model_cards_within_one_percent():
    checked = 0
    for name in catalog_names():
        card = card_params(name)
        if card is not None:
            assert get_model(name).total_params == pytest.approx(card, rel=0.01), name
            checked += 1
    assert checked >= 9


# (model, card's active count, whether the card counts the input embedding table): gpt-oss and
# DeepSeek's counts leave it out (DeepSeek's README: 36.6B incl. the 0.9B output head), Qwen's and Meta's keep it
@pytest.mark.parametrize(("name", "active_b", "with_table"), [("gpt-oss-120b", 5.1, False), ("gpt-oss-20b", 3.6, False),
                                                              ("deepseek-v3", 36.6, False), ("qwen3-30b-a3b", 3.3, True),
                                                              ("qwen3-235b-a22b", 22.0, True), ("llama-4-scout", 17.0, True)])
def test_active_parameters_match_the_cards(name, active_b, with_table):
    m = get_model(name)
    assert m.is_moe
    assert (m.active_params - (0 if with_table else m.vocab * m.hidden)) / 1e9 == pytest.approx(active_b, rel=0.03)


def test_the_script_ids_and_aliases_resolve():
    for name in ("gpt-oss-120b", "gpt-oss-20b", "qwen3-30b-a3b", "deepseek-v3"):
        assert get_model(name).name == name
    assert get_model("deepseek-r1").name == "deepseek-v3"
    assert get_model("llama-3.3-70b").layers == 80


def test_gpt_oss_120b_fits_one_h100_with_a_batch_1_tpot_from_active_parameters():
    p = plan("gpt-oss-120b", "h100-sxm").to_json()
    assert p["fits"]
    m = get_model("gpt-oss-120b")
    bw = get_hardware("h100-sxm").bandwidth_bytes_per_s
    routed = m.routed_expert_params
    dense_bytes = (m.streamed_params - routed) * 2.0  # attention, router, norms, lm_head in BF16
    total_bytes = dense_bytes + routed * 4.25 / 8  # all experts in MXFP4: what memory holds
    assert p["weights_gib_per_gpu"] == pytest.approx(total_bytes / GIB, rel=0.03)  # ~60.8 GiB checkpoint
    active_bytes = dense_bytes + routed * (m.experts_per_token / m.experts) * 4.25 / 8
    tpot_s = p["tpot_ms"] / 1e3
    assert tpot_s >= active_bytes / bw  # no faster than streaming the active weights at peak bandwidth
    assert tpot_s < 2.5 * active_bytes / bw
    assert tpot_s < 0.5 * total_bytes / bw  # far below streaming every expert


def test_more_experts_are_touched_as_the_batch_grows():
    d = build_deployment("qwen3-30b-a3b", "h100-sxm")
    m = d.spec
    w = [d.weight_time(b) for b in (1, 2, 8, 64, 512)]
    assert w == sorted(w) and w[-1] > 3 * w[0]
    touched = lambda b: 1 - (1 - m.experts_per_token / m.experts) ** b  # noqa: E731
    dense = d.weight_time(1) - (d.weight_time(512) - d.weight_time(1)) * touched(1) / (touched(512) - touched(1))
    for b in (2, 8, 64):
        frac = (d.weight_time(b) - dense) / (d.weight_time(512) - dense)
        assert frac == pytest.approx(touched(b) / touched(512), rel=1e-6)
    dense_model = build_deployment("qwen3-8b", "h100-sxm")
    assert dense_model.weight_time(1) == dense_model.weight_time(512)


def test_mla_caches_the_compressed_latent():
    m = get_model("deepseek-v3")
    d = build_deployment(m, "8xh200:tp8", dtype="fp8")
    assert d.kv_bytes_per_token == 61 * (512 + 64) * 2  # bf16 cache of kv_lora_rank + qk_rope_head_dim per layer
    assert d.memory.kv_bytes_per_token_per_gpu == 61 * (512 + 64) * 2  # replicated on every TP rank
    gqa_equiv = 2 * 61 * 128 * 128 * 2  # the same heads without compression
    assert d.kv_bytes_per_token * 50 < gqa_equiv
    assert d.fits


def test_deepseek_from_a_hf_config_matches_the_catalog():
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
           "num_hidden_layers": 61, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
           "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
           "tie_word_embeddings": False, "max_position_embeddings": 163840}
    m = from_hf_config(cfg, "ds")
    ref = get_model("deepseek-v3")
    assert (m.total_params, m.active_params, m.kv_elements_per_token()) == (ref.total_params, ref.active_params, ref.kv_elements_per_token())


def test_gpt_oss_from_a_hf_config_matches_the_catalog():
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "num_hidden_layers": 36, "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
           "vocab_size": 201088, "tie_word_embeddings": False, "max_position_embeddings": 131072,
           "quantization_config": {"quant_method": "mxfp4"}}
    m = from_hf_config(cfg, "g")
    ref = get_model("gpt-oss-120b")
    assert (m.total_params, m.expert_bits) == (ref.total_params, ref.expert_bits)


def test_moe_rows_of_tensorrt_llm_v1_0_are_predicted_from_total_and_active_parameters():
    """24 saturated-throughput rows (Qwen3-235B-A22B, Llama 4 Scout and Maverick, FP8 on H100/H200) of
    TensorRT-LLM's perf-overview v1.0 edition, kept beside the corpus (not yet in the fits behind the intervals)."""
    from pathlib import Path

    from infermeter.perfmodel.validate import load_rows, validate

    path = Path(__file__).resolve().parents[1] / "data" / "published-moe-measurements.csv"
    report = validate(load_rows(str(path)), holdout="none")
    assert len(report.results) == 24
    assert {r.row.model for r in report.results} == {"qwen3-235b-a22b", "llama-4-scout", "llama-4-maverick"}
    assert report.median_abs("in") <= 0.25
    assert sum(abs(r.error) <= 0.30 for r in report.results) >= 18
