"""The flag groups of ``run`` and ``simulate`` (and of the twin's deployment), from their models.

Every flag is a :class:`~infermeter.measure.RunConfig` or :class:`~infermeter.twin.spec.TwinSpec`
field; the help is the field's description; only how text becomes a value (durations, SLOs,
``KEY=VALUE`` pairs, JSON) is said here. ``run`` uses every group, ``simulate`` those that make
sense in virtual time; both take the same words for the same things.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Optional

from infermeter.cli.options import Flag, FlagSpec, model_flags
from infermeter.durations import parse_duration
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig, parse_slo_rules
from infermeter.twin.spec import TwinSpec


def _duration(v: Any, flag: str) -> float | None:
    return parse_duration(v, flag)


def _timeout(v: Any, flag: str) -> float | None:
    """A timeout: a duration, or 0 for none."""
    return None if str(v).strip() in ("0", "0s", "0.0") else parse_duration(v, flag)


def _json_object(v: Any, flag: str) -> dict[str, Any]:
    try:
        obj = json.loads(v)
    except ValueError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{flag} must be a JSON object")
    return obj


def _slo(v: Any, flag: str) -> str:
    """Checked here (ConfigError naming --slo); RunConfig reads the text, so a percentile in the names
    (``ttft_p95_ms=500``) sets its ``slo_percentile``."""
    parse_slo_rules(v)
    return str(v)


def _pairs(items: Any, flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are parsed as JSON when they can be (numbers, lists), else kept as text."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} turns=3")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _alerts(items: Any, flag: str) -> tuple[str, ...]:
    from infermeter.analysis.alerts import parse_alert

    for a in items or []:
        parse_alert(a)
    return tuple(items or ())


def _emulator(v: Any, flag: str) -> tuple[str, ...]:
    from infermeter.engines.emulator.config import EmulatorConfig

    args = tuple(shlex.split(v or ""))
    EmulatorConfig.from_args(list(args), where=flag)  # a bad flag is an error now, not in the child
    return args


def _path(v: Any, flag: str) -> str:
    return str(v)


def _run(specs: dict[str, FlagSpec | None], panel: str) -> list[Flag]:
    return model_flags(RunConfig, specs, panel)


TARGET = _run({
    "url": None, "model": None, "api": None,
    "api_key": FlagSpec(envvar="OPENAI_API_KEY", show_default=False),
    "ignore_eos": None, "temperature": None,
    "extra_body": FlagSpec(annotation=Optional[str], convert=_json_object, show_default=False, metavar="JSON"),
}, "Target")
LOAD = _run({
    "concurrency": None, "rate": None, "arrival": FlagSpec(annotation=Optional[str], show_default=False),
    "burstiness": None, "ramp_up_strategy": FlagSpec(annotation=Optional[str]), "ramp_up_start_rps": None,
    "ramp_up_end_rps": None, "max_concurrency": None, "load": FlagSpec(annotation=Optional[str]), "time_scale": None,
    "requests": None, "duration_s": FlagSpec(flag="--duration", annotation=Optional[str], convert=_duration, metavar="DURATION"),
    "warmup": None, "seed": None,
}, "Load")
GRACE = _run({"grace_s": FlagSpec(flag="--grace", annotation=Optional[str], convert=_duration, metavar="DURATION",
                                show_default="30s")}, "Load")
PLANS = _run({
    "sweep_rates": None, "search": FlagSpec(annotation=str), "search_start": None, "search_max": None,
    "resolution": None, "max_steps": None, "slo_percentile": None, "max_error_rate": None,
}, "Sweeps and find-max (--load sweep|find-max)")
SCALE = _run({"workers": None, "ray": None, "calibrate": None, "strict": None}, "Scale and client calibration")
SOAK = _run({
    "window_s": FlagSpec(flag="--window", annotation=Optional[str], convert=_duration, metavar="DURATION"),
    "checkpoint_s": FlagSpec(flag="--checkpoint", annotation=Optional[str], convert=_duration, metavar="DURATION"),
    "part_records": None,
}, "Soak runs")
WORKLOAD = _run({
    "profile": None, "dataset": None, "tokenizer": None, "input_tokens": None, "output_tokens": None,
    "prefix_tokens": None, "prefix_groups": None,
    "profile_overrides": FlagSpec(flag="--set", annotation=Optional[list[str]], convert=_pairs, show_default=False,
                                  metavar="KEY=VALUE"),
}, "Workload")
SALT = _run({"prompt_salt": None}, "Workload")  # run only: simulated runs have no cache to carry over
TIMEOUTS = _run({
    "connect_timeout_s": FlagSpec(flag="--connect-timeout", annotation=Optional[str], convert=_duration,
                                  metavar="DURATION", show_default="10s"),
    "first_token_timeout_s": FlagSpec(flag="--first-token-timeout", annotation=Optional[str], convert=_timeout,
                                      metavar="DURATION", show_default="120s"),
    "timeout_s": FlagSpec(flag="--timeout", annotation=Optional[str], convert=_timeout, metavar="DURATION",
                          show_default="600s"),
}, "Timeouts")
SLO = _run({"slo": FlagSpec(annotation=Optional[str], convert=_slo, show_default=False, metavar="KEY=MS,...")}, "SLO")
OUTPUT = _run({
    "out": FlagSpec(annotation=Optional[Path], convert=_path), "label": None,
}, "Output")
TELEMETRY = _run({
    "alerts": FlagSpec(flag="--alert", annotation=Optional[list[str]], convert=_alerts, show_default=False,
                       metavar="RULE"),
    "hardware": None, "scrape": None,
    "scrape_interval_s": FlagSpec(flag="--scrape-interval", annotation=Optional[str], convert=_duration,
                                  metavar="DURATION", show_default="1s"),
    "scrape_max_mb": None,
    "gpu": FlagSpec(flag="--gpu-telemetry/--no-gpu-telemetry"), "dcgm_url": None, "history": None,
    "emulator_args": FlagSpec(flag="--emulator", annotation=Optional[str], convert=_emulator, show_default=False,
                              metavar="ARGS"),
}, "Telemetry, alerts, history, embedded emulator")
def _given(v: Any, flag: str) -> Any:
    """Pass a value through, and only when the user gave it (so a default can come from elsewhere)."""
    return v


TWIN = model_flags(TwinSpec, {
    # model and hardware are passed only when given: a --calibration file names its own
    "model": FlagSpec(convert=_given), "gpu": FlagSpec(aliases=("--hardware",), convert=_given), "tp": None, "pp": None, "dtype": None, "kv_dtype": None,
    "gpu_memory_utilization": None, "max_num_seqs": None, "max_num_batched_tokens": None, "max_model_len": None,
    "num_gpu_blocks_override": None, "enable_prefix_caching": None, "enable_chunked_prefill": None,
    "block_size": None,
    "frontend_overhead_s": FlagSpec(flag="--frontend-overhead", annotation=Optional[str], convert=_duration,
                                    metavar="DURATION"),
    "frontend_service_s": FlagSpec(flag="--frontend-service", annotation=Optional[str], convert=_duration,
                                   metavar="DURATION"),
    "router": FlagSpec(annotation=str, metavar="POLICY"),
    "calibration": FlagSpec(metavar="FILE"),
    "speculative": FlagSpec(metavar="METHOD:k=K,acceptance=A"),
}, "Deployment (the digital twin)")
