"""Calibration: efficiencies and engine costs keyed by (hardware, engine, dtype, phase, TP degree).

Promises: :class:`Calibration` answers ``efficiency(family, engine, dtype, phase, tp, hw_class)``
with the value and the entry (provenance) that supplied it, ``engine(spec)`` with an engine's
per-step overheads and scheduler limits (``spec`` may carry a version, ``trtllm@0.6.1``), and
``overlay(other)`` with a table in which ``other``'s entries win. Phases::

    prefill        compute efficiency (fraction of dense peak TFLOPS, MFU)
    decode         memory-bandwidth efficiency (fraction of peak bandwidth, MBU)
    step_overhead  ms per engine step (fitted; the engine's overhead_ms is the prior)
    seq_overhead   us per running sequence and step (fitted; the engine's per_seq_us is the prior)
    tp_seq_overhead us per running sequence and step at TP > 1, for generations that send the scheduler's output to
                   every TP worker each step (vLLM V0; fitted per generation, its tp_seq_us is the prior)
    layer_overhead us per layer and step (kernel launches; engines without CUDA graphs)
    kv_reread      fraction of per-query-head K/V re-reads that reach DRAM (old TensorRT-LLM)
    moe_layer_overhead us per MoE layer and step (router, top-k, token permutation, grouped-GEMM launches; MoE models only)
    moe_gemm       share of the dense GEMM efficiency the routed experts' grouped GEMMs reach (MoE models only)
    moe_expert     us per touched expert shard per MoE layer and step (each routed-to expert's token list is padded to a
                   whole GEMM tile and costs a fixed amount of tile work, whatever its width; MoE models only)
    frontend       ms of serial work per request in the engine's OpenAI-compatible server process (HTTP, chat template,
                   tokenisation, detokenisation, streamed chunks): a served replica finishes at most 1/frontend requests
                   a second (fitted per engine on saturated served runs of short outputs; the engine's frontend_ms is the prior)

    >>> cal = load_calibration()
    >>> value, entry = cal.efficiency("hopper", "vllm", "bf16", "decode", 1)
    >>> 0.3 < value < 0.95 and bool(entry.source)
    True

Lookup: an entry matches when its family equals the hardware family, the hardware's memory class
(``hbm``, ``gddr``, ``dram``) or ``"*"``; its engine equals the engine's name, the engine's group
(``serving`` for vLLM, SGLang, TensorRT-LLM and FasterTransformer; ``llamacpp``) or ``"*"``; its dtype
equals the query, its class (half, fp8, int8, int4, gguf, fp4) or ``"*"``; TP must match, be
``"*"``, or else the nearest degree is taken. The best match maximises (family exact > class >
"*", engine exact > group > "*", dtype exact > class > "*", TP exact > "*" > nearest); on a tie the earlier
entry wins, so an overlay's entries (listed first) beat the shipped ones.

A per-deployment calibration (``infermeter calibrate`` writes one; see docs/performance-model.md)
is a YAML file with ``fitted:`` entries, optional ``fitted_engines:`` and optional ``residuals:``
(log errors of the runs it was fitted on, per metric). :func:`load_calibration` of such a file
(one without ``engines:``) returns the shipped table overlaid with it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.engines import EngineDefaults, Generation, parse_engine, parse_generation, resolve_engine
from infermeter.perfmodel.hardware import DATA_DIR
from infermeter.perfmodel.precision import GGUF_TYPES

__all__ = ["Calibration", "EngineDefaults", "Entry", "dtype_class", "load_calibration", "parse_calibration"]

DTYPE_CLASSES: dict[str, str] = {"bf16": "half", "fp16": "half", "f16": "half", "fp8": "fp8", "int8": "int8", "q8_0": "int8",
                                 "int4": "int4", "awq": "int4", "gptq": "int4", "fp4": "fp4", "nvfp4": "fp4",
                                 "mxfp4": "int4"}  # MoE experts in MXFP4 (gpt-oss): weight-only 4-bit kernels (Marlin-class on A100/H100)
PLAIN_CLASSES = ("half", "fp8")  # precisions whose decode streams plain weights (no dequantising kernel)
PHASES = ("prefill", "decode", "step_overhead", "seq_overhead", "layer_overhead", "kv_reread", "tp_seq_overhead",
          "moe_layer_overhead", "moe_gemm", "moe_expert", "frontend")
# allowed range of each phase's value (a fit stays inside it, a file outside it is an error)
PHASE_BOUNDS: dict[str, tuple[float, float]] = {"prefill": (0.05, 0.95), "decode": (0.05, 0.95), "step_overhead": (0.02, 50.0), "seq_overhead": (0.2, 200.0),
                                                "layer_overhead": (0.5, 500.0), "kv_reread": (0.01, 1.0), "tp_seq_overhead": (0.2, 500.0),
                                                "moe_layer_overhead": (0.5, 1000.0), "moe_gemm": (0.05, 1.0),
                                                "moe_expert": (0.05, 100.0), "frontend": (0.1, 200.0)}


def dtype_class(dtype: str) -> str:
    if dtype in DTYPE_CLASSES:
        return DTYPE_CLASSES[dtype]
    return "gguf" if dtype in GGUF_TYPES else dtype


@dataclass(frozen=True, slots=True)
class Entry:
    family: str  # hardware family, memory class (hbm/gddr/dram) or "*"
    engine: str  # engine name, engine group (serving, llamacpp), generation id ("trtllm<0.8", kv_reread only) or "*"
    dtype: str
    phase: str
    tp: int | str  # int or "*"
    value: float
    source: str
    prior: float | None = None  # the value a fitted entry started from (None: a prior itself)
    origin: str = ""  # the file a per-deployment entry came from ("" = the shipped table)

    @property
    def key(self) -> tuple[str, str, str, str, int | str]:
        return (self.family, self.engine, self.dtype, self.phase, self.tp)

    @property
    def fitted(self) -> bool:
        return self.prior is not None


@dataclass(frozen=True, slots=True)
class Calibration:
    entries: tuple[Entry, ...]
    engines: tuple[EngineDefaults, ...]
    smooth: float = 2.0  # exponent of the smooth maximum between compute and memory time
    generations: tuple[Generation, ...] = ()
    uncertainty: dict[str, Any] | None = field(default=None, compare=False)  # raw `uncertainty:` block (perfmodel.uncertainty)
    residuals: dict[str, tuple[float, ...]] = field(default_factory=dict, compare=False)  # per-deployment: metric -> log errors
    origin: str = ""  # "" for the shipped table, else the per-deployment file overlaid on it

    def lookup(self, family: str, engine: str, dtype: str, phase: str, tp: int | str, hw_class: str = "") -> tuple[float, Entry] | None:
        """The best-matching entry of ``phase`` (see the module docstring), or None."""
        cls = dtype_class(dtype)
        group = next((x.group for x in self.engines if x.name == engine), engine)
        best: tuple[tuple[float, ...], Entry] | None = None
        for e in self.entries:
            if e.phase != phase or e.engine not in ("*", engine, group):
                continue
            fs = 2.0 if e.family == family else 1.0 if (hw_class and e.family == hw_class) else 0.0 if e.family == "*" else -1.0
            if fs < 0:
                continue
            ds = 2 if e.dtype == dtype else 1 if e.dtype == cls else 0 if e.dtype == "*" else -1
            if ds < 0:
                continue
            if e.tp == tp:
                ts = 2.0
            elif e.tp == "*":
                ts = 1.0
            elif tp == "*":
                ts = 0.0
            else:
                ts = -abs(math.log2(int(e.tp) / int(tp)))
            score = (fs, 2.0 if e.engine == engine else 1.0 if e.engine == group else 0.0, float(ds), ts)
            if best is None or score > best[0]:
                best = (score, e)
        return None if best is None else (best[1].value, best[1])

    def lookup_other_dtype(self, family: str, engine: str, dtype: str, phase: str, tp: int | str) -> tuple[float, Entry] | None:
        """The best entry of ``phase`` for exactly ``family`` and ``engine`` (or its group) at another precision class.

        What a decode (bandwidth) efficiency falls back to before the memory class: the share of datasheet bandwidth
        a family's memory system and an engine's kernels reach streams weights and KV at whatever precision (vLLM on
        MI300X reaches 0.47 in FP8 where the HBM pool across vendors says 0.71); the precision changes the bytes,
        which the roofline counts, not the bandwidth achieved. Only between the plain 16- and 8-bit floating-point
        classes (``half``, ``fp8``): quantised formats decode through dequantising kernels whose achieved bandwidth is
        their own (llama.cpp's GGUF matvecs against its F16 ones differ by up to 30% on one GPU)."""
        cls = dtype_class(dtype)
        if cls not in PLAIN_CLASSES:
            return None
        group = next((x.group for x in self.engines if x.name == engine), engine)
        best: tuple[tuple[float, ...], Entry] | None = None
        for e in self.entries:
            if (e.phase != phase or e.family != family or e.engine not in (engine, group) or e.dtype in ("*", dtype, cls)
                    or dtype_class(e.dtype) not in PLAIN_CLASSES):
                continue
            ts = 1.0 if e.tp in ("*", tp) else (-abs(math.log2(int(e.tp) / int(tp))) if tp != "*" else 0.0)
            score = (2.0 if e.engine == engine else 1.0, 1.0 if e.tp == "*" else 0.0, ts)
            if best is None or score > best[0]:
                best = (score, e)
        return None if best is None else (best[1].value, best[1])

    def efficiency(self, family: str, engine: str, dtype: str, phase: str, tp: int, hw_class: str = "") -> tuple[float, Entry]:
        found = self.lookup(family, engine, dtype, phase, tp, hw_class)
        if found is None:
            raise ConfigError(f"calibration has no {phase} entry for family {family!r}, engine {engine!r}, dtype {dtype!r}")
        return found

    def engine(self, spec: str) -> EngineDefaults:
        """Defaults of ``NAME[@VERSION]``, with the generation that covers the version applied."""
        return resolve_engine(self.engines, self.generations, spec)

    def engine_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.engines)

    def with_entries(self, entries: tuple[Entry, ...], engines: tuple[EngineDefaults, ...] | None = None) -> Calibration:
        return replace(self, entries=entries, engines=self.engines if engines is None else engines)

    def overlay(self, other: Calibration) -> Calibration:
        """This table with ``other``'s entries first (they win ties), its engines' fitted costs, residuals and origin."""
        engines = {e.name: e for e in self.engines}
        for e in other.engines:
            engines[e.name] = e
        return replace(self, entries=other.entries + self.entries, engines=tuple(engines.values()),
                       residuals=other.residuals or self.residuals, origin=other.origin or self.origin,
                       uncertainty=other.uncertainty or self.uncertainty)


def _entry(raw: dict[str, Any], origin: str, mark: str) -> Entry:
    try:
        tp = raw.get("tp", "*")
        e = Entry(family=str(raw["family"]), engine=str(raw["engine"]), dtype=str(raw.get("dtype", "*")), phase=str(raw["phase"]),
                  tp=tp if tp == "*" else int(tp), value=float(raw["value"]), source=str(raw["source"]),
                  prior=None if raw.get("prior") is None else float(raw["prior"]), origin=mark)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad calibration entry {raw!r} ({exc})") from None
    if e.phase not in PHASES:
        raise ConfigError(f"{origin}: calibration entry {raw!r}: phase {e.phase!r} unknown (use {', '.join(PHASES)})")
    lo, hi = PHASE_BOUNDS[e.phase]
    if not lo <= e.value <= hi:
        raise ConfigError(f"{origin}: calibration entry {raw!r}: {e.phase} value {e.value} outside {lo}..{hi}")
    return e


def _engines(data: dict[str, Any], origin: str) -> list[EngineDefaults]:
    fitted_eng = data.get("fitted_engines") or {}
    engines = []
    try:
        for name, v in (data.get("engines") or {}).items():
            fe = fitted_eng.get(name) or {}
            source = str(v["source"]) + (f"; request overhead {fe['source']}" if fe else "")
            engines.append(EngineDefaults(
                name=name, overhead_ms=float(v["overhead_ms"]), per_seq_us=float(v["per_seq_us"]),
                request_overhead_ms=float(fe.get("request_overhead_ms", v["request_overhead_ms"])),
                request_overhead_prior_ms=float(v["request_overhead_ms"]) if fe else None,
                max_num_seqs=int(v["max_num_seqs"]), max_batched_tokens=int(v["max_batched_tokens"]),
                kv_reserve=str(v.get("kv_reserve", "current")), kv_fraction_of=str(v.get("kv_fraction_of", "total")),
                layer_overhead_us=float(v.get("layer_overhead_us", 0.0)), group=str(v.get("group", "serving")),
                ubatch_tokens=int(v.get("ubatch_tokens", 0)), score_bytes=float(v.get("score_bytes", 0.0)),
                moe_layer_us=float(v.get("moe_layer_us", 40.0)), moe_gemm=float(v.get("moe_gemm", 0.7)),
                moe_expert_us=float(v.get("moe_expert_us", 4.0)), frontend_ms=float(v.get("frontend_ms", 0.0)),
                eager_layer_us=float(v.get("eager_layer_us", 0.0)), source=source))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{origin}: bad engine entry ({exc})") from None
    for e in engines:
        if e.ubatch_tokens < 0 or e.score_bytes < 0:
            raise ConfigError(f"{origin}: engine {e.name!r}: ubatch_tokens and score_bytes must be >= 0")
        # every cost is a time an engine spends: a negative one would make a step or a request finish before it began
        # (and break bounds that assume none is, serving.closed_loop_ceiling)
        bad = [k for k in ("overhead_ms", "request_overhead_ms", "per_seq_us", "layer_overhead_us", "frontend_ms", "eager_layer_us",
                           "moe_layer_us", "moe_expert_us", "request_overhead_prior_ms")
               if getattr(e, k) is not None and not (math.isfinite(getattr(e, k)) and getattr(e, k) >= 0)]
        if bad:
            raise ConfigError(f"{origin}: engine {e.name!r}: {', '.join(bad)} must be a finite number >= 0")
    return engines


def _residuals(data: dict[str, Any], origin: str) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for i, r in enumerate(data.get("residuals") or []):
        try:
            out[str(r["metric"])] = tuple(float(x) for x in r["log_errors"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{origin}: residuals[{i}] needs metric and a list of log_errors (log(measured/predicted))") from None
    return out


def parse_calibration(data: dict[str, Any], origin: str, mark: str = "") -> Calibration:
    """A table from a parsed YAML mapping; ``mark`` tags its entries' origin (a per-deployment file)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping (priors:, fitted:, engines:, ...)")
    entries = tuple(_entry(r, origin, mark) for r in (data.get("fitted") or []) + (data.get("priors") or []))
    generations = tuple(parse_generation(g, origin) for g in (data.get("engine_generations") or []))
    engines = _engines(data, origin)  # empty for a per-deployment file (its fitted_engines are applied by load_calibration)
    return Calibration(entries=entries, engines=tuple(engines), smooth=float(data.get("smooth", 2.0)), generations=generations,
                       uncertainty=data.get("uncertainty"), residuals=_residuals(data, origin), origin=mark)


def _read(p: Path) -> dict[str, Any]:
    import yaml

    from infermeter.yamlfile import safe_load, yaml_problem

    if not p.is_file():
        raise ConfigError(f"calibration file {str(p)!r}: no such file")
    try:
        data = safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({yaml_problem(exc)})") from None
    return data or {}


@functools.lru_cache(maxsize=8)
def load_calibration(path: str | None = None) -> Calibration:
    """The shipped table (``data/calibration.yaml``), a full table at ``path``, or the shipped table
    overlaid with the per-deployment calibration at ``path`` (a file without ``engines:``)."""
    if not path:
        return parse_calibration(_read(DATA_DIR / "calibration.yaml"), "calibration.yaml")
    p = Path(path)
    data = _read(p)
    if data.get("engines"):
        return parse_calibration(data, str(p), mark="")
    user = parse_calibration(data, str(p), mark=str(p))
    base = load_calibration()
    engines = list(base.engines)
    for name, fe in (data.get("fitted_engines") or {}).items():
        i = next((k for k, e in enumerate(engines) if e.name == parse_engine(str(name))[0]), None)
        if i is None:
            raise ConfigError(f"{p}: fitted_engines: engine {name!r} unknown; known: {', '.join(base.engine_names())}")
        try:
            engines[i] = replace(engines[i], request_overhead_ms=float(fe["request_overhead_ms"]),
                                 request_overhead_prior_ms=engines[i].request_overhead_ms,
                                 source=f"{engines[i].source}; request overhead {fe.get('source', p)}")
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{p}: fitted_engines: {name}: needs request_overhead_ms") from None
    return base.overlay(replace(user, engines=tuple(engines)))
