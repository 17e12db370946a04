"""Command-line flags over a study file: the domain rules of ``infermeter study``'s flags (the CLI is a shell).

:func:`merge_flags` applies flags to a study mapping field by field (``--hardware`` replaces the
configurations, ``--target CONFIG=URL`` attaches to the configuration it names, ``--soak`` needs
``--rate`` ...); :func:`study_source` picks the file, the built-in example, or flags alone::

    >>> data, where, text = study_source(None, "seed-003", [])
    >>> where
    'the built-in example seed-003'
    >>> merged = merge_flags(data, {"profile": ["chat"], "price": ["h100 (lambda)=4.5"]})  # NAME=USD per hour
    >>> merged["profiles"], merged["configurations"][0]["name"], merged["configurations"][0]["price_per_hour"]
    (['chat'], 'h100 (lambda)', 4.5)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.study.config import StudyConfig, build_study, example_text, read_study_mapping, read_study_source


def _pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise ConfigError(f"{flag} {v!r}: expected CONFIG=VALUE, e.g. h100-sxm=http://127.0.0.1:8000")
        out.append((key.strip(), val.strip()))
    return out


def _load_flag(text: str) -> dict[str, Any]:
    kind, _, arg = text.partition(":")
    try:
        if kind == "sweep" and not arg:
            return {"kind": "sweep"}
        if kind == "concurrency" and arg:
            return {"kind": "concurrency", "concurrency": int(arg)}
        if kind == "rate" and arg:
            return {"kind": "rate", "rate": float(arg)}
    except ValueError:
        pass
    raise ConfigError(f"--load {text!r}: use sweep, concurrency:N or rate:R")


def _requests_per_day(text: str) -> float:
    """``--volume``: ``2000000``, ``2,000,000``, ``500K``, ``2M`` or ``1.5e6`` requests/day."""
    import re

    m = re.fullmatch(r"\s*([0-9][0-9_,]*\.?[0-9]*(?:e[0-9]+)?)\s*([kmb]?)\s*", text.lower())
    if not m:
        raise ConfigError(f"--volume {text!r}: expected requests/day like 2000000, 500K or 2M")
    return float(m.group(1).replace(",", "").replace("_", "")) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)]


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of the study's ``key`` mapping for flags to merge into (ConfigError when it is not one)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {str(value)[:40]!r}")
    return dict(value)


def _attach(data: dict[str, Any], flag: str, pairs: list[tuple[str, str]], field: str, cast: Any = str) -> None:
    """Set ``field`` on the configuration each pair names (by name or hardware configuration)."""
    from infermeter.perfmodel.configspec import parse_config

    if not pairs:
        return
    given = data.get("configurations") or []
    if not isinstance(given, list):
        raise ConfigError(f"{flag}: configurations: expected a list, got {type(given).__name__}")
    confs = [c if isinstance(c, dict) else {"config": c} for c in given]
    for key, val in pairs:
        try:
            want = parse_config(key).label
        except ConfigError:
            want = key
        hits = [c for c in confs if c.get("name") == key or
                (not c.get("name") and _label(c.get("config")) == want)]
        if not hits:
            names = ", ".join(str(c.get("name") or c.get("config")) for c in confs)
            raise ConfigError(f"{flag} {key}={val}: no configuration {key!r} in this study ({names})")
        hits[0][field] = cast(val)
    data["configurations"] = confs


def _label(text: Any) -> str | None:
    from infermeter.perfmodel.configspec import parse_config

    try:
        return parse_config(str(text)).label
    except ConfigError:
        return None


def merge_flags(data: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    """The study mapping with command-line flags applied on top (testable without the CLI)."""
    from infermeter.durations import parse_duration
    from infermeter.measure import parse_slo

    data = json.loads(json.dumps(data, default=str))
    for key in ("model", "title", "seed"):
        if f.get(key) is not None:
            data[key] = f[key]
    if f.get("hardware"):
        data["configurations"] = list(f["hardware"])
    if f.get("profile"):
        data["profiles"] = list(f["profile"])
    load = _section(data, "load")
    if f.get("load"):
        load.update(_load_flag(f["load"]))
    for flag, key in (("requests", "requests"), ("saturation_requests", "saturation_requests"),
                      ("concurrency", "concurrency")):
        if f.get(flag) is not None:
            load[key] = f[flag]
    if load:
        data["load"] = load
    slo = _section(data, "slo")
    if f.get("slo"):
        slo.update(parse_slo(f["slo"]))
    if f.get("slo_percentile"):
        slo["percentile"] = f["slo_percentile"]
    if slo:
        data["slo"] = slo
    pricing = _section(data, "pricing")
    for key in ("provider", "overhead", "utilization", "value_metric"):
        if f.get(key) is not None:
            pricing[key] = f[key]
    if f.get("prices"):
        pricing["prices_file"] = str(f["prices"])
    if pricing:
        data["pricing"] = pricing
    if isinstance(data.get("volume"), (int, float)) and not isinstance(data.get("volume"), bool):
        data["volume"] = {"daily": data["volume"]}  # a point volume in the file: flags merge into it
    volume = _section(data, "volume")
    for key in ("peak_factor", "headroom"):
        if f.get(key) is not None:
            volume[key] = f[key]
    if f.get("volume") is not None:
        volume["daily"] = _requests_per_day(str(f["volume"]))
    if volume:
        data["volume"] = volume
    _attach(data, "--target", _pairs(f.get("target") or [], "--target"), "target")
    _attach(data, "--engine", _pairs(f.get("engine") or [], "--engine"), "engine")
    _attach(data, "--price", _pairs(f.get("price") or [], "--price"), "price_per_hour", _price)
    if f.get("soak") is not None or f.get("rate") is not None:
        if f.get("soak") is None or f.get("rate") is None:
            raise ConfigError("--soak DURATION and --rate R go together (a simulated production run per configuration)")
        soak = _section(data, "soak")
        soak.update({"duration_s": parse_duration(f["soak"], "--soak"), "rate_per_s": f["rate"]})
        if f.get("soak_window"):
            soak["window_s"] = parse_duration(f["soak_window"], "--soak-window")
        data["soak"] = soak
    return data


def _price(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--price: {text!r} is not a price in USD per hour") from None




def study_source(study_file: Path | None, example: str | None,
                 hardware: list[str] | None) -> tuple[dict[str, Any], str, str | None]:
    """(the study mapping, where it came from, its text for line numbers): a file, a built-in example by
    name, or nothing (flags only)."""
    if example is not None and study_file is not None:
        raise ConfigError("--example runs a built-in study; give it or a study file, not both")
    if example is not None:
        where = "the built-in example" + ("" if example == "default" else f" {example}")
        text = example_text(example)
        return read_study_mapping(text, where), where, text
    if study_file is not None:
        data, text = read_study_source(study_file)
        return data, f"study file {study_file}", text
    if not hardware:
        raise ConfigError("give a study file, --example [NAME], or at least one --hardware CONFIG")
    return {}, "flags", None


def study_from(study_file: Path | None, example: str | None, flags: dict[str, Any]) -> StudyConfig:
    """The study the command line describes: a file or a built-in example, the flags merged in,
    validated; every error names the file (and the line of a bad field)."""
    data, where, text = study_source(study_file, example, flags.get("hardware"))
    try:
        merged = merge_flags(data, flags)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return build_study(merged, where, text)
