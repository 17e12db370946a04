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

    # -- per-layer pieces ---------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = d * q + 2 * d * kv + q * d
        if self.qkv_bias or self.bias:
            n += q + 2 * kv
        if self.bias:
            n += d
        return n

    @property
    def expert_params(self) -> int:
        d, f = self.hidden, self.intermediate
        n = (3 if self.gated_mlp else 2) * d * f
        if self.bias:
            n += (2 * f if self.gated_mlp else f) + d
        return n

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layer" else 1)

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts if self.experts > 1 else 0

    @property
    def layer_params(self) -> int:
        return self.attn_params + self.experts * self.expert_params + self.router_params + 2 * self.norm_params

    @property
    def layer_active_params(self) -> int:
        return self.attn_params + self.experts_per_token * self.expert_params + self.router_params + 2 * self.norm_params

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
        return self.layers * self.layer_params + self.norm_params + self.embed_params + (0 if self.tied else self.head_params)

    @property
    def active_params(self) -> int:
        return self.layers * self.layer_active_params + self.norm_params + self.embed_params + (0 if self.tied else self.head_params)

    @property
    def streamed_params(self) -> int:
        """Weights read by one decode step: all layers, final norm and lm_head (not the input table)."""
        return self.layers * self.layer_params + self.norm_params + self.head_params

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    def kv_elements_per_token(self) -> int:
        """K and V elements per token over all layers: 2 x layers x kv_heads x head_dim."""
        return 2 * self.layers * self.kv_heads * self.head_dim


_FIELDS = {f for f in ModelSpec.__dataclass_fields__ if f != "name"}


def _spec(name: str, fields: dict[str, Any], origin: str) -> ModelSpec:
    kwargs = {k: v for k, v in fields.items() if k in _FIELDS}
    unknown = set(fields) - _FIELDS - {"published_params", "aliases"}
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
        names = [fields.get("hf_id", ""), *fields.get("aliases", [])]
        for alias in filter(None, names):
            aliases[alias.lower()] = name
            base = alias.lower().rsplit("/", 1)[-1]
            aliases.setdefault(base, name)
            aliases.setdefault(base.removesuffix("-instruct").removesuffix("-chat-hf").removesuffix("-hf"), name)
    return specs, aliases, published


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
            experts = int(config.get("num_local_experts") or config.get("num_experts") or 1)
            fields = dict(layers=int(config["num_hidden_layers"]), hidden=d, heads=h,
                          kv_heads=int(config.get("num_key_value_heads") or h),
                          head_dim=int(config.get("head_dim") or d // h),
                          intermediate=int(config["moe_intermediate_size"] if experts > 1 and config.get("moe_intermediate_size") else config["intermediate_size"]),
                          vocab=int(config["vocab_size"]),
                          tied=bool(config.get("tie_word_embeddings", mt in ("gemma", "gemma2"))),
                          qkv_bias=bool(config.get("attention_bias", mt == "qwen2")),
                          experts=experts, experts_per_token=int(config.get("num_experts_per_tok") or 1),
                          max_context=int(config.get("max_position_embeddings") or 4096))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"model config {name!r}: missing or bad field {exc} (expected a Hugging Face config.json)") from None
    return _spec(name, fields, "config.json")


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
