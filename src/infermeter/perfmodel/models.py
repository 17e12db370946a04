"""Model catalog and exact parameter counts from the architecture.

Promises: :func:`get_model` returns a frozen :class:`ModelSpec` for a catalog id (or alias, or
Hugging Face id) from ``data/models.yaml``, or for a local Hugging Face ``config.json`` (a file
path or a directory holding one). Counts follow the architecture exactly: GQA K/V projections of
``kv_heads x head_dim``, gated (SwiGLU, 3 matrices) or plain MLPs with the real
``intermediate`` size, biases, norms, tied or untied embeddings, MoE experts (total vs active)::

    >>> m = get_model("llama-3.1-8b")
    >>> m.total_params, m.streamed_params
    (8030261248, 7504924672)

``streamed_params`` are the weights a decode step reads: every layer plus the lm_head, but not
the input embedding table (only gathered), except when tied (then the table *is* the lm_head).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import DATA_DIR


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shape; every count below is derived, none stored."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = False
    gated_mlp: bool = True
    qkv_bias: bool = False
    bias: bool = False
    norm: str = "rms"
    experts: int = 1
    experts_per_token: int = 1
    learned_positions: int = 0
    max_context: int = 4096
    hf_id: str = ""
    # MoE details (DeepSeek / Llama 4 / gpt-oss / Qwen3-MoE); all default to "absent"
    dense_layers: int = 0  # layers with a dense MLP (of dense_intermediate) instead of experts (DeepSeek's first 3, Maverick's every other)
    dense_intermediate: int = 0  # their MLP width (0: intermediate)
    shared_intermediate: int = 0  # width of the shared expert(s) every MoE layer runs for every token (0: none)
    moe_bias: bool = False  # experts and router carry biases (gpt-oss)
    attn_sinks: bool = False  # one learned sink logit per head and layer (gpt-oss)
    qk_norm: bool = False  # RMSNorm of q and k per head (Qwen3): 2 x head_dim per layer
    expert_bits: float = 0.0  # bits per routed-expert weight in the checkpoint (gpt-oss MXFP4: 4.25); 0: the --dtype
    # MLA (DeepSeek-V2/V3): low-rank compressed KV; the cache holds kv_lora_rank + qk_rope_head_dim per token per layer
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    # -- per-layer pieces ---------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attn_params(self) -> int:
        d, h = self.hidden, self.heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * h * qk) if self.q_lora_rank else d * h * qk
            kv = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank + self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + h * self.v_head_dim * d
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = d * q + 2 * d * kv + q * d
        if self.qkv_bias or self.bias:
            n += q + 2 * kv
        if self.bias:
            n += d
        if self.attn_sinks:
            n += h
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def expert_params(self) -> int:
        d, f = self.hidden, self.intermediate
        n = (3 if self.gated_mlp else 2) * d * f
        if self.bias or self.moe_bias:
            n += (2 * f if self.gated_mlp else f) + d
        return n

    def mlp_params(self, width: int) -> int:
        """A dense (or shared-expert) MLP of ``width``, no bias."""
        return (3 if self.gated_mlp else 2) * self.hidden * width

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts > 1 else 0

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layer" else 1)

    @property
    def router_params(self) -> int:
        if self.experts <= 1:
            return 0
        return self.hidden * self.experts + (self.experts if self.moe_bias else 0)

    @property
    def layer_params(self) -> int:
        """One MoE layer (or, dense models, every layer)."""
        shared = self.mlp_params(self.shared_intermediate) if self.shared_intermediate else 0
        return self.attn_params + self.experts * self.expert_params + shared + self.router_params + 2 * self.norm_params

    @property
    def layer_active_params(self) -> int:
        shared = self.mlp_params(self.shared_intermediate) if self.shared_intermediate else 0
        return self.attn_params + self.experts_per_token * self.expert_params + shared + self.router_params + 2 * self.norm_params

    @property
    def dense_layer_params(self) -> int:
        return self.attn_params + self.mlp_params(self.dense_intermediate or self.intermediate) + 2 * self.norm_params

    @property
    def blocks_params(self) -> int:
        """All decoder layers together (MoE and dense layers)."""
        return (self.layers - self.dense_layers) * self.layer_params + self.dense_layers * self.dense_layer_params

    @property
    def blocks_active_params(self) -> int:
        return (self.layers - self.dense_layers) * self.layer_active_params + self.dense_layers * self.dense_layer_params

    @property
    def routed_expert_params(self) -> int:
        """Every routed expert of every MoE layer (what a batch touches a growing share of)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def attn_pair_flops(self) -> int:
        """FLOPs per (query token, context token) pair per layer: QK^T and PV over all heads (MLA: the decode form)."""
        if self.is_mla:  # absorbed MLA: scores over kv_lora + rope, values over kv_lora
            return 2 * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4 * self.heads * self.head_dim

    @property
    def prefill_pair_flops(self) -> int:
        """FLOPs per pair of a prompt's own attention: MLA prefills in the compute-friendly form, the latent
        up-projected to per-head K (nope + rope dims) and V, so a pair costs ``2 h (d_qk + d_v)``, 3.4x less than the
        absorbed form's ``2 h (2 r + d_rope)`` on DeepSeek-V3 (vLLM's MLA backend, vllm/v1/attention/backends/mla/
        common.py: the 'compute friendly approach' for prefill, the 'data-movement friendly approach' for decode;
        SGLang and FlashMLA alike). Other attention: :attr:`attn_pair_flops`."""
        if self.is_mla:
            return 2 * self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
        return self.attn_pair_flops

    def kv_elements_per_token_per_gpu(self, layers: int, tp: int) -> int:
        """Cached elements per token on one GPU for ``layers`` layers split ``tp`` ways (MLA's latent is replicated)."""
        if self.is_mla:
            return layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * layers * math.ceil(self.kv_heads / tp) * self.head_dim

    # -- whole model ---------------------------------------------------------------------
    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden + self.learned_positions * self.hidden

    @property
    def head_params(self) -> int:
        """The lm_head matrix (V x d), streamed every step whether tied or not."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        return self.blocks_params + self.norm_params + self.embed_params + (0 if self.tied else self.head_params)

    @property
    def active_params(self) -> int:
        return self.blocks_active_params + self.norm_params + self.embed_params + (0 if self.tied else self.head_params)

    @property
    def streamed_active_params(self) -> int:
        """Weights one decode step of a single sequence reads: active layers, final norm, lm_head."""
        return self.blocks_active_params + self.norm_params + self.head_params

    @property
    def streamed_params(self) -> int:
        """Weights read by one decode step: all layers, final norm and lm_head (not the input table)."""
        return self.blocks_params + self.norm_params + self.head_params

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def model_class(self) -> str:
        """``moe`` for a mixture-of-experts model (MLA ones included), else ``dense``: the class whose errors its
        prediction intervals draw on (``perfmodel.uncertainty``, ``perfmodel.freshpub``)."""
        return "moe" if self.is_moe or self.is_mla else "dense"

    def kv_elements_per_token(self) -> int:
        """K and V elements per token over all layers: 2 x layers x kv_heads x head_dim (MLA: layers x (kv_lora_rank + rope dim))."""
        return self.kv_elements_per_token_per_gpu(self.layers, 1)


_FIELDS = {f for f in ModelSpec.__dataclass_fields__ if f != "name"}


def _spec(name: str, fields: dict[str, Any], origin: str) -> ModelSpec:
    kwargs = {k: v for k, v in fields.items() if k in _FIELDS}
    unknown = set(fields) - _FIELDS - {"published_params", "card_params", "source", "aliases"}
    if unknown:
        raise ConfigError(f"{origin}: model {name!r}: unknown field(s) {', '.join(sorted(unknown))}")
    for req in ("layers", "hidden", "heads", "intermediate", "vocab"):
        if not isinstance(kwargs.get(req), int) or kwargs[req] <= 0:
            raise ConfigError(f"{origin}: model {name!r}: field {req!r} must be a positive integer, got {kwargs.get(req)!r}")
    kwargs.setdefault("kv_heads", kwargs["heads"])
    kwargs.setdefault("head_dim", kwargs["hidden"] // kwargs["heads"])
    return ModelSpec(name=name, **kwargs)


@functools.lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, ModelSpec], dict[str, str], dict[str, int]]:
    from infermeter.yamlfile import safe_load

    raw = safe_load((DATA_DIR / "models.yaml").read_text(encoding="utf-8"))
    specs, aliases, published = {}, {}, {}
    for name, fields in raw.items():
        specs[name] = _spec(name, fields, "models.yaml")
        if "published_params" in fields:
            published[name] = int(fields["published_params"])
        if "card_params" in fields:
            _CARD[name] = float(fields["card_params"])
        names = [fields.get("hf_id", ""), *fields.get("aliases", [])]
        for alias in filter(None, names):
            aliases[alias.lower()] = name
            base = alias.lower().rsplit("/", 1)[-1]
            aliases.setdefault(base, name)
            aliases.setdefault(base.removesuffix("-instruct").removesuffix("-chat-hf").removesuffix("-hf"), name)
    return specs, aliases, published


_CARD: dict[str, float] = {}  # rounded counts from model cards ("116.8B"): checked within 1%, not exactly


def card_params(name: str) -> float | None:
    """The model card's rounded parameter count (total), where no exact count is published."""
    _catalog()
    return _CARD.get(name)


def catalog_names() -> list[str]:
    return sorted(_catalog()[0])


def published_params(name: str) -> int | None:
    """The model card's parameter count, kept only to test the computed count."""
    return _catalog()[2].get(name)


def from_hf_config(config: dict[str, Any], name: str = "hf-model") -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` mapping (llama/mistral/mixtral/qwen2/gpt2 style)."""
    mt = str(config.get("model_type", "llama"))
    try:
        if "n_embd" in config:  # GPT-2 family
            d = int(config["n_embd"])
            fields = dict(layers=int(config["n_layer"]), hidden=d, heads=int(config["n_head"]),
                          intermediate=int(config.get("n_inner") or 4 * d), vocab=int(config["vocab_size"]),
                          tied=True, gated_mlp=False, bias=True, norm="layer",
                          learned_positions=int(config.get("n_positions", 1024)), max_context=int(config.get("n_positions", 1024)))
        else:
            d, h = int(config["hidden_size"]), int(config["num_attention_heads"])
            experts = int(config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts") or 1)
            fields = dict(layers=int(config["num_hidden_layers"]), hidden=d, heads=h,
                          kv_heads=int(config.get("num_key_value_heads") or h),
                          head_dim=int(config.get("head_dim") or d // h),
                          intermediate=int(config["moe_intermediate_size"] if experts > 1 and config.get("moe_intermediate_size") else config["intermediate_size"]),
                          vocab=int(config["vocab_size"]),
                          tied=bool(config.get("tie_word_embeddings", mt in ("gemma", "gemma2"))),
                          qkv_bias=bool(config.get("attention_bias", mt == "qwen2")),
                          experts=experts, experts_per_token=int(config.get("num_experts_per_tok") or config.get("experts_per_token") or 1),
                          max_context=int(config.get("max_position_embeddings") or 4096))
            fields.update(_moe_mla_fields(config, experts))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"model config {name!r}: missing or bad field {exc} (expected a Hugging Face config.json)") from None
    return _spec(name, fields, "config.json")


def _moe_mla_fields(config: dict[str, Any], experts: int) -> dict[str, Any]:
    """DeepSeek (MLA, shared experts, first dense layers), Llama 4 (interleaved dense), gpt-oss (MXFP4) and Qwen3 extras."""
    out: dict[str, Any] = {}
    mt = str(config.get("model_type", ""))
    if config.get("kv_lora_rank"):
        out.update(q_lora_rank=int(config.get("q_lora_rank") or 0), kv_lora_rank=int(config["kv_lora_rank"]),
                   qk_rope_head_dim=int(config.get("qk_rope_head_dim") or 0), qk_nope_head_dim=int(config.get("qk_nope_head_dim") or 0),
                   v_head_dim=int(config.get("v_head_dim") or 0))
    if experts > 1:
        shared = int(config.get("n_shared_experts") or 0)
        if shared:
            out["shared_intermediate"] = shared * int(config.get("moe_intermediate_size") or config["intermediate_size"])
        if mt.startswith("llama4"):
            out["shared_intermediate"] = int(config["intermediate_size"])
            step = int(config.get("interleave_moe_layer_step") or 1)
            layers = int(config["num_hidden_layers"])
            out["dense_layers"] = layers - layers // step
            out["dense_intermediate"] = int(config.get("intermediate_size_mlp") or config["intermediate_size"])
        if config.get("first_k_dense_replace"):
            out["dense_layers"] = int(config["first_k_dense_replace"])
            out["dense_intermediate"] = int(config["intermediate_size"])
        if mt == "gpt_oss":
            out.update(moe_bias=True, attn_sinks=True, qkv_bias=True)
            q = config.get("quantization_config") or {}
            if str(q.get("quant_method", "")).lower() == "mxfp4":
                out["expert_bits"] = 4.25
    if mt.startswith("qwen3"):
        out["qk_norm"] = True
    return out


def get_model(name: str) -> ModelSpec:
    """Catalog id, alias, Hugging Face id, or a path to a local config.json (or its directory)."""
    specs, aliases, _ = _catalog()
    key = name.strip().lower()
    if key in specs:
        return specs[key]
    if key in aliases:
        return specs[aliases[key]]
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"--model {name!r}: cannot read config.json ({exc})") from None
        return from_hf_config(config, name=path.parent.name or str(path))
    raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(specs))}, or a path to a Hugging Face config.json")


def round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)
