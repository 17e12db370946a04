"""Precisions: bytes per weight and KV element, the compute dtype, and what hardware refuses.

Promises: :func:`resolve_precision` maps (hardware, weight dtype, KV dtype, engine) to a frozen
:class:`Precision` with the effective bytes per weight (group scales included), the dtype the
GEMMs run at, and notes for the user; it raises :class:`ConfigError` with the reason where the
combination cannot run::

    >>> from infermeter.perfmodel.hardware import get_hardware
    >>> p = resolve_precision(get_hardware("a100-80gb"), "fp8")
    >>> p.bytes_per_weight, p.compute_dtype, p.notes[0][:40]
    (1.0, 'bf16', 'a100-80gb has no FP8 tensor cores: fp8 w')

Rules: bf16/fp16 run natively; fp8 runs W8A8 at the FP8 rate where FP8 tensor cores exist and
weight-only at the BF16 rate elsewhere; int8 runs W8A8 at the INT8 rate; int4 (AWQ/GPTQ, group
128 with FP16 scale and 4-bit zero) and GGUF types are weight-only at the FP16 rate; fp4
(NVFP4: 4 bits + FP8 scale per 16) needs FP4 tensor cores and is refused elsewhere. llama.cpp
on a GPU runs its 16-bit and dequantised GEMMs with FP16 accumulation (``fp16_acc16``: twice the
FP32-accumulate rate on GeForce cards, the same elsewhere).

KV cache dtype when none is asked for (``None`` or ``"auto"``): :func:`default_kv_dtype`, the
engine's own rule. TensorRT-LLM inherits the KV-cache scheme of the checkpoint, and NVIDIA's FP8
and FP4 (ModelOpt) checkpoints carry an FP8 KV cache, so FP8/FP4 weights on hardware with FP8
get an FP8 cache there; vLLM, SGLang and llama.cpp keep the model's 16-bit dtype unless told
(``--kv-cache-dtype``). The same rule serves ``plan`` and ``plan --validate``.
"""

from __future__ import annotations

from dataclasses import dataclass

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import Hardware

# effective bits per weight, including group scales / zero points
WEIGHT_BITS: dict[str, float] = {
    "bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0,
    "int4": 4.0 + 16 / 128 + 4 / 128, "awq": 4.0 + 16 / 128 + 4 / 128, "gptq": 4.0 + 16 / 128 + 4 / 128,
    "fp4": 4.0 + 8 / 16, "nvfp4": 4.0 + 8 / 16,
    # GGUF (llama.cpp) types: average bits per weight of the quantized tensors
    "f16": 16.0, "q8_0": 8.5, "q6_k": 6.5625, "q5_k_m": 5.69, "q5_k_s": 5.54, "q5_0": 5.5,
    "q4_k_m": 4.85, "q4_k_s": 4.58, "q4_0": 4.5, "iq4_xs": 4.25, "q3_k_m": 3.91, "q3_k_s": 3.5, "q2_k": 2.63,
}
GGUF_TYPES = frozenset({"f16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q4_k_m", "q4_k_s", "q4_0", "iq4_xs", "q3_k_m", "q3_k_s", "q2_k"})
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "q8_0": 8.5 / 8, "q4_0": 4.5 / 8}
MODELED_ENGINES = ("vllm", "trtllm", "sglang", "llamacpp", "fastertransformer", "lmdeploy")  # engines the performance model knows
_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "fp8_e4m3": "fp8", "e4m3": "fp8", "w4a16": "int4"}


@dataclass(frozen=True, slots=True)
class Precision:
    weight_dtype: str
    bytes_per_weight: float
    compute_dtype: str  # dtype whose peak TFLOPS the GEMMs run at
    weight_only: bool  # dequantised to compute_dtype inside the kernel
    kv_dtype: str
    kv_bytes: float
    notes: tuple[str, ...] = ()


def normalize_dtype(dtype: str, what: str = "--dtype") -> str:
    d = _ALIASES.get(dtype.strip().lower(), dtype.strip().lower())
    if d not in WEIGHT_BITS:
        raise ConfigError(f"{what} {dtype!r} unknown; use one of {', '.join(WEIGHT_BITS)}")
    return d


def default_kv_dtype(engine: str, weight_dtype: str, hw: Hardware) -> tuple[str | None, str]:
    """The KV dtype ``engine`` picks for ``weight_dtype`` checkpoints on ``hw`` (None: 16-bit), and why."""
    name = engine.split("@", 1)[0]
    if name == "trtllm" and weight_dtype in ("fp8", "fp4", "nvfp4") and hw.has("fp8"):
        return "fp8", (f"fp8 KV cache: TensorRT-LLM inherits the FP8 KV cache of {weight_dtype} (ModelOpt) checkpoints; "
                       "give --kv-dtype bf16 for a 16-bit cache")
    return None, ""


def resolve_precision(hw: Hardware, dtype: str = "bf16", kv_dtype: str | None = None, engine: str = "vllm") -> Precision:
    """Bytes and compute dtype for ``dtype`` weights and ``kv_dtype`` cache on ``hw`` under ``engine``."""
    d = normalize_dtype(dtype)
    engine = engine.split("@", 1)[0]  # a version ("trtllm@0.6.1") does not change the precision rules
    if engine not in MODELED_ENGINES:
        raise ConfigError(f"--engine {engine!r} unknown; use one of {', '.join(MODELED_ENGINES)}")
    notes: list[str] = []
    if engine == "trtllm" and (hw.type != "gpu" or hw.family == "cdna3"):
        raise ConfigError(f"--engine trtllm runs only on NVIDIA GPUs, not on {hw.id!r}")
    if d in GGUF_TYPES and engine not in ("llamacpp", "vllm"):
        raise ConfigError(f"--dtype {d!r} is a GGUF type: use --engine llamacpp (or vllm), not {engine!r}")
    if engine == "llamacpp" and d not in GGUF_TYPES and d not in ("bf16", "fp16"):
        raise ConfigError(f"--engine llamacpp runs GGUF types (f16, q8_0, q4_k_m, ...), not {d!r}")
    half = "bf16" if hw.has("bf16") else "fp16"
    compute, weight_only = half, False
    if d in ("bf16", "fp16", "f16"):
        compute = "fp16" if d in ("fp16", "f16") and hw.has("fp16") else half
    elif d == "fp8":
        if hw.has("fp8"):
            compute = "fp8"
        else:
            weight_only = True
            notes.append(f"{hw.id} has no FP8 tensor cores: fp8 weights run weight-only (dequantised, e.g. Marlin) at the {half.upper()} rate; memory is halved, compute is not faster")
    elif d == "int8":
        if hw.has("int8"):
            compute = "int8"
        else:
            weight_only = True
            notes.append(f"{hw.id} has no INT8 tensor cores: int8 weights run weight-only at the {half.upper()} rate")
    elif d in ("fp4", "nvfp4"):
        if not hw.has("fp4"):
            raise ConfigError(f"--dtype {d} needs FP4 tensor cores (Blackwell, e.g. b200); {hw.id!r} has none. Use int4 (AWQ/GPTQ) for 4-bit weights there")
        compute = "fp4"
    else:  # int4/awq/gptq and GGUF quants: weight-only
        weight_only = True
        notes.append(f"{d} weights are weight-only: dequantised in the kernel, GEMMs at the {half.upper()} rate")
    if engine == "llamacpp" and hw.type == "gpu" and compute in ("bf16", "fp16"):
        compute = "fp16_acc16"  # ggml-cuda runs its dequantised/F16 GEMMs in cuBLAS with FP16 accumulation
    kv = _ALIASES.get((kv_dtype or "").strip().lower(), (kv_dtype or "").strip().lower()) if kv_dtype else None
    if kv is None or kv == "auto":
        kv, why = default_kv_dtype(engine, d, hw)
        if why:
            notes.append(why)
    if kv is None:
        kv = "fp16" if half == "fp16" or d in ("fp16", "f16") else "bf16"
    if kv not in KV_BYTES:
        raise ConfigError(f"--kv-dtype {kv_dtype!r} unknown; use one of {', '.join(KV_BYTES)}")
    if kv == "fp8" and not hw.has("fp8") and hw.type == "gpu":
        notes.append(f"fp8 KV cache on {hw.id}: stored in 8 bits and upcast for attention (no FP8 math)")
    if hw.type == "cpu" and compute not in ("bf16", "fp16", "int8"):
        raise ConfigError(f"--dtype {d!r} has no CPU kernels on {hw.id!r}; use bf16, int8, int4 or a GGUF type")
    return Precision(weight_dtype=d, bytes_per_weight=WEIGHT_BITS[d] / 8, compute_dtype=compute, weight_only=weight_only,
                     kv_dtype=kv, kv_bytes=KV_BYTES[kv], notes=tuple(notes))
