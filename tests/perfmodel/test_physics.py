"""Physical terms of the step-time model (issue 29): each shown by the effect it exists for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.api import Deployment
from infermeter.perfmodel.calibration import Calibration, load_calibration
from infermeter.perfmodel.serving import engine_of


def _with_engine(name: str, **fields: object) -> Calibration:
    """The shipped table with engine ``name``'s defaults changed."""
    cal = load_calibration()
    return cal.with_entries(cal.entries, tuple(replace(e, **fields) if e.name == name else e for e in cal.engines))


def _pp_rate(d: Deployment, tokens: int) -> float:
    """llama-bench ``pp``: prompt tokens over their prefill time, in steps of the engine's n_batch."""
    return tokens / d.prefill_time(tokens, engine_of(d).max_batched_tokens)


@pytest.mark.parametrize(("model", "gpu", "dtype"), [("llama-2-7b", "a100-80gb-pcie", "fp16"), ("llama-3.1-8b", "rtx-4090", "q4_k_m")])
def test_llamacpp_prompt_rate_falls_with_prompt_length(model, gpu, dtype):
    """llama.cpp: 512-token micro-batches each re-read the weights, and the KQ scores grow with the square of the length."""
    d = build_deployment(model, gpu, dtype=dtype, engine="llamacpp")
    rates = [_pp_rate(d, n) for n in (512, 1024, 2048, 4096, 8192)]
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert rates[-1] < 0.8 * rates[0]
    fused = build_deployment(model, gpu, dtype=dtype, engine="llamacpp", calibration=_with_engine("llamacpp", ubatch_tokens=0, score_bytes=0.0))
    assert _pp_rate(fused, 2048) > _pp_rate(fused, 512)  # one pass per 2048-token batch, no score traffic: the rate would rise


def test_each_llamacpp_term_slows_long_prompts_only():
    one_pass = _with_engine("llamacpp", ubatch_tokens=0)
    no_scores = _with_engine("llamacpp", score_bytes=0.0)
    full = build_deployment("llama-2-7b", "a100-80gb-pcie", dtype="fp16", engine="llamacpp")
    split_only = build_deployment("llama-2-7b", "a100-80gb-pcie", dtype="fp16", engine="llamacpp", calibration=no_scores)
    scores_only = build_deployment("llama-2-7b", "a100-80gb-pcie", dtype="fp16", engine="llamacpp", calibration=one_pass)
    assert full.prefill_time(512) == pytest.approx(scores_only.prefill_time(512), rel=1e-12)  # one micro-batch: nothing to split
    assert split_only.prefill_time(2048, 2048) > 1.05 * build_deployment(
        "llama-2-7b", "a100-80gb-pcie", dtype="fp16", engine="llamacpp",
        calibration=_with_engine("llamacpp", ubatch_tokens=0, score_bytes=0.0)).prefill_time(2048, 2048)
    # the score traffic grows with the square of the length: from 2k to 8k its share of the prompt time grows
    share = [1 - split_only.prefill_time(n, 2048) / full.prefill_time(n, 2048) for n in (2048, 8192)]
    assert 0 < share[0] < share[1]
    # decode of one sequence reads 16 bytes per score and head next to its K/V: a little slower, not another regime
    dec, dec0 = full.step_time(1, 4096, 1), split_only.step_time(1, 4096, 1)
    assert dec0 < dec < 1.2 * dec0


def test_engines_with_flash_attention_have_no_score_traffic():
    d = build_deployment("llama-3.1-8b", "h100-sxm", engine="vllm")
    assert engine_of(d).score_bytes == 0 and engine_of(d).ubatch_tokens == 0
    assert d.breakdown(1, 100_000, 1)["memory"] == pytest.approx(d.weight_time(1) + d._kv_write + d._kv_read * 100_000)


def test_micro_batched_decode_span_tracks_its_steps():
    """A decode batch larger than the micro-batch: the span's linear form stays within 0.1% of the summed steps."""
    d = build_deployment("llama-3.1-8b", "h100-sxm", dtype="fp16", engine="llamacpp", max_num_seqs=1024)
    n, k0, steps = 600, 600 * 900, 20
    total = sum(d.step_time(n, k0 + i * n, n) for i in range(steps))
    assert d.decode_span(n, k0, steps) == pytest.approx(total, rel=1e-3)


def test_bad_engine_physics_is_refused(tmp_path):
    from infermeter.errors import ConfigError
    from infermeter.perfmodel.calibration import parse_calibration

    data = {"engines": {"x": {"overhead_ms": 1, "per_seq_us": 1, "request_overhead_ms": 1, "max_num_seqs": 1,
                              "max_batched_tokens": 1, "source": "s", "ubatch_tokens": -1}}}
    with pytest.raises(ConfigError, match="engine 'x': ubatch_tokens and score_bytes must be >= 0"):
        parse_calibration(data, "t.yaml")


@pytest.mark.parametrize("field, value", [("request_overhead_ms", -1), ("overhead_ms", -0.5), ("per_seq_us", float("nan")),
                                          ("eager_layer_us", -47), ("layer_overhead_us", float("inf"))])
def test_an_engine_cost_below_zero_or_not_finite_is_refused_by_name(field, value):
    """A cost is time spent: a negative one would finish a step before it began (and break serving's closed-loop
    ceiling, which assumes none is), so a calibration file with one is refused, naming the engine and field."""
    from infermeter.errors import ConfigError
    from infermeter.perfmodel.calibration import parse_calibration

    raw = {"overhead_ms": 1, "per_seq_us": 1, "request_overhead_ms": 1, "max_num_seqs": 1, "max_batched_tokens": 1, "source": "s"}
    assert parse_calibration({"engines": {"x": raw}}, "t.yaml").engine("x").overhead_ms == 1
    with pytest.raises(ConfigError, match=f"t.yaml: engine 'x': {field} must be a finite number >= 0"):
        parse_calibration({"engines": {"x": {**raw, field: value}}}, "t.yaml")


def _nvlink_twin(tmp_path, gpu: str) -> str:
    """A hardware file: ``gpu`` with its PCIe link (same bandwidth and latency) but every device in one P2P domain."""
    from infermeter.perfmodel.hardware import get_hardware

    ic = get_hardware(gpu).interconnect
    f = tmp_path / "flat.yaml"
    f.write_text(f"{gpu}: {{interconnect: {{kind: flat, bandwidth_gbs: {ic.bandwidth_gbs}, latency_us: {ic.latency_us}, p2p_domain: 0, "
                 f"custom_allreduce_max: {ic.custom_allreduce_max}, nccl_latency_us: {ic.nccl_latency_us}}}}}\n")
    return str(f)


def test_pcie_all_reduce_beyond_four_gpus_crosses_the_sockets(tmp_path):
    """L40S TP8 (an 8-GPU PCIe box: the ring spans both CPU sockets) is slower than the same link without the crossing."""
    flat = _nvlink_twin(tmp_path, "l40s")
    tp8 = build_deployment("llama-3.1-70b", "8xl40s:tp8", dtype="fp8", engine="trtllm")
    tp8_flat = build_deployment("llama-3.1-70b", "8xl40s:tp8", dtype="fp8", engine="trtllm", hardware_file=flat)
    assert tp8.hw.interconnect.p2p_domain == 4 and tp8.hw.interconnect.cross_domain_factor < 1
    assert tp8._comm_tok == pytest.approx(tp8_flat._comm_tok / tp8.hw.interconnect.cross_domain_factor)
    assert tp8.step_time(64, 64 * 1000, 64) > 1.02 * tp8_flat.step_time(64, 64 * 1000, 64)
    tp4 = build_deployment("llama-3.1-8b", "4xl40s:tp4", dtype="fp8", engine="trtllm")
    tp4_flat = build_deployment("llama-3.1-8b", "4xl40s:tp4", dtype="fp8", engine="trtllm", hardware_file=flat)
    assert tp4.step_time(64, 64 * 1000, 64) == tp4_flat.step_time(64, 64 * 1000, 64)  # four GPUs: one socket, no crossing


def test_more_than_two_pcie_gpus_all_reduce_through_nccl():
    """vLLM and SGLang run their one-shot all-reduce kernel on at most two PCIe GPUs; a larger PCIe group pays NCCL's
    start-up latency on each of the 2 L all-reduces of a step, an NVLink group keeps the kernel's."""
    ic = build_deployment("llama-3.1-8b", "l40s").hw.interconnect
    assert ic.custom_allreduce_max == 2 and ic.nccl_latency_us > ic.latency_us
    assert ic.allreduce_latency_us(2) == ic.latency_us
    assert ic.allreduce_latency_us(4) == pytest.approx(ic.nccl_latency_us * 1.3)
    assert ic.allreduce_latency_us(8) == pytest.approx(ic.nccl_latency_us * 1.6)
    tp4 = build_deployment("llama-3.1-70b", "4xl40s:tp4", dtype="fp8")
    assert tp4._comm_step == pytest.approx(2 * tp4.spec.layers * ic.nccl_latency_us * 1.3e-6)
    nv = build_deployment("llama-3.1-70b", "8xh100-sxm:tp8", dtype="fp8").hw.interconnect
    assert nv.custom_allreduce_max == 0 and nv.allreduce_latency_us(8) == pytest.approx(nv.latency_us * 1.6)


def test_two_pcie_gpus_and_pipeline_hops_keep_the_kernel_latency():
    """At TP2 a PCIe card keeps its own kernel's latency (vLLM's one-shot all-reduce over P2P), as do pipeline hops;
    a GeForce card without P2P and bridged H100 NVL pairs beyond two hand their groups to NCCL."""
    tp2 = build_deployment("llama-3.1-8b", "2xl40s:tp2")
    ic = tp2.hw.interconnect
    assert tp2._comm_step == pytest.approx(2 * tp2.spec.layers * ic.latency_us * 1e-6)
    pp2 = build_deployment("llama-3.1-8b", "2xl40s:pp2")
    assert pp2._comm_step == pytest.approx(ic.latency_us * 1e-6)
    g = build_deployment("llama-3.1-8b", "rtx-4090").hw.interconnect
    assert g.custom_allreduce_max == 1 and g.allreduce_latency_us(2) == g.nccl_latency_us
    nvl = build_deployment("llama-3.1-8b", "h100-nvl").hw.interconnect
    assert nvl.allreduce_latency_us(2) == nvl.latency_us and nvl.allreduce_latency_us(4) == pytest.approx(nvl.nccl_latency_us * 1.3)


def test_a_hardware_file_that_changes_the_link_kind_replaces_the_link(tmp_path):
    """An L40S given NVLink keeps none of the PCIe card's socket domain or NCCL start-up; the same kind merges."""
    f = tmp_path / "nv.yaml"
    f.write_text("l40s: {interconnect: {kind: nvlink4, bandwidth_gbs: 900, latency_us: 6}}\n")
    ic = build_deployment("llama-3.1-8b", "l40s", hardware_file=str(f)).hw.interconnect
    assert (ic.p2p_domain, ic.cross_domain_factor, ic.custom_allreduce_max) == (0, 1.0, 0)
    assert ic.allreduce_latency_us(8) == pytest.approx(6 * 1.6)
    same = tmp_path / "same.yaml"
    same.write_text("l40s: {interconnect: {latency_us: 10}}\n")
    ic = build_deployment("llama-3.1-8b", "l40s", hardware_file=str(same)).hw.interconnect
    assert ic.latency_us == 10 and ic.custom_allreduce_max == 2 and ic.p2p_domain == 4


def test_nvlink_tp8_keeps_its_bandwidth():
    d = build_deployment("llama-3.1-70b", "8xh100-sxm:tp8", dtype="fp8", engine="trtllm")
    assert d.hw.interconnect.allreduce_factor(8) == 1.0


def test_tensor_parallel_over_two_nodes_all_reduces_over_the_network(tmp_path):
    """TP16 on 8-GPU H200 nodes: NCCL over the whole group (no one-node kernel), its start-up plus four one-way network
    latencies, and a ring no faster than a GPU's NIC; the same 16 GPUs in one NVLink domain (a hardware file with
    node_devices 16) keep the link's own all-reduce, and a slower network costs more."""
    from infermeter.perfmodel.hardware import get_network

    d = build_deployment("deepseek-v3", "16xh200:tp16", dtype="fp8", engine="sglang")
    ic, net, L = d.hw.interconnect, get_network("ib-ndr400"), d.spec.layers
    assert ic.node_devices == 8 and d.network == "ib-ndr400" and any("span 2 nodes" in n for n in d.notes)
    assert d._comm_step == pytest.approx(2 * L * (ic.latency_us * 1.6 + 4 * net.latency_us) * 1e-6)
    nics = 8 * net.bandwidth_gbs * 1e9 * 0.8  # one ring (channel) a NIC: the crossing carries the node's eight together
    link = ic.per_direction_bytes_per_s * 0.8
    assert d._comm_tok == pytest.approx(2 * L * 2 * 15 / 16 * d.spec.hidden * 2 / min(link, nics))
    shared = build_deployment("deepseek-v3", "16xh200:tp16", dtype="fp8", engine="sglang", network="ethernet-100")
    eth = get_network("ethernet-100")  # one NIC a node, shared: the crossing carries that one NIC
    assert eth.shared_nic and shared._comm_tok == pytest.approx(2 * L * 2 * 15 / 16 * d.spec.hidden * 2 / (eth.bandwidth_gbs * 1e9 * 0.8))
    one = tmp_path / "one.yaml"
    one.write_text("h200: {interconnect: {node_devices: 16}}\n")
    flat = build_deployment("deepseek-v3", "16xh200:tp16", dtype="fp8", engine="sglang", hardware_file=str(one))
    assert flat.network == "" and flat._comm_step == pytest.approx(2 * L * ic.allreduce_latency_us(16) * 1e-6)
    slow = build_deployment("deepseek-v3", "16xh200:tp16", dtype="fp8", engine="sglang", network="ethernet-25")
    step = [x.step_time(8, 8 * 1500, 8) for x in (flat, d, slow)]
    assert step[0] < step[1] < step[2]
    assert build_deployment("deepseek-v3", "8xh200:tp8", dtype="fp8", engine="sglang").network == ""


def test_within_one_node_the_network_plays_no_part():
    """Every deployment on at most one node's devices costs the same whatever network is named."""
    for cfg in ("8xh100-sxm:tp8", "8xh100-sxm:tp4,pp2", "2xl40s:tp2", "h200"):
        a, b = (build_deployment("llama-3.1-70b", cfg, dtype="fp8", network=n) for n in ("ib-ndr400", "ethernet-25"))
        assert (a._comm_step, a._comm_tok, a.network) == (b._comm_step, b._comm_tok, "")


def test_one_device_a_node_pays_the_network_alone(tmp_path):
    """A hardware file with node_devices 1: a TP2 pair spans two nodes and pays four one-way network latencies, no
    start-up within a node."""
    from infermeter.perfmodel.hardware import get_network

    f = tmp_path / "one.yaml"
    f.write_text("h100-sxm: {interconnect: {node_devices: 1}}\n")
    d = build_deployment("llama-3.1-8b", "2xh100-sxm:tp2", hardware_file=str(f))
    assert d.network == "ib-ndr400"
    assert d._comm_step == pytest.approx(2 * d.spec.layers * 4 * get_network("ib-ndr400").latency_us * 1e-6)


def test_pipeline_stages_on_other_nodes_hop_over_the_network():
    """TP4 x PP8 on 8-GPU nodes fills four nodes: three of the seven stage boundaries cross the network (its latency,
    the group's four NICs), four stay on NVLink; the all-reduces stay within a node."""
    from infermeter.perfmodel.hardware import get_network

    d = build_deployment("llama-3.1-405b", "32xh100-sxm:tp4,pp8", dtype="fp8")
    ic, net, L, h = d.hw.interconnect, get_network("ib-ndr400"), d.spec.layers, d.spec.hidden
    assert d.network == "ib-ndr400"
    assert d._comm_step == pytest.approx(2 * L * ic.allreduce_latency_us(4) * 1e-6 + (4 * ic.latency_us + 3 * net.latency_us) * 1e-6)
    link, nic = ic.per_direction_bytes_per_s * 0.8, net.bandwidth_gbs * 1e9 * 0.8
    assert d._comm_tok == pytest.approx(2 * L * 2 * 3 / 4 * h * 2 / link + 4 * h * 2 / link + 3 * h * 2 / (nic * 4))
    within = build_deployment("llama-3.1-70b", "8xh100-sxm:tp4,pp2", dtype="fp8")
    assert within.network == "" and within._comm_step == pytest.approx(2 * within.spec.layers * ic.allreduce_latency_us(4) * 1e-6
                                                                       + ic.latency_us * 1e-6)


def test_a_network_that_is_not_in_the_catalog_is_refused_by_name():
    from infermeter.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown network 'ib-xdr'; known: ib-ndr400"):
        build_deployment("llama-3.1-8b", "h100-sxm", network="ib-xdr")


@pytest.mark.parametrize(("link", "message"), [
    ("cross_domain_factor: 1.5", "interconnect.cross_domain_factor' must be within 0..1"),
    ("nccl_latency_us: 0", "custom_allreduce_max' needs 'interconnect.nccl_latency_us'"),
    ("custom_allreduce_max: 2.5", "custom_allreduce_max' must be a whole number >= 0, got 2.5"),
    ("node_devices: 0", "node_devices' must be at least 1"),
    ("node_devices: 4.5", "node_devices' must be a whole number >= 0, got 4.5"),
])
def test_a_bad_interconnect_field_is_refused(tmp_path, link, message):
    from infermeter.errors import ConfigError

    f = tmp_path / "bad.yaml"
    f.write_text(f"l40s: {{interconnect: {{{link}}}}}\n")
    with pytest.raises(ConfigError, match=message):
        build_deployment("llama-3.1-8b", "l40s", hardware_file=str(f))


def _decode_kv_seconds(d: Deployment, kv_tokens: int) -> float:
    """Seconds decode attention spends reading ``kv_tokens`` cached tokens (its memory side)."""
    return d._kv_read * kv_tokens


def test_old_tensorrt_llm_reads_gqa_kv_per_query_head():
    """TensorRT-LLM before v0.8 (no XQA): each query head reads its K/V, so a GQA model's cache traffic is not the grouped one."""
    mistral_new = build_deployment("mistral-7b", "h100-sxm", dtype="fp16", engine="trtllm@0.12")
    mistral_old = build_deployment("mistral-7b", "h100-sxm", dtype="fp16", engine="trtllm@0.6.1")
    mha_old = build_deployment("llama-2-7b", "h100-sxm", dtype="fp16", engine="trtllm@0.6.1")
    assert engine_of(mistral_old).gqa_kv_reads == "per_query_head" and engine_of(mistral_new).gqa_kv_reads == "grouped"
    ctx = 64 * 2048
    grouped, old, mha = (_decode_kv_seconds(d, ctx) / d.mbu for d in (mistral_new, mistral_old, mha_old))  # at equal bandwidth
    assert grouped < old < mha  # the fitted share of re-reads reaching DRAM lies between none and all
    # every re-read from DRAM (kv_reread 1): the GQA model reads as much as an MHA model of its shape, no faster
    all_dram = build_deployment("mistral-7b", "h100-sxm", dtype="fp16", engine="trtllm@0.6.1",
                                calibration=_with_generation("trtllm<0.8", kv_reread=1.0))
    assert _decode_kv_seconds(all_dram, ctx) / all_dram.mbu == pytest.approx(mha, rel=1e-9)
    step_old = all_dram.step_time(64, ctx, 64)
    assert step_old >= mha_old.with_values(mfu=all_dram.mfu, mbu=all_dram.mbu, step_overhead_ms=all_dram.step_overhead_ms,
                                           layer_overhead_us=all_dram.layer_overhead_us, kv_reread=0.0,
                                           request_overhead_ms=all_dram.request_overhead_s * 1e3,
                                           seq_overhead_us=all_dram.seq_overhead_us).step_time(64, ctx, 64)
    # a grouped release of the same model is faster at this batch and context
    assert mistral_new.step_time(64, ctx, 64) < mistral_old.step_time(64, ctx, 64)


def _with_generation(gen_id: str, **fields: object) -> Calibration:
    """The shipped table with generation ``gen_id``'s fields changed and its fitted kv_reread entry removed."""
    cal = load_calibration()
    gens = tuple(replace(g, fields=tuple({**dict(g.fields), **fields}.items())) if g.id == gen_id else g for g in cal.generations)
    entries = tuple(e for e in cal.entries if not (e.engine == gen_id and e.phase == "kv_reread"))
    return replace(cal, entries=entries, generations=gens)


def test_the_request_floor_is_fitted_only_on_rows_that_measure_it(corpus):
    """TTFTs and small static-batch latencies identify the per-request cost; llama-bench rates do not contain it."""
    from infermeter.perfmodel.fit import _request_floor, fit

    cal = fit(corpus)
    eng = {e.name: e for e in cal.engines}
    assert eng["llamacpp"].request_overhead_prior_ms is None  # no llama.cpp row measures it: the prior stands
    assert eng["trtllm"].request_overhead_prior_ms is not None and "nim70-c1-ttft" in eng["trtllm"].source
    assert "tr8-h100-128" not in eng["trtllm"].source  # a saturated throughput says nothing of it
    by_id = {r.id: r for r in corpus}
    assert _request_floor(by_id["trt05-h100-7b-128"]) and _request_floor(by_id["mi300x-oci24-405b-lat-bs1"])
    assert not _request_floor(by_id["lcpp-h100pcie-8b-f16-pp512"]) and not _request_floor(by_id["mi300x-oci24-405b-lat-bs256"])
    # the floor is paid before the first token: a TTFT moves with it one for one
    d = build_deployment("llama-3.1-8b", "h100-sxm", dtype="fp8", engine="trtllm")
    from infermeter.perfmodel.serving import at_concurrency

    slow = d.with_values(mfu=d.mfu, mbu=d.mbu, step_overhead_ms=d.step_overhead_ms, layer_overhead_us=d.layer_overhead_us,
                         kv_reread=d.kv_reread, request_overhead_ms=d.request_overhead_s * 1e3 + 300, seq_overhead_us=d.seq_overhead_us)
    assert at_concurrency(slow, 128, 64, 1).ttft_s - at_concurrency(d, 128, 64, 1).ttft_s == pytest.approx(0.3, rel=1e-6)


def test_vllm_v0_pays_per_sequence_and_per_tp_worker_each_step():
    """vLLM V0 sends every scheduled sequence's input to the other TP workers each step (V1 sends diffs), and its engine
    loop does Python work per sequence: both grow with the batch; V1 and TP1 pay no broadcast."""
    v0_tp4 = build_deployment("llama-3-8b", "4xh100-sxm:tp4", dtype="fp16", engine="vllm@0.5")
    v1_tp4 = build_deployment("llama-3-8b", "4xh100-sxm:tp4", dtype="fp16", engine="vllm@0.11.0")
    v0_tp1 = build_deployment("llama-3-8b", "h100-sxm", dtype="fp16", engine="vllm@0.5")
    assert v0_tp4.tp_seq_overhead_us > 0 and v1_tp4.tp_seq_overhead_us == 0
    assert v0_tp4._oh_seq == pytest.approx((v0_tp4.seq_overhead_us + v0_tp4.tp_seq_overhead_us) * 1e-6)
    assert v0_tp1._oh_seq == pytest.approx(v0_tp1.seq_overhead_us * 1e-6)  # one worker: nothing to send
    assert v0_tp1.seq_overhead_us > v1_tp4.seq_overhead_us
    grow = [v0_tp4.step_time(n, n * 1500, n) - v1_tp4.step_time(n, n * 1500, n) for n in (1, 64)]
    assert grow[1] - grow[0] == pytest.approx(63 * (v0_tp4._oh_seq - v1_tp4._oh_seq), rel=1e-6)  # per sequence, additive
    assert grow[1] - grow[0] > 0.002  # 63 more sequences cost V0 at TP4 milliseconds a step
    # a fit moves the broadcast cost and keeps it at TP > 1 only
    moved = v0_tp4.with_values(mfu=v0_tp4.mfu, mbu=v0_tp4.mbu, step_overhead_ms=v0_tp4.step_overhead_ms, layer_overhead_us=0.0,
                               kv_reread=0.0, request_overhead_ms=1.0, seq_overhead_us=10.0, tp_seq_overhead_us=100.0)
    assert moved._oh_seq == pytest.approx(110e-6)


def test_decode_efficiency_borrows_the_family_at_another_plain_precision():
    """A family with fitted vLLM rows in FP8 only (MI300X until blind set 4's ROCm blog brought BF16 rows: the shipped
    table without its 16-bit CDNA3 decode entries stands in): BF16 decode streams at the family's FP8 share of
    bandwidth, not the cross-vendor HBM pool; a quantised format does not borrow."""
    from infermeter.perfmodel.calibration import dtype_class

    shipped = load_calibration()
    fp8_only = shipped.with_entries(tuple(e for e in shipped.entries if not (
        e.family == "cdna3" and e.phase == "decode" and dtype_class(e.dtype) == "half")))
    fp8 = build_deployment("llama-3.1-70b", "8xmi300x:tp8", dtype="fp8", engine="vllm", calibration=fp8_only)
    bf16 = build_deployment("llama-3.1-70b", "8xmi300x:tp8", dtype="bf16", engine="vllm", calibration=fp8_only)
    assert bf16.calibration_entries[1].family == "cdna3" and dtype_class(bf16.calibration_entries[1].dtype) == "fp8"
    assert bf16.mbu == pytest.approx(fp8.mbu, rel=0.3)
    own = build_deployment("llama-3.1-70b", "8xmi300x:tp8", dtype="bf16", engine="vllm")  # the shipped 16-bit entry
    assert dtype_class(own.calibration_entries[1].dtype) == "half" and own.calibration_entries[1].family == "cdna3"
    h100 = build_deployment("llama-3.1-70b", "4xh100-sxm:tp4", dtype="bf16", engine="vllm")
    assert h100.calibration_entries[1].family == "hopper" and h100.calibration_entries[1].dtype in ("bf16", "half")


def test_equal_lengths_in_a_closed_loop_arrive_in_cohorts_of_the_token_budget():
    """A benchmark's closed loop of equal lengths keeps its users in step: each prompt waits for its cohort's
    ``budget / I`` prompts, and the decodes stall for the other cohorts' prompts only; varied lengths, prompts over the
    budget, or one user break nothing."""
    from infermeter.perfmodel.lengths import Lengths
    from infermeter.perfmodel.serving import at_concurrency

    d = build_deployment("llama-3.1-8b", "a100-80gb")
    budget = engine_of(d).max_batched_tokens
    i = budget // 4  # four prompts a step
    mixed, locked = at_concurrency(d, i, 128, 8), at_concurrency(d, i, 128, 8, lockstep=True)
    assert locked.ttft_s > 2 * mixed.ttft_s  # four prompts' prefill, not one
    assert locked.tpot_s < mixed.tpot_s  # a cohort's own prompts are in its first token, not in its decodes
    ctx = i + 128 / 2
    alone = at_concurrency(d, i, 128, 4, lockstep=True)  # one cohort: nothing stalls its decodes
    assert alone.tpot_s == pytest.approx(d.step_time(4, int(4 * ctx), 4), rel=1e-9)
    finite = at_concurrency(d, i, 128, 8, lockstep=True, requests=16)
    assert finite.ttft_s > locked.ttft_s  # the first wave's second cohort waited for the first
    # per replica: two replicas of 8 users and 16 requests each wait as one replica of 8 users and 16 requests
    two = build_deployment("llama-3.1-8b", "2xa100-80gb:tp1")
    assert at_concurrency(two, i, 128, 16, lockstep=True, requests=32).ttft_s == pytest.approx(finite.ttft_s, rel=1e-9)
    # fewer requests than users: only they send, one cohort's worth here, and the first wave waits for no other
    assert at_concurrency(d, i, 128, 8, lockstep=True, requests=4).ttft_s == pytest.approx(locked.ttft_s, rel=1e-9)
    # a prompt over one step's budget but under two: a cohort is that one step's worth (g > 1 is not whole)
    mid = int(budget * 0.6)
    assert at_concurrency(d, mid, 128, 8, lockstep=True).ttft_s > 1.3 * at_concurrency(d, mid, 128, 8).ttft_s
    assert at_concurrency(d, i, 128, 1, lockstep=True).ttft_s == at_concurrency(d, i, 128, 1).ttft_s
    long = 2 * budget
    assert at_concurrency(d, long, 128, 8, lockstep=True).ttft_s == at_concurrency(d, long, 128, 8).ttft_s
    varied = Lengths.of("sharegpt", i, 128)
    assert at_concurrency(d, i, 128, 8, varied, lockstep=True).ttft_s == at_concurrency(d, i, 128, 8, varied).ttft_s


def test_plan_says_what_a_benchmark_of_equal_lengths_would_show():
    """``plan`` keeps the drifting-apart loop in its table (production traffic) and notes the lockstep first token a
    benchmark of the same equal lengths would measure; varied lengths, one user or an open loop get no such note."""
    from infermeter.perfmodel.planner import plan

    p = plan("llama-3.1-8b", "h100-sxm", input_tokens=1024, output_tokens=128, concurrency=16)
    assert p.lockstep_ttft_s is not None and p.lockstep_ttft_s > 1.1 * p.estimate.ttft_s
    assert p.to_json()["lockstep_ttft_ms"] == pytest.approx(p.lockstep_ttft_s * 1e3, abs=1e-3)
    assert any("keeps them in step" in n and f"{p.lockstep_ttft_s * 1e3:,.0f} ms" in n for n in p.notes())
    for other in (plan("llama-3.1-8b", "h100-sxm", input_tokens=1024, output_tokens=128, concurrency=16, lengths="uniform"),
                  plan("llama-3.1-8b", "h100-sxm", input_tokens=1024, output_tokens=128, concurrency=1),
                  plan("llama-3.1-8b", "h100-sxm", input_tokens=1024, output_tokens=128, rate=2.0)):
        assert other.lockstep_ttft_s is None and "lockstep_ttft_ms" not in other.to_json()
        assert not any("keeps them in step" in n for n in other.notes())
