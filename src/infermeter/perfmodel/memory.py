"""Memory plan of one model replica: weights and KV cache per GPU, KV capacity, fit verdict.

Promises: :func:`plan_memory` returns a frozen :class:`MemoryPlan` for a model on ``tp x pp``
devices. Weights per GPU are those of the fullest pipeline stage (``ceil(layers/pp)`` layers
plus the embedding on the first and the lm_head on the last stage) split over TP, with K/V
projections replicated when ``tp > kv_heads``. KV bytes per token per GPU =
``2 x ceil(layers/pp) x ceil(kv_heads/tp) x head_dim x kv_bytes`` (MLA: the compressed latent,
``ceil(layers/pp) x (kv_lora_rank + qk_rope_head_dim) x kv_bytes``, replicated on every TP rank).
Weights come from the *total* parameters (every expert is resident); routed experts in a
checkpoint's own smaller format (gpt-oss MXFP4) count at its bits. The runtime reserve is a fixed
1 GiB (CUDA context, graphs, NCCL buffers; 0.25 GiB on CPUs) plus the activation peak of one
``max_batched_tokens`` step. KV memory is ``util x memory - weights - reserve`` (vLLM/SGLang:
``util`` of total memory) or ``util x (memory - weights - reserve)`` (TensorRT-LLM, llama.cpp:
fraction of what is left). With attention data parallelism (``attention_dp``: SGLang's
``--enable-dp-attention``, TensorRT-LLM's ``enable_attention_dp``) each of the ``tp`` GPUs runs the
attention of its own sequences with every head: the attention weights are whole on every GPU and a
token's K/V (or MLA latent) is cached once, on its sequence's GPU, so the KV bytes per token per GPU
are the whole model's over ``tp``, never replicated::

    >>> from infermeter.perfmodel.hardware import get_hardware
    >>> from infermeter.perfmodel.models import get_model
    >>> from infermeter.perfmodel.precision import resolve_precision
    >>> hw = get_hardware("h100-sxm"); prec = resolve_precision(hw, "bf16")
    >>> m = plan_memory(get_model("llama-3.1-70b"), hw, prec, tp=1, pp=1)
    >>> m.fits_weights, round(m.weights_gib_per_gpu, 1)
    (False, 131.4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infermeter.perfmodel.hardware import Hardware
from infermeter.perfmodel.models import ModelSpec
from infermeter.perfmodel.precision import GGUF_TYPES, Precision

GIB = 2**30
BLOCK_TOKENS = 16  # paged-KV block size (vLLM default); capacity is rounded down to whole blocks


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    memory_gib_per_gpu: float
    usable_gib_per_gpu: float  # util x memory (the budget the engine may take)
    weights_gib_per_gpu: float
    reserve_gib_per_gpu: float
    kv_gib_per_gpu: float  # memory left for the KV cache (>= 0)
    kv_bytes_per_token: int  # whole model: 2 x layers x kv_heads x head_dim x kv_bytes
    kv_bytes_per_token_per_gpu: int  # on the fullest stage, after TP split / replication
    kv_capacity_tokens: int  # per replica
    fits_weights: bool

    def max_concurrency(self, context_tokens: int) -> int:
        """Sequences of ``context_tokens`` tokens (block-rounded) whose KV fits at once."""
        per_seq = math.ceil(max(context_tokens, 1) / BLOCK_TOKENS) * BLOCK_TOKENS
        return self.kv_capacity_tokens // per_seq

    def why_not(self, context_tokens: int | None = None) -> str:
        """Empty when it fits; else one sentence with the numbers."""
        if not self.fits_weights:
            return (f"weights need {self.weights_gib_per_gpu:.1f} GiB per GPU plus a {self.reserve_gib_per_gpu:.1f} GiB runtime reserve, "
                    f"but only {self.usable_gib_per_gpu:.1f} GiB of {self.memory_gib_per_gpu:.1f} GiB may be used")
        if context_tokens and self.kv_capacity_tokens < context_tokens:
            return (f"the KV cache holds {self.kv_capacity_tokens:,} tokens ({self.kv_gib_per_gpu:.2f} GiB per GPU), "
                    f"fewer than one {context_tokens:,}-token sequence")
        return ""


def embed_bytes_per_param(prec: Precision) -> float:
    """Embedding and lm_head stay 16-bit in AWQ/GPTQ/FP8/INT8 checkpoints; GGUF quantises them too."""
    return prec.bytes_per_weight if prec.weight_dtype in GGUF_TYPES else max(prec.bytes_per_weight, 2.0)


def expert_bytes_per_param(m: ModelSpec, prec: Precision) -> float:
    """Routed experts keep the checkpoint's own format where it is smaller (gpt-oss: MXFP4, 4.25 bits)."""
    return min(prec.bytes_per_weight, m.expert_bits / 8) if m.expert_bits else prec.bytes_per_weight


def routed_expert_bytes_per_gpu(m: ModelSpec, prec: Precision, tp: int) -> float:
    """All routed experts' bytes on one GPU (split over the tp (or expert-parallel) GPUs of a replica)."""
    return m.routed_expert_params / tp * expert_bytes_per_param(m, prec)


def blocks_bytes_per_gpu(m: ModelSpec, prec: Precision, tp: int) -> float:
    """Every decoder layer's bytes on one GPU; K/V projections replicated when ``tp > kv_heads`` (GQA)."""
    kv_proj = kv_proj_gpu = 0
    if not m.is_mla:
        kv_proj = m.layers * 2 * m.hidden * m.kv_heads * m.head_dim
        kv_proj_gpu = m.layers * 2 * m.hidden * math.ceil(m.kv_heads / tp) * m.head_dim
    rest = m.blocks_params - kv_proj - m.routed_expert_params
    return (rest / tp + kv_proj_gpu) * prec.bytes_per_weight + routed_expert_bytes_per_gpu(m, prec, tp)


def attention_dp_extra_bytes(m: ModelSpec, prec: Precision, tp: int) -> float:
    """Bytes per GPU that attention data parallelism adds: every layer's attention weights whole, not split ``tp`` ways."""
    if tp <= 1:
        return 0.0
    kv_proj = kv_proj_gpu = 0
    if not m.is_mla:
        kv_proj = m.layers * 2 * m.hidden * m.kv_heads * m.head_dim
        kv_proj_gpu = m.layers * 2 * m.hidden * math.ceil(m.kv_heads / tp) * m.head_dim
    whole = m.layers * m.attn_params
    return (whole - ((whole - kv_proj) / tp + kv_proj_gpu)) * prec.bytes_per_weight


def kv_elements_per_token_gpu(m: ModelSpec, layers: int, tp: int, attention_dp: bool = False) -> float:
    """Cached elements per token on one GPU: TP-split (replicated heads, MLA's latent on every rank) or, with attention
    data parallelism, the whole token's on one GPU of ``tp`` (the capacity and reads per GPU are the whole model's / tp)."""
    if attention_dp and tp > 1:
        return m.kv_elements_per_token_per_gpu(layers, 1) / tp
    return float(m.kv_elements_per_token_per_gpu(layers, tp))


def layer_bytes_per_gpu(m: ModelSpec, prec: Precision, tp: int) -> float:
    """Mean bytes of one decoder layer on one GPU (dense and MoE layers averaged)."""
    return blocks_bytes_per_gpu(m, prec, tp) / m.layers


def activation_bytes(m: ModelSpec, tp: int, tokens: int, seqs: int) -> float:
    """Peak activations of one step: MLP intermediates, hidden states, fp32 logits of the sampled rows."""
    ff = m.intermediate * m.experts_per_token
    return tokens * (2 * ff / tp + 4 * m.hidden) * 2 + min(seqs, tokens) * m.vocab * 4 / tp


def plan_memory(m: ModelSpec, hw: Hardware, prec: Precision, *, tp: int, pp: int, gpu_memory_utilization: float = 0.9,
                kv_fraction_of: str = "total", max_batched_tokens: int = 8192, max_num_seqs: int = 256,
                attention_dp: bool = False) -> MemoryPlan:
    layers_stage = math.ceil(m.layers / pp)
    per_layer = layer_bytes_per_gpu(m, prec, tp) + (attention_dp_extra_bytes(m, prec, tp) / m.layers if attention_dp else 0.0)
    hb = embed_bytes_per_param(prec)
    embed = m.embed_params * hb / tp
    head = m.head_params * hb / tp
    if pp == 1:
        weights = m.layers * per_layer + embed + (0 if m.tied else head)
    else:
        weights = layers_stage * per_layer + max(embed, head)
    reserve = (0.25 if hw.type == "cpu" else 1.0) * GIB + activation_bytes(m, tp, max_batched_tokens, max_num_seqs)
    total = hw.memory_bytes
    usable = gpu_memory_utilization * total
    if kv_fraction_of == "free":
        kv_mem = gpu_memory_utilization * (total - weights - reserve)
        fits = weights + reserve < total
    else:
        kv_mem = usable - weights - reserve
        fits = weights + reserve < usable
    kv_mem = max(kv_mem, 0.0)
    kvb_gpu = max(1, int(kv_elements_per_token_gpu(m, layers_stage, tp, attention_dp) * prec.kv_bytes))
    capacity = int(kv_mem // kvb_gpu) // BLOCK_TOKENS * BLOCK_TOKENS if fits else 0
    return MemoryPlan(
        memory_gib_per_gpu=total / GIB, usable_gib_per_gpu=usable / GIB, weights_gib_per_gpu=weights / GIB,
        reserve_gib_per_gpu=reserve / GIB, kv_gib_per_gpu=kv_mem / GIB if fits else 0.0,
        kv_bytes_per_token=int(m.kv_elements_per_token() * prec.kv_bytes), kv_bytes_per_token_per_gpu=kvb_gpu,
        kv_capacity_tokens=capacity, fits_weights=fits,
    )
