"""Serving engines: per-step and per-request costs, scheduler limits, and versions.

Promises: an engine is named ``NAME`` or ``NAME@VERSION`` (``trtllm@0.6.1``, ``llamacpp@b2837``);
:func:`parse_engine` splits the two and :func:`version_key` orders versions (numeric parts, a
leading ``b`` of llama.cpp builds dropped). :class:`EngineDefaults` is one engine's settings;
a :class:`Generation` is a version range whose published data show a step change, with the fields
it overrides, and :func:`resolve_engine` returns the defaults that apply to a versioned name (every covering generation, narrowest last)::

    >>> parse_engine("trtllm@0.6.1")
    ('trtllm', '0.6.1')
    >>> version_key("0.6.1") < version_key("0.8") < version_key("0.12.0")
    True

A version that cannot be read (``"master 2024-04-19"``) or none at all gets the engine's current
defaults: generations describe old versions that differ, not the other way round. A generation may also
carry a ``tag``, a local version label that selects it whatever the number: vLLM 0.8 to 0.10 still ran
the V0 engine under ``VLLM_USE_V1=0``, written ``vllm@0.8.5+v0`` (a corpus row says ``vllm_use_v1=0``), and 0.7 could
run V1's alpha under ``VLLM_USE_V1=1``, ``vllm@0.7.3+v1``; a ``v0``/``v1`` label on another engine is an error::

    >>> g = Generation(id="vllm<0.8", engine="vllm", below="0.8", fields=(), source="", tag="v0")
    >>> g.covers("vllm", "0.8.5+v0"), g.covers("vllm", "0.8.5"), g.covers("vllm", "0.7.3"), g.covers("vllm", "0.7.3+v1")
    (True, False, True, False)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from infermeter.errors import ConfigError

GQA_MODES = ("grouped", "per_query_head")


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    name: str
    overhead_ms: float  # fixed CPU/launch cost per engine step (the prior when a fitted value exists)
    request_overhead_ms: float  # fixed cost per request before its first token (admission, setup, sampling)
    per_seq_us: float  # scheduling/sampling cost per running sequence per step
    max_num_seqs: int
    max_batched_tokens: int
    kv_reserve: str  # "full": reserves input+output per sequence up front; "current": grows
    kv_fraction_of: str  # "total": utilisation is a fraction of device memory; "free": of memory left after weights
    source: str
    request_overhead_prior_ms: float | None = None  # set when request_overhead_ms was fitted
    layer_overhead_us: float = 0.0  # per layer and step: kernel launches an engine without CUDA graphs pays
    gqa_kv_reads: str = "grouped"  # "per_query_head": decode attention reads K/V once per query head, not per group
    kv_reread: float = 0.0  # per_query_head only: fraction of the extra re-reads that reach DRAM (prior; may be fitted)
    version: str = ""
    generation: str = ""  # the Generation whose fields apply ("" = current defaults)
    group: str = "serving"  # engines whose kernels are alike pool their efficiencies (llama.cpp is a group of its own)
    ubatch_tokens: int = 0  # a step of more tokens runs as micro-batches of this many, each re-reading the weights (0: one pass)
    score_bytes: float = 0.0  # DRAM bytes per attention score element (attention without flash attention; 0: fused, none)
    tp_seq_us: float = 0.0  # per running sequence and step at TP > 1: the scheduler output sent to the TP workers each step (vLLM V0)
    moe_layer_us: float = 40.0  # per MoE layer and step: router, top-k, token permute/unpermute, grouped-GEMM launches (prior)
    moe_gemm: float = 0.7  # share of the dense GEMM efficiency the routed experts' grouped GEMMs reach (prior)
    moe_expert_us: float = 4.0  # per touched expert (shard) per MoE layer and step: its padded token tile's fixed cost (prior)
    frontend_ms: float = 0.0  # per request, serial: the OpenAI server's one process (parse, chat template, tokenise, stream; prior)
    eager_layer_us: float = 0.0  # per layer and step when an engine that captures CUDA/HIP graphs runs without them (prior; 0: none to turn off)

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name

    def eager(self, enforce_eager: bool = False) -> bool:
        """Whether a replica of this engine, asked to run without graphs (``--enforce-eager``), launches its decode steps
        kernel by kernel where it would replay a captured graph. An engine with no graph mode to turn off
        (``eager_layer_us`` 0: llama.cpp, whose per-layer launches are its ``layer_overhead_us``) never does::

            >>> e = EngineDefaults(name="vllm", overhead_ms=0.5, request_overhead_ms=4.0, per_seq_us=15.0, max_num_seqs=256,
            ...                    max_batched_tokens=8192, kv_reserve="current", kv_fraction_of="total", source="",
            ...                    eager_layer_us=47.0)
            >>> e.eager(), e.eager(True), replace(e, eager_layer_us=0.0).eager(True)
            (False, True, False)

        vLLM before 0.2.6 had no graphs at all (they came with PR #1926, December 2023), yet its versions are not
        treated as eager: the one publication of them (mlc-ai's 0.2.0 runs, blind set 10) costs about 45 ms a token
        whatever the TP degree, several times any ``--enforce-eager`` row's launch cost, a per-step regime of its own
        that this term does not describe (docs/performance-model.md section 8).
        """
        return self.eager_layer_us > 0 and enforce_eager


@dataclass(frozen=True, slots=True)
class Generation:
    """Versions of ``engine`` below ``below`` (exclusive) behave differently: ``fields`` override the defaults."""

    id: str  # e.g. "trtllm<0.8"
    engine: str
    below: str
    fields: tuple[tuple[str, Any], ...]
    source: str
    tag: str = ""  # a local version label (``0.8.5+v0``) that selects this generation whatever the number

    def covers(self, name: str, version: str) -> bool:
        if name != self.engine:
            return False
        labels = set(local_label(version).split("."))
        if self.tag and labels & set(ENGINE_TAGS):  # the label names the engine's generation: it decides
            return self.tag in labels
        key = version_key(version)
        return key is not None and key < (version_key(self.below) or ())


def parse_engine(spec: str) -> tuple[str, str]:
    """``"trtllm@0.6.1"`` -> ``("trtllm", "0.6.1")``; ``"vllm"`` -> ``("vllm", "")``."""
    name, _, version = (spec or "").strip().lower().partition("@")
    return name.strip(), version.strip()


def version_key(version: str) -> tuple[int, ...] | None:
    """Numeric parts of a version (``"b2837"`` -> ``(2837,)``); None when it has none to compare."""
    m = re.fullmatch(r"v?b?(\d+(?:\.\d+)*)(?:[.+-].*)?", (version or "").strip().lower())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


ENGINE_TAGS = ("v0", "v1")  # local labels that name a vLLM engine generation (VLLM_USE_V1=0 / 1)


def local_label(version: str) -> str:
    """The label after ``+`` in a version (``"0.8.5+v0"`` -> ``"v0"``; none: ``""``)."""
    return (version or "").strip().lower().rpartition("+")[2] if "+" in (version or "") else ""


_FIELD_TYPES = {"overhead_ms": float, "request_overhead_ms": float, "per_seq_us": float, "max_num_seqs": int,
                "max_batched_tokens": int, "kv_reserve": str, "kv_fraction_of": str, "layer_overhead_us": float,
                "gqa_kv_reads": str, "kv_reread": float,
                "ubatch_tokens": int, "score_bytes": float, "tp_seq_us": float,
                "moe_layer_us": float, "moe_gemm": float, "moe_expert_us": float, "frontend_ms": float}


def parse_generation(raw: dict[str, Any], origin: str) -> Generation:
    try:
        engine, below, source = str(raw["engine"]), str(raw["below"]), str(raw["source"])
    except (KeyError, TypeError):
        raise ConfigError(f"{origin}: engine generation {raw!r} needs engine, below and source") from None
    if version_key(below) is None:
        raise ConfigError(f"{origin}: engine generation {engine!r}: 'below' {below!r} is not a version")
    fields = []
    for k, v in raw.items():
        if k in ("engine", "below", "source", "tag"):
            continue
        if k not in _FIELD_TYPES:
            raise ConfigError(f"{origin}: engine generation {engine}<{below}: unknown field {k!r}")
        try:
            fields.append((k, _FIELD_TYPES[k](v)))
        except (TypeError, ValueError):
            raise ConfigError(f"{origin}: engine generation {engine}<{below}: field {k!r} has a bad value {v!r}") from None
    bad = [k for k, v in fields if isinstance(v, float) and not (math.isfinite(v) and v >= 0)]
    if bad:
        raise ConfigError(f"{origin}: engine generation {engine}<{below}: {', '.join(bad)} must be a finite number >= 0")
    if dict(fields).get("gqa_kv_reads", "grouped") not in GQA_MODES:
        raise ConfigError(f"{origin}: engine generation {engine}<{below}: gqa_kv_reads must be one of {', '.join(GQA_MODES)}")
    return Generation(id=f"{engine}<{below}", engine=engine, below=below, fields=tuple(fields), source=source,
                      tag=str(raw.get("tag", "") or "").strip().lower())


def resolve_engine(engines: tuple[EngineDefaults, ...], generations: tuple[Generation, ...], spec: str) -> EngineDefaults:
    """The defaults of ``spec`` (``NAME[@VERSION]``): the engine's, overridden by the oldest generation covering the version."""
    name, version = parse_engine(spec)
    base = next((e for e in engines if e.name == name), None)
    if base is None:
        raise ConfigError(f"--engine {spec!r} unknown; calibration knows {', '.join(e.name for e in engines)} "
                          "(optionally with @VERSION, e.g. trtllm@0.6.1)")
    tags = {g.tag for g in generations if g.engine == name and g.tag}
    labels = set(local_label(version).split(".")) & set(ENGINE_TAGS)
    if labels and not tags:
        raise ConfigError(f"--engine {spec!r}: the label +{'/'.join(sorted(labels))} names a vLLM engine generation; "
                          f"{name} has none")
    out = replace(base, version=version)
    # widest range first, so a narrower (older) generation's fields win; the narrowest names the result
    for g in sorted((g for g in generations if g.covers(name, version)), key=lambda g: version_key(g.below) or (), reverse=True):
        out = replace(out, generation=g.id, source=f"{out.source}; {g.id}: {g.source}", **dict(g.fields))
    return out


VLLM_LARGE_GPU_BYTES = 70 * 2**30  # vLLM V1's threshold for its larger scheduler defaults
VLLM_TABLE_LIMITS = (256, 8192)  # data/calibration.yaml's vLLM limits: the device rule replaces these, not an overlay's


def hardware_limits(eng: EngineDefaults, device_memory_bytes: float, hardware_id: str) -> EngineDefaults:
    """The scheduler limits an engine picks from the device when the user sets none.

    vLLM V1 (the current generation, not ``vllm<0.8``) serves with ``max_num_seqs`` 1024 and
    ``max_num_batched_tokens`` 8192 on a device of at least 70 GiB that is not an A100 (H100, H200,
    MI300X, B200), else 256 and 2048 (vllm/engine/arg_utils.py ``get_batch_defaults``, the
    ``OPENAI_API_SERVER`` usage context; the A100 is excluded since vllm-project/vllm PR #17885, where a
    larger token budget lowered its throughput). Every other engine, vLLM V0, and limits a calibration overlay
    set (anything but the table's 256 / 8192) keep their values::

        >>> v1 = EngineDefaults(name="vllm", overhead_ms=0.5, request_overhead_ms=4.0, per_seq_us=15.0, max_num_seqs=256,
        ...                     max_batched_tokens=8192, kv_reserve="current", kv_fraction_of="total", source="")
        >>> e = hardware_limits(v1, 80e9, "h100-sxm"); (e.max_num_seqs, e.max_batched_tokens)
        (1024, 8192)
        >>> e = hardware_limits(v1, 80e9, "a100-80gb"); (e.max_num_seqs, e.max_batched_tokens)
        (256, 2048)
    """
    if eng.name != "vllm" or eng.generation or (eng.max_num_seqs, eng.max_batched_tokens) != VLLM_TABLE_LIMITS:
        return eng  # another engine, V0, or a calibration overlay that set its own limits: those stand
    if device_memory_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in hardware_id.lower():
        return replace(eng, max_num_seqs=1024, max_batched_tokens=8192)
    return replace(eng, max_num_seqs=256, max_batched_tokens=2048)

