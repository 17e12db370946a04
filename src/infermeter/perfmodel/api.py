"""The performance model's public API: a :class:`Deployment` and its step-time function.

Promises: :func:`build_deployment` resolves model, hardware, precision, engine and calibration
into a frozen :class:`Deployment` (one model replica on ``tp x pp`` devices) whose
:meth:`~Deployment.step_time` costs a few microseconds of pure float arithmetic, so the digital
twin can call it for every engine iteration::

    >>> d = build_deployment("llama-3.1-8b", "h100-sxm", dtype="bf16")
    >>> d.fits, d.kv_bytes_per_token
    (True, 131072)
    >>> t = d.step_time(new_tokens=64, kv_tokens=64 * 1000, num_seqs=64)   # one decode step, 64 seqs
    >>> 0.005 < t < 0.05
    True

Step time (per engine iteration, latency through all pipeline stages)::

    t = smax(F_lin / (P_c * MFU), B_w / (BW * MBU) + T * kvb / (BW * MBU))      linear layers + lm_head
      + smax(L (f_p A + (f_d - f_p) min(A, K)) / t_p / (P_16 * MFU), (r K * kvb + s_b L H/tp T K) / (BW * MBU))   attention
      + 2 L (alpha_tp + 2 (tp-1)/tp * T d 2 B / (bw_link * x_tp))                 TP all-reduces
        (alpha_tp: the link's all-reduce latency, NCCL's on more than two PCIe GPUs: Interconnect.allreduce_latency_us)
        (a TP group over more than one node, tp > node_devices: NCCL's start-up over one node plus 4 one-way network
        latencies, Interconnect.internode_allreduce_latency_us, and bw_link no faster than a node's NICs together)
      + (pp-1) (alpha_link + T d 2 B / bw_link)                                   PP stage transfers
        (the nodes - 1 boundaries between nodes: the network's latency and tp NICs instead)
      + step_overhead + L * layer_overhead + seq_overhead * n                     engine CPU/launch cost
        (an eager run of an engine with graphs pays its L * layer_overhead on steps of T <= 512 only: larger
        steps run without graphs either way, steptime.GRAPH_MAX_TOKENS)
      + L_moe * moe_layer_overhead                                                MoE routing/permutation/launches
      + L_moe * E (1 - (1 - k/E)^T) * moe_expert                                  per touched expert: its padded tile
      + [T > 32] (B_w + B_16) / (BW * MBU)                                        llama.cpp GGUF dequantisation

with T new tokens, K context tokens, A attention (query, key) pairs, ``f_p`` and ``f_d`` the FLOPs a pair costs
(``4 H d_h`` both, but MLA prefills in the per-head form, ``2 H (d_qk + d_v)``, and decodes in the absorbed one,
``2 H (2 r + d_rope)``, 3.4x more on DeepSeek-V3: ``ModelSpec.prefill_pair_flops``; the decode form is charged on at
most one query per cached token, ``min(A, K)``), n sequences, ``smax`` the
smooth maximum (x^k + y^k)^(1/k) of the calibration, F_lin = 2 (L N_layer_active T + V d n) / tp,
the routed experts' share of it (``L_moe k N_expert T``) at ``MFU * moe_gemm`` (grouped GEMMs, MoE models only),
``E (1 - (1 - k/E)^T)`` the experts (of ``E``, ``k`` a token) a step of T tokens routes to, each costing ``moe_expert``
per MoE layer whatever its width (the fused-MoE kernels pad every routed-to expert's token list to a whole GEMM tile,
vLLM's ``moe_align_block_size``: ``topk_ids.numel() + num_experts * (block_size - 1)`` padded rows; a fixed cost per
expert shard is a streaming efficiency ``n / (n + n0)`` in the shard width n = intermediate/tp: DeepSeek-V3 2048/8,
Qwen3-235B 1536/8 pay it where Mixtral's 14336/2 does not),
``kvb`` the KV bytes per token on one GPU (split over TP, heads or MLA's latent replicated; with ``attention_dp`` the
whole token's over ``tp``, and the attention weights whole in ``B_w``: :mod:`perfmodel.memory`),
``r`` the K/V reads per unique byte (1, or ``1 + kv_reread (H/H_kv - 1)`` for engine generations
whose decode attention is not group-aware), ``x_tp`` the interconnect's ``cross_domain_factor`` when
``tp`` exceeds its ``p2p_domain`` (PCIe boxes: a ring over more than 4 GPUs crosses the CPU sockets), else 1, ``s_b`` the engine's ``score_bytes`` (DRAM bytes per
attention score an engine without flash attention materialises: llama.cpp's F32 KQ over the step's
tokens x all cached cells; 0 for fused attention). An engine with ``ubatch_tokens`` U (llama.cpp's
n_ubatch 512) runs a step of T > U tokens as ``ceil(T/U)`` equal passes, each with the whole formula
(weights, dequantisation and overheads again) at the cache it has reached. Efficiencies and engine costs come from the
calibration (the shipped table, or a per-deployment file overlaid on it); ``engine`` may name a
version (``trtllm@0.6.1``). :meth:`Deployment.with_values` rescales a built replica to other
calibrated values (the fit's fast path).
llama.cpp on a GPU runs a batch of more than 32 tokens over quantised (GGUF) weights as a
separate dequantisation kernel (read the B_w quantised bytes, write B_16 = 2 bytes a weight)
followed by the FP16 cuBLAS GEMM (ggml-cuda with tensor cores: MMQ only up to
``MMQ_MAX_BATCH_SIZE`` 32), so its prompt rate takes the FP16 prefill efficiency
(``prefill_dtype`` ``fp16``) plus that pass.
For pure decode A = K, so a step is ``C0(n) + D K``; :meth:`decode_span` and
:meth:`steps_within` use that closed form. With ``pp > 1`` up to ``pipeline_depth`` micro-batches
are in flight (vLLM's virtual engines): a twin may run that many batches concurrently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.calibration import Calibration, Entry, load_calibration
from infermeter.perfmodel.configspec import HardwareConfig, parse_config
from infermeter.perfmodel.engines import EngineDefaults, hardware_limits, version_key
from infermeter.perfmodel.hardware import DEFAULT_NETWORK, Hardware, get_hardware, get_network
from infermeter.perfmodel.memory import (MemoryPlan, attention_dp_extra_bytes, embed_bytes_per_param, kv_elements_per_token_gpu,
                                         layer_bytes_per_gpu, plan_memory, routed_expert_bytes_per_gpu)
from infermeter.perfmodel.models import ModelSpec, get_model
from infermeter.perfmodel.precision import GGUF_TYPES, Precision, resolve_precision
from infermeter.perfmodel.steptime import DEQUANT_MIN_TOKENS, GRAPH_MAX_TOKENS, StepCost

LINK_EFFICIENCY = 0.8  # achieved fraction of per-direction link bandwidth in collectives (NCCL bus bandwidth)
ACT_BYTES = 2  # activations exchanged in 16-bit


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model replica on ``config.tp * config.pp`` devices, ready to time engine steps."""

    model_name: str
    hardware: str
    config: HardwareConfig
    dtype: str
    kv_dtype: str
    engine: str
    fits: bool
    weights_gib_per_gpu: float
    kv_capacity_tokens: int  # per replica
    kv_bytes_per_token: int  # whole model, all layers
    max_model_len: int
    pipeline_depth: int
    mfu: float
    mbu: float
    why_not: str
    notes: tuple[str, ...]
    spec: ModelSpec = field(repr=False)
    hw: Hardware = field(repr=False)
    precision: Precision = field(repr=False)
    memory: MemoryPlan = field(repr=False)
    calibration_sources: tuple[str, str] = field(repr=False, default=("", ""))
    engine_defaults: EngineDefaults | None = field(repr=False, default=None)  # the (versioned) engine's limits and costs
    calibration_entries: tuple[Entry | None, ...] = field(repr=False, default=())  # prefill, decode, step/layer overhead, kv_reread, seq/tp-seq overhead, MoE layer overhead, MoE GEMM, MoE expert, frontend
    kv_reread_factor: float = field(repr=False, default=1.0)  # decode K/V reads per unique byte (old non-GQA-aware kernels)
    step_overhead_ms: float = field(repr=False, default=0.0)  # fixed part of the per-step engine cost
    layer_overhead_us: float = field(repr=False, default=0.0)  # per-layer part (kernel launches)
    enforce_eager: bool = field(repr=False, default=False)  # run without graphs: layer_overhead on steps a graph would cover
    network: str = field(repr=False, default="")  # the network between nodes (data/networks.yaml) when tp x pp spans nodes
    kv_reread: float = field(repr=False, default=0.0)  # fraction of per-query-head re-reads reaching DRAM
    gqa_group: float = field(repr=False, default=1.0)  # query heads per K/V read when the kernel is not group-aware
    seq_overhead_us: float = field(repr=False, default=0.0)  # engine cost per running sequence and step
    tp_seq_overhead_us: float = field(repr=False, default=0.0)  # per running sequence and step at TP > 1 (vLLM V0's broadcast)
    prefill_dtype: str = field(repr=False, default="")  # dtype whose prefill efficiency applies ("" = the weight dtype)
    moe_layer_overhead_us: float = field(repr=False, default=0.0)  # per MoE layer and step: routing, permutation, grouped-GEMM launches
    moe_gemm: float = field(repr=False, default=1.0)  # share of the dense GEMM efficiency the routed experts' grouped GEMMs reach
    moe_expert_us: float = field(repr=False, default=0.0)  # per touched expert shard per MoE layer and step (padded tile)
    decode_dtype: str = field(repr=False, default="")  # dtype whose decode efficiency applies ("" = the weight dtype)
    # step-time coefficients (seconds per unit)
    _lin_tok: float = field(repr=False, default=0.0)
    _lin_seq: float = field(repr=False, default=0.0)
    _lin_exp: float = field(repr=False, default=0.0)  # the routed experts' part of _lin_tok (at efficiency mfu * moe_gemm)
    _w_dense: float = field(repr=False, default=0.0)
    _w_expert: float = field(repr=False, default=0.0)
    _moe_miss: float = field(repr=False, default=0.0)  # 1 - experts_per_token/experts (0: dense)
    _expert_lat: float = field(repr=False, default=0.0)  # seconds of moe_expert with every expert touched (L_moe E moe_expert)
    _kv_write: float = field(repr=False, default=0.0)
    _att_pair: float = field(repr=False, default=0.0)
    _att_dec: float = field(repr=False, default=0.0)  # extra per decode pair: MLA's absorbed form over its prefill form
    _kv_read: float = field(repr=False, default=0.0)
    _comm_step: float = field(repr=False, default=0.0)
    _comm_tok: float = field(repr=False, default=0.0)
    _oh_step: float = field(repr=False, default=0.0)
    _oh_seq: float = field(repr=False, default=0.0)
    _oh_launch: float = field(repr=False, default=0.0)  # an eager run's launches: layers x layer_overhead, steps a graph would cover
    _dequant: float = field(repr=False, default=0.0)  # seconds of a dequantisation pass (steps of > DEQUANT_MIN_TOKENS tokens)
    _k: float = field(repr=False, default=2.0)
    _score: float = field(repr=False, default=0.0)  # seconds per attention score element in DRAM (engines without flash attention)
    _ubatch: int = field(repr=False, default=0)  # micro-batch tokens: a longer step re-reads the weights per micro-batch (0: one pass)
    request_overhead_s: float = field(repr=False, default=0.0)  # once per request, before its first token
    frontend_ms: float = field(repr=False, default=0.0)  # the engine's serial per-request server work (calibrated value)
    harmony_chat: bool = field(repr=False, default=False)  # chat rendered by openai-harmony (gpt-oss), not a Jinja2 template
    _cost: StepCost = field(init=False, repr=False, compare=False)  # the arithmetic (perfmodel.steptime)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cost", self._step_cost())

    def _step_cost(self) -> StepCost:
        return StepCost(lin_tok=self._lin_tok, lin_seq=self._lin_seq, w_dense=self._w_dense, w_expert=self._w_expert,
                        moe_miss=self._moe_miss, kv_write=self._kv_write, att_pair=self._att_pair, kv_read=self._kv_read,
                        comm_step=self._comm_step, comm_tok=self._comm_tok, oh_step=self._oh_step, oh_seq=self._oh_seq,
                        dequant=self._dequant, k=self._k, score=self._score, ubatch=self._ubatch,
                        expert_lat=self._expert_lat, att_dec=self._att_dec, oh_launch=self._oh_launch)

    @property
    def step_cost(self) -> StepCost:
        """This replica's step-time arithmetic (:mod:`infermeter.perfmodel.steptime`): what the twin's engines call."""
        return self._cost

    @property
    def frontend_s(self) -> float:
        """Seconds of serial API-server work per request: ``frontend_ms``, or 0 where openai-harmony renders the chat."""
        return 0.0 if self.harmony_chat else self.frontend_ms * 1e-3

    @property
    def step_overhead_s(self) -> float:
        """The engine's fixed cost of every step (seconds): the step overhead plus layers x the layer overhead of an engine
        without graphs (an eager run's launches are paid on top by the steps a graph would have covered: ``step_time``)."""
        return self._oh_step

    def with_values(self, *, mfu: float, mbu: float, step_overhead_ms: float, layer_overhead_us: float, kv_reread: float,
                    request_overhead_ms: float, seq_overhead_us: float, tp_seq_overhead_us: float | None = None,
                    moe_layer_overhead_us: float | None = None, moe_gemm: float | None = None,
                    moe_expert_us: float | None = None, frontend_ms: float | None = None) -> Deployment:
        """The same replica with other calibrated values (what a fit tries; memory and shapes unchanged)."""
        c, b = self.mfu / mfu, self.mbu / mbu
        f_old, f_new = self.kv_reread_factor, 1.0 + kv_reread * (self.gqa_group - 1.0)
        eng = self.engine_defaults
        tp_seq = self.tp_seq_overhead_us if tp_seq_overhead_us is None else tp_seq_overhead_us
        moe_us = self.moe_layer_overhead_us if moe_layer_overhead_us is None else moe_layer_overhead_us
        g = self.moe_gemm if moe_gemm is None else moe_gemm
        me = self.moe_expert_us if moe_expert_us is None else moe_expert_us
        fe = self.frontend_ms if frontend_ms is None else frontend_ms
        lin_exp = self._lin_exp * c * self.moe_gemm / g
        if eng is not None and eng.request_overhead_ms != request_overhead_ms:
            eng = replace(eng, request_overhead_ms=request_overhead_ms)
        changed: dict[str, Any] = dict(
            mfu=mfu, mbu=mbu, step_overhead_ms=step_overhead_ms, layer_overhead_us=layer_overhead_us, kv_reread=kv_reread,
            seq_overhead_us=seq_overhead_us, tp_seq_overhead_us=tp_seq, moe_layer_overhead_us=moe_us, moe_gemm=g, _lin_exp=lin_exp,
            moe_expert_us=me, _expert_lat=self.spec.moe_layers * self.spec.experts * me * 1e-6 if self.spec.is_moe else 0.0,
            _oh_seq=(seq_overhead_us + (tp_seq if self.config.tp > 1 else 0.0)) * 1e-6, kv_reread_factor=f_new, engine_defaults=eng,
            _lin_tok=(self._lin_tok - self._lin_exp) * c + lin_exp, _lin_seq=self._lin_seq * c, _att_pair=self._att_pair * c,
            _att_dec=self._att_dec * c,
            _w_dense=self._w_dense * b, _w_expert=self._w_expert * b, _kv_write=self._kv_write * b, _dequant=self._dequant * b,
            _score=self._score * b,
            _kv_read=self._kv_read * b * f_new / f_old,
            **_overheads(self.spec, step_overhead_ms, layer_overhead_us, moe_us, self.enforce_eager),
            request_overhead_s=request_overhead_ms * 1e-3, frontend_ms=fe)
        new = object.__new__(Deployment)  # a field-by-field copy: dataclasses.replace re-validates ~50 fields and dominates a fit
        for name in _FIELD_NAMES:
            object.__setattr__(new, name, changed[name] if name in changed else getattr(self, name))
        object.__setattr__(new, "_cost", new._step_cost())  # from the new coefficients
        return new

    def weight_time(self, new_tokens: int) -> float:
        """Seconds to stream the weights one step touches (all experts a batch of ``new_tokens`` routes to)."""
        return self._cost.weight_time(new_tokens)

    def step_time(self, new_tokens: int, kv_tokens: int, num_seqs: int, attn_pairs: float | None = None) -> float:
        """Seconds for one engine iteration of this replica.

        ``new_tokens``: tokens computed this step (prefill-chunk tokens + 1 per decoding sequence);
        ``kv_tokens``: context tokens attention reads over all sequences (including this step's);
        ``num_seqs``: sequences in the batch; ``attn_pairs``: sum over sequences of query tokens x
        context length (None: from the averages, exact for pure decode and single prefills).
        """
        return self._cost.step_time(new_tokens, kv_tokens, num_seqs, attn_pairs)

    def breakdown(self, new_tokens: int, kv_tokens: int, num_seqs: int, attn_pairs: float | None = None) -> dict[str, float]:
        """Unsmoothed seconds of one step by cause: compute, memory, communication, overhead."""
        if attn_pairs is None:
            attn_pairs = new_tokens * (kv_tokens / max(num_seqs, 1) - 0.5 * new_tokens / max(num_seqs, 1) + 0.5)
        return {
            "compute": self._lin_tok * new_tokens + self._lin_seq * num_seqs + self._att_pair * attn_pairs
            + self._att_dec * min(attn_pairs, kv_tokens),
            "memory": self.weight_time(new_tokens) + self._kv_write * new_tokens + self._kv_read * kv_tokens
            + self._score * new_tokens * kv_tokens
            + (self._dequant if new_tokens > DEQUANT_MIN_TOKENS else 0.0),
            "communication": self._comm_step + self._comm_tok * new_tokens,
            "overhead": self._oh_step + self._oh_seq * num_seqs + self._cost.expert_time(new_tokens)
            + self._cost.launch_time(new_tokens),
        }

    def decode_span(self, num_seqs: int, kv_tokens: int, steps: int) -> float:
        """Seconds for ``steps`` pure-decode steps of ``num_seqs`` sequences, context growing by ``num_seqs`` a step."""
        return self._cost.decode_span(num_seqs, kv_tokens, steps)

    def steps_within(self, num_seqs: int, kv_tokens: int, budget_s: float) -> int:
        """Largest number of pure-decode steps whose :meth:`decode_span` is <= ``budget_s``."""
        return self._cost.steps_within(num_seqs, kv_tokens, budget_s)

    def prefill_time(self, input_tokens: int, chunk_tokens: int | None = None) -> float:
        """Seconds to prefill one ``input_tokens`` prompt alone, in chunks of ``chunk_tokens``."""
        chunk = chunk_tokens or input_tokens
        t, done = 0.0, 0
        while done < input_tokens:
            c = min(chunk, input_tokens - done)
            t += self.step_time(c, done + c, 1, attn_pairs=c * (done + (c + 1) / 2))
            done += c
        return t


_FIELD_NAMES = tuple(Deployment.__dataclass_fields__)


def _overheads(spec: ModelSpec, step_ms: float, layer_us: float, moe_us: float, eager: bool) -> dict[str, float]:
    """The engine's fixed step costs (seconds): ``_oh_step`` on every step (the step overhead, the MoE layers' and,
    unless the run is eager, the per-layer launches a graph-less engine pays on every step) and ``_oh_launch``, an eager
    run's launches, paid only by the steps a graph would have covered (``StepCost.launch_time``)."""
    launches = spec.layers * layer_us * 1e-6
    return {"_oh_step": step_ms * 1e-3 + (0.0 if eager else launches) + spec.moe_layers * moe_us * 1e-6,
            "_oh_launch": launches if eager else 0.0}


def engine_on(hardware: str | Hardware, engine: str = "vllm", calibration: Calibration | None = None) -> EngineDefaults:
    """``engine``'s defaults from ``calibration`` (the shipped table by default) on ``hardware`` (a ``--gpu`` string or a
    catalog entry): with the scheduler limits vLLM V1 picks for that device (:func:`engines.hardware_limits`; none on a
    CPU). ConfigError names an unknown device or engine."""
    hw = get_hardware(parse_config(hardware).hardware) if isinstance(hardware, str) else hardware
    eng = (calibration or load_calibration()).engine(engine)
    return eng if hw.type == "cpu" else hardware_limits(eng, hw.memory_bytes, hw.id)


def build_deployment(model: str | ModelSpec, config: str | HardwareConfig = "h100-sxm", *, dtype: str = "bf16",
                     kv_dtype: str | None = None, engine: str = "vllm", gpu_memory_utilization: float = 0.9,
                     max_model_len: int | None = None, hardware_file: str | None = None,
                     calibration: Calibration | str | None = None, max_num_seqs: int | None = None,
                     max_batched_tokens: int | None = None, attention_dp: bool = False, enforce_eager: bool = False,
                     network: str = DEFAULT_NETWORK) -> Deployment:
    """Resolve everything about one replica; ConfigError names the bad input.

    ``engine`` may carry a version (``trtllm@0.6.1``); ``calibration`` is a table or the path of a
    per-deployment calibration file (overlaid on the shipped table); ``max_num_seqs`` and
    ``max_batched_tokens`` override the engine's scheduler limits; ``attention_dp``: attention data parallelism over
    the ``tp`` GPUs (:mod:`perfmodel.memory`: attention weights whole on every GPU, each token's K/V cached and read
    once, on its sequence's GPU; the MLP/expert layers stay tensor-parallel); ``enforce_eager``: the engine runs without
    CUDA/HIP graphs (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``), so every step launches each layer's
    kernels from Python: a ``layer_overhead`` per layer and step (:meth:`EngineDefaults.eager`). An engine with no
    graph mode to turn off is a ConfigError. ``network`` (``data/networks.yaml``) links the nodes when ``tp x pp``
    exceeds one node's devices (the interconnect's ``node_devices``); within a node it plays no part.
    """
    cfg = parse_config(config) if isinstance(config, str) else config
    spec = model if isinstance(model, ModelSpec) else get_model(model)
    hw = get_hardware(cfg.hardware, hardware_file)
    if not 0.05 <= gpu_memory_utilization <= 1.0:
        raise ConfigError(f"gpu_memory_utilization {gpu_memory_utilization!r} must be within 0.05..1.0")
    cal = load_calibration(calibration) if isinstance(calibration, str) else (calibration or load_calibration())
    eng = engine_on(hw, engine, cal)
    for name, v in (("max_num_seqs", max_num_seqs), ("max_batched_tokens", max_batched_tokens)):
        if v is not None and v < 1:
            raise ConfigError(f"{name} {v!r} must be >= 1")
    eng = replace(eng, max_num_seqs=max_num_seqs or eng.max_num_seqs, max_batched_tokens=max_batched_tokens or eng.max_batched_tokens)
    prec = resolve_precision(hw, dtype, kv_dtype, eng.name)
    tp, pp = cfg.tp, cfg.pp
    if pp > spec.layers:
        raise ConfigError(f"hardware configuration {cfg.label!r}: pp{pp} exceeds the model's {spec.layers} layers")
    if tp > 1 and (spec.heads % tp):
        raise ConfigError(f"hardware configuration {cfg.label!r}: tp{tp} does not divide {spec.name}'s {spec.heads} attention heads")
    if (tp > 1 or pp > 1) and hw.interconnect.bandwidth_gbs <= 0:
        raise ConfigError(f"hardware configuration {cfg.label!r}: {hw.id} has no device interconnect for tensor/pipeline parallelism")
    mem = plan_memory(spec, hw, prec, tp=tp, pp=pp, gpu_memory_utilization=gpu_memory_utilization, kv_fraction_of=eng.kv_fraction_of,
                      max_batched_tokens=eng.max_batched_tokens, max_num_seqs=eng.max_num_seqs, attention_dp=attention_dp)
    need = max_model_len or 0
    if max_model_len is not None and max_model_len < 1:
        raise ConfigError(f"max_model_len {max_model_len!r} must be >= 1")
    mml = max_model_len or min(spec.max_context, max(mem.kv_capacity_tokens, 1))
    why = mem.why_not(need or None)
    fam, cls = hw.family, hw.memory_class
    dequant = eng.name == "llamacpp" and hw.type == "gpu" and prec.weight_only and prec.weight_dtype in GGUF_TYPES
    pre_dtype = "fp16" if dequant else prec.weight_dtype  # the GEMM after dequantisation is llama.cpp's FP16 cuBLAS one
    dec_dtype = prec.weight_dtype
    if spec.expert_bits and spec.expert_bits / 8 < prec.bytes_per_weight:
        # routed experts kept in the checkpoint's own 4-bit format (gpt-oss MXFP4): most weight bytes and FLOPs run through
        # the engine's MoE kernels for that format (on GPUs without FP4 units a dequantising W4A16 kernel, vLLM's Marlin
        # on A100), not the dense 16-bit GEMMs: both efficiencies are the format's own, never the dense model's
        pre_dtype = dec_dtype = "mxfp4"
    mfu, mfu_e = cal.efficiency(fam, eng.name, pre_dtype, "prefill", tp, cls)
    mbu, mbu_e = cal.efficiency(fam, eng.name, dec_dtype, "decode", tp, cls)
    if mbu_e.family != fam:  # no decode value of this family at this precision: the family's at another precision
        other = cal.lookup_other_dtype(fam, eng.name, dec_dtype, "decode", tp)
        if other is not None:
            mbu, mbu_e = other
    # a generation's step overhead is its own (its fields give the prior); else the engine's
    oh = cal.lookup(fam, eng.generation or eng.name, "*", "step_overhead", "*", cls)
    step_oh_ms = oh[0] if oh else eng.overhead_ms
    # a generation's own per-sequence cost (vLLM V0's) first, else the engine's
    so = cal.lookup(fam, eng.generation, "*", "seq_overhead", "*", cls) if eng.generation else None
    if so is None or so[1].engine != eng.generation:
        so = cal.lookup(fam, eng.name, "*", "seq_overhead", "*", cls)
    seq_oh_us = so[0] if so else eng.per_seq_us
    # vLLM V0 sends the scheduler's output to every TP worker each step (V1 keeps request state in the workers)
    tso = cal.lookup(fam, eng.generation, "*", "tp_seq_overhead", "*", cls) if eng.tp_seq_us > 0 else None
    tp_seq_us = (tso[0] if tso else eng.tp_seq_us) if eng.tp_seq_us > 0 else 0.0
    # per-layer kernel launches: always for an engine without graphs (llama.cpp), else only when a run is eager, where each
    # decode step launches every layer's kernels from Python instead of replaying one captured graph
    if enforce_eager and eng.eager_layer_us <= 0:
        raise ConfigError(f"enforce_eager (--enforce-eager): engine {eng.spec!r} has no graph capture the model knows to turn "
                          "off (vllm and sglang have)")
    if enforce_eager and hw.type != "gpu":
        raise ConfigError(f"enforce_eager (--enforce-eager): {hw.id} is not a GPU; there are no CUDA/HIP graphs to turn off")
    if enforce_eager and eng.name == "vllm" and (version_key(eng.version) or (1,)) < (0, 2, 6):
        raise ConfigError(f"enforce_eager (--enforce-eager): vLLM {eng.version} predates graph capture and the switch "
                          "(vllm-project/vllm PR #1926, in 0.2.6)")
    eager = eng.eager(enforce_eager)
    # an eager run's launches are fitted per hardware family (CUDA and HIP launch costs differ), llama.cpp's per memory class
    lo = cal.lookup(fam, eng.name, "*", "layer_overhead", "*", cls) if eng.layer_overhead_us > 0 or eager else None
    if eager and lo is not None and lo[1].family != fam:
        lo = None  # another family's eager launches: the engine's prior, not a value fitted on other GPUs
    layer_oh_us = lo[0] if lo else (eng.eager_layer_us if eager else eng.layer_overhead_us)
    group = spec.heads / spec.kv_heads if eng.gqa_kv_reads == "per_query_head" else 1.0
    rr = cal.lookup(fam, eng.generation, "*", "kv_reread", "*", cls) if group > 1 else None
    rr_value = rr[0] if rr else eng.kv_reread
    reread = 1.0 + rr_value * (group - 1.0)
    # MoE layers: a fixed cost per layer and step (routing, permutation, grouped-GEMM launches) and the grouped GEMMs'
    # share of the dense GEMM efficiency, per engine (generation) and hardware family; dense models pay neither
    mo = cal.lookup(fam, eng.generation or eng.name, "*", "moe_layer_overhead", "*", cls) if spec.is_moe else None
    moe_us = (mo[0] if mo else eng.moe_layer_us) if spec.is_moe else 0.0
    # the grouped GEMMs' efficiency and the per-expert tile cost are the MoE kernel's, and experts kept in their own 4-bit
    # format (gpt-oss MXFP4) run another kernel (vLLM's Mxfp4MoEMethod: triton_kernels matmul_ogs on Hopper, Marlin on
    # Ampere; not fused_moe's FP8/BF16 Triton or DeepGEMM paths): such values are fitted and looked up apart (moe_kernel_dtype)
    kdt = moe_kernel_dtype(dec_dtype)
    mg = _moe_lookup(cal, fam, eng.generation or eng.name, kdt, "moe_gemm", cls) if spec.is_moe else None
    moe_g = (mg[0] if mg else eng.moe_gemm) if spec.is_moe else 1.0
    me = _moe_lookup(cal, fam, eng.generation or eng.name, kdt, "moe_expert", cls) if spec.is_moe else None
    moe_e_us = (me[0] if me else eng.moe_expert_us) if spec.is_moe else 0.0
    # the OpenAI server's serial per-request work, per engine; gpt-oss chats are rendered by openai-harmony instead of the
    # Jinja2 chat template and the tokenizer call (vLLM's and SGLang's serving_chat: use_harmony when model_type == "gpt_oss")
    fe = cal.lookup(fam, eng.name, "*", "frontend", "*", cls)
    fe_ms = fe[0] if fe else eng.frontend_ms
    harmony = harmony_chat(spec)

    L, d = spec.layers, spec.hidden
    half = "bf16" if hw.has("bf16") else "fp16"
    p_c = hw.peak_tflops(prec.compute_dtype) * 1e12 * mfu
    p_16 = hw.peak_tflops(half) * 1e12 * mfu
    bw = hw.bandwidth_bytes_per_s * mbu
    adp = attention_dp and tp > 1
    per_layer = layer_bytes_per_gpu(spec, prec, tp) + (attention_dp_extra_bytes(spec, prec, tp) / L if adp else 0.0)
    routed_active = spec.moe_layers * spec.experts_per_token * spec.expert_params if spec.is_moe else 0
    expert_bytes = routed_expert_bytes_per_gpu(spec, prec, tp) if spec.is_moe else 0.0  # all layers
    head_b = spec.head_params * embed_bytes_per_param(prec) / tp
    kvb_path = kv_elements_per_token_gpu(spec, L, tp, adp) * prec.kv_bytes
    ic = hw.interconnect
    link = ic.per_direction_bytes_per_s * LINK_EFFICIENCY
    net = get_network(network)
    nodes = ic.nodes(tp * pp)
    nic = net.per_device_bytes_per_s(ic.node_devices) * LINK_EFFICIENCY
    comm_step = comm_tok = 0.0
    if tp > ic.node_devices:  # one TP group over several nodes: NCCL over the network, one ring (channel) per NIC, so
        # the crossing carries what the node's NICs together carry (a shared NIC: the node's one)
        comm_step += 2 * L * ic.internode_allreduce_latency_us(tp, net) * 1e-6
        comm_tok += 2 * L * 2 * (tp - 1) / tp * d * ACT_BYTES / min(link * ic.allreduce_factor(tp), nic * ic.node_devices)
    elif tp > 1:  # a ring beyond the P2P domain (an 8-GPU PCIe box: both CPU sockets) keeps cross_domain_factor of the bandwidth
        comm_step += 2 * L * ic.allreduce_latency_us(tp) * 1e-6
        comm_tok += 2 * L * 2 * (tp - 1) / tp * d * ACT_BYTES / (link * ic.allreduce_factor(tp))
    if pp > 1:  # stage boundaries between nodes (nodes - 1 of the pp - 1 when a TP group fits one node) cross the network,
        # each of the group's tp ranks sending its share over its own NIC
        cross = min(pp - 1, nodes - 1) if tp <= ic.node_devices else pp - 1
        comm_step += ((pp - 1 - cross) * ic.latency_us + cross * net.latency_us) * 1e-6
        comm_tok += (pp - 1 - cross) * d * ACT_BYTES / link + cross * d * ACT_BYTES / (nic * tp)
    return Deployment(
        model_name=spec.name, hardware=hw.id, config=cfg, dtype=prec.weight_dtype, kv_dtype=prec.kv_dtype, engine=eng.spec,
        fits=not why, weights_gib_per_gpu=mem.weights_gib_per_gpu, kv_capacity_tokens=mem.kv_capacity_tokens,
        kv_bytes_per_token=mem.kv_bytes_per_token, max_model_len=mml, pipeline_depth=pp, mfu=mfu, mbu=mbu, why_not=why,
        notes=prec.notes + (("attention data parallel: attention weights whole on each GPU, K/V cached once per token",) if adp else ())
        + ((f"eager execution (no CUDA/HIP graphs): {L} layers x {layer_oh_us:.0f} us of kernel launches a step of up to {GRAPH_MAX_TOKENS} tokens ("
            + (_fitted_on(lo[1], f"eager {fam}") if lo and lo[1].fitted else
               f"the engine's prior: no eager {eng.name} row on {fam} GPUs") + ")",) if eager else ())
        + ((f"{tp * pp} GPUs span {nodes} nodes of {ic.node_devices}: "
            + (("the tensor-parallel all-reduces" + (" and the pipeline stage boundaries" if pp > 1 else "")) if tp > ic.node_devices
               else "the pipeline stages" if nodes > 2 else "one pipeline stage boundary")
            + f" cross the network between them, {net.id} ({net.name}: {net.bandwidth_gbs:g} GB/s"
            + (" per node" if net.shared_nic else " per GPU") + f", {net.latency_us:g} us one way; set it with --network)",)
           if nodes > 1 else ()),
        spec=spec, hw=hw, precision=prec, memory=mem, calibration_sources=(mfu_e.source, mbu_e.source),
        engine_defaults=eng,
        calibration_entries=(mfu_e, mbu_e, oh[1] if oh else None, lo[1] if lo else None, rr[1] if rr else None, so[1] if so else None,
                             tso[1] if tso else None, mo[1] if mo else None, mg[1] if mg else None, me[1] if me else None,
                             fe[1] if fe else None),
        kv_reread_factor=reread, step_overhead_ms=step_oh_ms, layer_overhead_us=layer_oh_us, kv_reread=rr_value, gqa_group=group,
        seq_overhead_us=seq_oh_us, tp_seq_overhead_us=tp_seq_us, prefill_dtype=pre_dtype,
        moe_layer_overhead_us=moe_us, moe_gemm=moe_g, moe_expert_us=moe_e_us,
        _expert_lat=spec.moe_layers * spec.experts * moe_e_us * 1e-6 if spec.is_moe else 0.0,
        decode_dtype="" if dec_dtype == prec.weight_dtype else dec_dtype,
        _dequant=(L * per_layer + spec.blocks_params / tp * 2.0) / bw if dequant else 0.0,
        _lin_tok=2 * (spec.blocks_active_params - routed_active) / tp / p_c + 2 * routed_active / tp / (p_c * moe_g),
        _lin_exp=2 * routed_active / tp / (p_c * moe_g),
        _lin_seq=2 * spec.head_params / tp / p_16,
        _w_dense=(L * per_layer - expert_bytes + head_b) / bw,
        _w_expert=expert_bytes / bw,
        _moe_miss=(1.0 - spec.experts_per_token / spec.experts) if spec.is_moe else 0.0,
        _kv_write=kvb_path / bw,
        _att_pair=L * spec.prefill_pair_flops / tp / p_16,
        _att_dec=L * (spec.attn_pair_flops - spec.prefill_pair_flops) / tp / p_16,
        _kv_read=kvb_path * reread / bw,
        _comm_step=comm_step, _comm_tok=comm_tok, network=net.id if nodes > 1 else "",
        **_overheads(spec, step_oh_ms, layer_oh_us, moe_us, eager), enforce_eager=eager, _oh_seq=(seq_oh_us + (tp_seq_us if tp > 1 else 0.0)) * 1e-6, _k=cal.smooth,
        _score=eng.score_bytes * L * spec.heads / tp / bw, _ubatch=eng.ubatch_tokens,
        request_overhead_s=eng.request_overhead_ms * 1e-3,
        frontend_ms=fe_ms, harmony_chat=harmony,
    )


def _fitted_on(entry: Entry, what: str) -> str:
    """``fitted on N {what} rows`` for a value the corpus fit produced (its source lists the rows), else ``fitted``."""
    src = entry.source
    return f"fitted on {len(src.removeprefix('fit: rows ').split(', '))} {what} rows" if src.startswith("fit: rows ") else "fitted"


OWN_FORMAT_EXPERTS = ("mxfp4",)  # expert formats whose MoE kernels are their own (not fused_moe's FP8/BF16 paths)


def moe_kernel_dtype(expert_dtype: str) -> str:
    """The dtype key of the MoE kernel terms (``moe_gemm``, ``moe_expert``): the experts' own 4-bit format, else ``*``."""
    return expert_dtype if expert_dtype in OWN_FORMAT_EXPERTS else "*"


def _moe_lookup(cal: Calibration, family: str, engine: str, kernel_dtype: str, phase: str, hw_class: str) -> tuple[float, Entry] | None:
    """A MoE kernel term for ``kernel_dtype``: an own-format kernel takes only its own entries (a ``*`` entry is the
    FP8/BF16 kernels' value, fitted on other models), the others only the ``*`` ones."""
    got = cal.lookup(family, engine, kernel_dtype, phase, "*", hw_class)
    if got is not None and kernel_dtype != "*" and got[1].dtype == "*":
        return None
    return got


def harmony_chat(spec: ModelSpec) -> bool:
    """Whether an OpenAI server renders ``spec``'s chats with openai-harmony (gpt-oss) rather than a Jinja2 chat template.

    vLLM's and SGLang's chat serving take the Harmony path when the checkpoint's ``model_type`` is ``gpt_oss``
    (vllm/entrypoints/openai/serving_chat.py: ``self.use_harmony = model_config.hf_config.model_type == "gpt_oss"``,
    then ``_make_request_with_harmony`` instead of ``_preprocess_chat``): the prompt's token ids come from the Rust
    renderer, with no Jinja2 template and no separate tokenizer call, so the per-request frontend cost is not charged."""
    return spec.hf_id.lower().startswith("openai/gpt-oss") or spec.name.startswith("gpt-oss")
