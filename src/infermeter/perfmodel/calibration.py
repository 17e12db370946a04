"""Calibration table: efficiencies keyed by (hardware family, engine, dtype, phase, TP degree).

Promises: :class:`Calibration` answers ``efficiency(family, engine, dtype, phase, tp)`` with the
value and the entry (provenance) that supplied it, and ``engine(name)`` with an engine's per-step
overheads and scheduler limits. ``phase="prefill"`` entries are compute efficiencies (achieved
fraction of dense peak TFLOPS, MFU); ``phase="decode"`` entries are memory-bandwidth efficiencies
(achieved fraction of peak bandwidth, MBU)::

    >>> cal = load_calibration()
    >>> value, entry = cal.efficiency("hopper", "vllm", "bf16", "decode", 1)
    >>> 0.3 < value < 0.95 and bool(entry.source)
    True

Lookup: an entry matches when each of family/engine/dtype equals the query or is ``"*"`` (dtype
may also name a class: half, fp8, int8, int4, gguf, fp4); TP must match, be ``"*"``, or else the
nearest TP degree is taken. The best match maximises (family exact, engine exact, dtype exact >
class > "*", TP exact > "*" > nearest). Priors (all ``"*"`` family/engine) always match.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import DATA_DIR
from infermeter.perfmodel.precision import GGUF_TYPES

DTYPE_CLASSES: dict[str, str] = {"bf16": "half", "fp16": "half", "f16": "half", "fp8": "fp8", "int8": "int8", "q8_0": "int8",
                                 "int4": "int4", "awq": "int4", "gptq": "int4", "fp4": "fp4", "nvfp4": "fp4"}


def dtype_class(dtype: str) -> str:
    if dtype in DTYPE_CLASSES:
        return DTYPE_CLASSES[dtype]
    return "gguf" if dtype in GGUF_TYPES else dtype


@dataclass(frozen=True, slots=True)
class Entry:
    family: str
    engine: str
    dtype: str
    phase: str  # "prefill" (MFU) | "decode" (MBU)
    tp: int | str  # int or "*"
    value: float
    source: str
    prior: float | None = None  # the literature value a fitted entry started from

    @property
    def key(self) -> tuple[str, str, str, str, int | str]:
        return (self.family, self.engine, self.dtype, self.phase, self.tp)


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    name: str
    overhead_ms: float  # fixed CPU/launch cost per engine step
    request_overhead_ms: float  # fixed cost per request before its first token (admission, setup, sampling)
    per_seq_us: float  # scheduling/sampling cost per running sequence per step
    max_num_seqs: int
    max_batched_tokens: int
    kv_reserve: str  # "full": reserves input+output per sequence up front; "current": grows
    kv_fraction_of: str  # "total": utilisation is a fraction of device memory; "free": of memory left after weights
    source: str
    request_overhead_prior_ms: float | None = None  # set when request_overhead_ms was fitted


@dataclass(frozen=True, slots=True)
class Calibration:
    entries: tuple[Entry, ...]
    engines: tuple[EngineDefaults, ...]
    smooth: float = 2.0  # exponent of the smooth maximum between compute and memory time

    def efficiency(self, family: str, engine: str, dtype: str, phase: str, tp: int) -> tuple[float, Entry]:
        cls = dtype_class(dtype)
        best: tuple[tuple[float, ...], Entry] | None = None
        for e in self.entries:
            if e.phase != phase:
                continue
            if e.family not in ("*", family) or e.engine not in ("*", engine):
                continue
            if e.dtype == dtype:
                ds = 2
            elif e.dtype == cls:
                ds = 1
            elif e.dtype == "*":
                ds = 0
            else:
                continue
            if e.tp == tp:
                ts = 2.0
            elif e.tp == "*":
                ts = 1.0
            else:
                ts = -abs(math.log2(int(e.tp) / tp))
            score = (float(e.family == family), float(e.engine == engine), float(ds), ts)
            if best is None or score > best[0]:
                best = (score, e)
        if best is None:
            raise ConfigError(f"calibration has no {phase} entry for family {family!r}, engine {engine!r}, dtype {dtype!r}")
        return best[1].value, best[1]

    def engine(self, name: str) -> EngineDefaults:
        for e in self.engines:
            if e.name == name:
                return e
        raise ConfigError(f"--engine {name!r} unknown; calibration knows {', '.join(e.name for e in self.engines)}")

    def with_entries(self, entries: tuple[Entry, ...], engines: tuple[EngineDefaults, ...] | None = None) -> Calibration:
        return replace(self, entries=entries, engines=self.engines if engines is None else engines)


def _entry(raw: dict[str, Any], origin: str) -> Entry:
    try:
        tp = raw.get("tp", "*")
        return Entry(family=str(raw["family"]), engine=str(raw["engine"]), dtype=str(raw["dtype"]), phase=str(raw["phase"]),
                     tp=tp if tp == "*" else int(tp), value=float(raw["value"]), source=str(raw["source"]),
                     prior=None if raw.get("prior") is None else float(raw["prior"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad calibration entry {raw!r} ({exc})") from None


def parse_calibration(data: dict[str, Any], origin: str) -> Calibration:
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
                source=source))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad engine entry ({exc})") from None
    entries = tuple(_entry(r, origin) for r in (data.get("priors") or []) + (data.get("fitted") or []))
    return Calibration(entries=entries, engines=tuple(engines), smooth=float(data.get("smooth", 2.0)))


@functools.lru_cache(maxsize=4)
def load_calibration(path: str | None = None) -> Calibration:
    """The shipped table (``data/calibration.yaml``) or one at ``path``."""
    import yaml

    p = Path(path) if path else DATA_DIR / "calibration.yaml"
    if not p.is_file():
        raise ConfigError(f"calibration file {str(p)!r}: no such file")
    data = yaml.load(p.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return parse_calibration(data or {}, str(p))
