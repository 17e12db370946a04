"""Model catalog: exact parameter counts from the architecture, HF config.json loading."""

from __future__ import annotations

import json

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.models import catalog_names, get_model, published_params


def test_computed_counts_equal_the_published_counts():
    checked = 0
    for name in catalog_names():
        pub = published_params(name)
        if pub is not None:
            assert get_model(name).total_params == pub, name
            checked += 1
    assert checked >= 13


def test_llama_31_8b_by_hand():
    m = get_model("llama-3.1-8b")
    # q,o 4096x4096; k,v 4096x(8x128); SwiGLU 3 x 4096 x 14336; two RMSNorms
    assert m.attn_params == 2 * 4096 * 4096 + 2 * 4096 * 1024 == 41_943_040
    assert m.layer_params == 41_943_040 + 176_160_768 + 8_192
    assert m.streamed_params == 32 * 218_112_000 + 4096 + 525_336_576  # untied: lm_head streamed, input table not
    assert m.total_params - m.streamed_params == 525_336_576


def test_mixtral_active_vs_total():
    m = get_model("mixtral-8x7b")
    assert m.total_params == 46_702_792_704
    assert m.active_params == 12_879_925_248  # 2 of 8 experts per token
    assert m.is_moe


def test_tied_embeddings_are_streamed_as_the_lm_head():
    m = get_model("smollm2-135m")
    assert m.tied and m.streamed_params == m.total_params


def test_aliases_and_hf_ids_resolve():
    assert get_model("meta-llama/Llama-3.3-70B-Instruct").name == "llama-3.1-70b"
    assert get_model("Qwen/Qwen2.5-7B-Instruct").name == "qwen2.5-7b"


def test_local_hf_config_json(tmp_path):
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path))
    assert m.total_params == 7_615_616_512  # qkv bias implied by model_type qwen2
    assert m.kv_heads == 4 and m.max_context == 32768
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}
    (tmp_path / "gpt2.json").write_text(json.dumps(gpt2))
    assert get_model(str(tmp_path / "gpt2.json")).total_params == 124_439_808  # GPT-2 small


def test_bad_config_and_unknown_model_name_the_input(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ConfigError, match="missing or bad field"):
        get_model(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown model 'llama-9'"):
        get_model("llama-9")
