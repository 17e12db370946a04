"""The campaign file: targets x profiles x loads x repeats, validated before anything starts.

A campaign is YAML (see docs/load.md, "Campaigns")::

    name: smollm2-seqs
    repeats: 2
    defaults: {input_tokens: "64", output_tokens: "16", warmup: 2}
    targets:
      - {name: seqs2, engine: vllm-cpu, args: [--max-num-seqs, "2"], settings: {kv_cache_gb: 1}}
      - {name: emu, engine: emulator, args: [--max-concurrency, "4"]}
      - {name: remote, url: "http://10.0.0.5:8000", model: llama}
    profiles: [{name: short, output_tokens: "16"}, {name: chat, profile: chat}]
    loads: [{name: c4, concurrency: 4, requests: 40}, {name: sweep, load: sweep, requests: 30}]

``load_campaign(path)`` returns a :class:`Campaign` whose ``cells()`` are the
runs in execution order — per target, repeat by repeat (every profile x load
once before the next repeat, so slow drift spreads over all cells) — each
with its own complete ``RunConfig``. Profiles and loads hold ``infermeter
run`` settings by their config names (``duration`` may be ``"5m"``, ``slo``
a string or a mapping); any problem is a ConfigError naming the entry
(``loads[1].rate: ...``). ``spec_hash`` identifies the file's content, so a
resumed campaign can tell that its file changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infermeter.durations import parse_duration
from infermeter.engines.target import Target
from infermeter.errors import ConfigError
from infermeter.measure import RunConfig, build_plan, build_shape, parse_slo
from infermeter.yamlfile import field_error, yaml_mapping

_NOT_IN_CELLS = ("url", "out", "label", "api_key", "emulator_args", "model", "resume")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None
    out: str | None = None
    repeats: int = Field(1, ge=1)
    defaults: dict[str, Any] = {}
    targets: list[Target] = Field(min_length=1)
    profiles: list[dict[str, Any]] = [{}]
    loads: list[dict[str, Any]] = Field(min_length=1)


@dataclass(frozen=True)
class Cell:
    """One run of the matrix."""

    target: Target
    profile: str
    load: str
    repeat: int
    config: RunConfig  # url/out/label filled in when it runs

    @property
    def key(self) -> str:
        return f"{self.target.name}/{self.profile}/{self.load}/r{self.repeat}"


@dataclass(frozen=True)
class Campaign:
    name: str
    path: Path
    spec_hash: str
    repeats: int
    out: str | None
    targets: tuple[Target, ...]
    cells_by_target: dict[str, list[Cell]]

    def cells(self) -> list[Cell]:
        return [c for t in self.targets for c in self.cells_by_target[t.name]]


def _settings(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """Campaign spellings -> RunConfig fields (duration strings, slo strings)."""
    out = {k: v for k, v in entry.items() if k != "name"}
    for bad in _NOT_IN_CELLS:
        if bad in out:
            raise ConfigError(f"{where}.{bad}: set per target (or by the campaign), not here")
    for key in ("duration", "window", "checkpoint", "grace", "timeout", "connect_timeout", "first_token_timeout",
                "scrape_interval"):
        if key in out:
            out[f"{key}_s"] = parse_duration(out.pop(key), f"{where}.{key}")
    if isinstance(out.get("slo"), str):
        out["slo"] = parse_slo(out["slo"])
    return out


def _named(entries: list[dict[str, Any]], kind: str) -> list[tuple[str, dict[str, Any]]]:
    named = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ConfigError(f"{kind}[{i}]: expected a mapping, got {type(e).__name__}")
        name = str(e.get("name") or (f"{kind[:-1]}{i}" if len(entries) > 1 else "default"))
        if not _NAME.match(name):
            raise ConfigError(f"{kind}[{i}].name {name!r}: use letters, digits, '.', '_' or '-'")
        named.append((name, _settings(e, f"{kind}[{i}]")))
    dup = {n for n, _ in named if [m for m, _ in named].count(n) > 1}
    if dup:
        raise ConfigError(f"{kind}: names repeat ({', '.join(sorted(dup))}); give each a distinct name")
    return named


def load_campaign(path: Path | str) -> Campaign:
    """Read and validate a campaign file; ConfigError names the file and the entry at fault."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the campaign file ({exc.strerror})") from None
    raw = yaml_mapping(text, str(path), "targets:, loads: (and profiles:, repeats:)")
    try:
        spec = _Spec(**raw)
    except ValidationError as exc:
        raise field_error(str(path), text, exc) from None
    names = [t.name for t in spec.targets]
    if len(set(names)) != len(names) or not all(_NAME.match(n) for n in names):
        raise ConfigError(f"{path}: targets need distinct names of letters, digits, '.', '_' or '-'")
    try:
        defaults = _settings(spec.defaults, "defaults")
        profiles, loads = _named(spec.profiles, "profiles"), _named(spec.loads, "loads")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    by_target: dict[str, list[Cell]] = {}
    for t in spec.targets:
        cells = []
        for rep in range(spec.repeats):
            for pname, p in profiles:
                for lname, ld in loads:
                    cfg = _cell_config(path, t, {**defaults, **p, **ld}, f"profiles.{pname} x loads.{lname}")
                    cells.append(Cell(t, pname, lname, rep, cfg))
        by_target[t.name] = cells
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Campaign(spec.name or path.stem, path, digest, spec.repeats, spec.out, tuple(spec.targets), by_target)


def _cell_config(path: Path, t: Target, settings: dict[str, Any], where: str) -> RunConfig:
    try:
        cfg = RunConfig(**{**settings, "model": t.model, **({"hardware": t.hardware} if t.hardware else {})})
    except ValidationError as exc:
        e = exc.errors()[0]
        raise ConfigError(f"{path}: {where}: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}") from None
    try:
        if build_plan(cfg) is None:
            build_shape(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None
    return cfg
