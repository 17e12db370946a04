"""What a run records about itself before and after it runs: ``run.json``'s header and runtime.

Also the pre-run client capacity check (``load.calibrate``): it runs when the
requested open-loop rate could come near this machine's limit, adds a notice
when it does, and refuses the run with ``--strict``. And the other pre-run checks: the model
(:func:`discover_model`: ``--model`` must be one ``/v1/models`` lists, when it lists any, else a
one-line ConfigError with "did you mean") and the client's open-file limit (:func:`check_fd_limit`,
``load.fdlimit``)::

    run = run_header(measurement, url, embedded, model, label, emulated, calibration)
    run["runtime"] = runtime(worker_stats)     # sums over workers, worst CPU
"""

from __future__ import annotations

import difflib
import itertools
import os
import platform
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from infermeter import __version__
from infermeter.client.errors import AUTH_STATUSES, auth_hint, http_detail
from infermeter.client.session import FdLimitError
from infermeter.errors import ConfigError, UserError
from infermeter.load.fdlimit import in_flight_bound, prepare_fd_limit
from infermeter.load.runner import Limits
from infermeter.load.shapes import BaseShape
from infermeter.load.workers import effective_workers
from infermeter.measure.capacity import calibrate, capacity_warning, worth_calibrating
from infermeter.measure.config import RunConfig, requested_rate
from infermeter.records.header import RunHeader
from infermeter.records.tags import load_tag, workload_tag
from infermeter.redact import redact_args, redact_obj


def default_label(model: str, url: str, embedded: bool, load: Any, workload_info: dict[str, Any]) -> str:
    """A run's default name, carrying what tells runs apart: model, target, load and level, lengths.

    ``Llama-3.1-8B-Instruct 127.0.0.1:8000 c16 in200-out100``; ``emulator`` for the embedded one."""
    where = "emulator" if embedded else (urlsplit(url).netloc or url)
    header = load.header() if hasattr(load, "header") else load.model_dump(mode="json")
    return f"{model.rsplit('/', 1)[-1]} {where} {load_tag(header)} {workload_tag(workload_info or {})}"


def default_out_dir(label: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / f"{stamp}-{re.sub(r'[^A-Za-z0-9._-]+', '-', label).strip('-')[:60]}"


def host_info() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "loadavg": load, "clock": "time.perf_counter (monotonic)"}


async def discover_model(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                         wanted: str | None = None) -> tuple[str | None, dict[str, Any]]:
    """First model id from /v1/models (None when the server has no such endpoint), or ``wanted``
    (``--model``) once :func:`check_model` found the server serves it, with its entry.

    A 401/403 there is a UserError naming the status and what to pass: every request would fail."""
    models = await _served_models(session, url, headers)
    if wanted is not None:
        check_model(wanted, models, url)
        return wanted, next((m for m in models if m["id"] == wanted), {})
    return (str(models[0]["id"]), models[0]) if models else (None, {})


def check_model(wanted: str, models: list[dict[str, Any]], url: str) -> None:
    """A ConfigError (one line, with "did you mean") when the server lists models and ``wanted`` is not
    one of them: every request would fail ("The model ... does not exist"). A server that lists none,
    or lists a wildcard route (a gateway's ``openai/*``), is not judged."""
    ids = [str(m["id"]) for m in models]
    if not ids or wanted in ids or any("*" in i for i in ids):
        return
    names: dict[str, str] = {}  # lower-cased id, and its last path part, -> the id
    for i in ids:
        names.setdefault(i.lower(), i)
        names.setdefault(i.rsplit("/", 1)[-1].lower(), i)
    near = difflib.get_close_matches(wanted.lower(), list(names), n=1, cutoff=0.6) or difflib.get_close_matches(
        wanted.rsplit("/", 1)[-1].lower(), list(names), n=1, cutoff=0.6)
    shown = ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    hint = f"did you mean {names[near[0]]!r}? " if near else ""
    raise ConfigError(f"--model {wanted!r}: {url}/v1/models does not list it, so every request would fail; "
                      f"{hint}the server lists {shown}")


async def _served_models(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The entries of /v1/models that have an id ([] when the server has no such endpoint)."""
    refused: tuple[int, str] | None = None
    try:
        async with session.get(url + "/v1/models", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status in AUTH_STATUSES:
                refused = (r.status, "")  # kept even if reading the body fails
                refused = (r.status, (await r.content.read(512)).decode("utf-8", "replace"))
            elif r.status != 200:
                return []
            else:
                body = await r.json(content_type=None)
    except FdLimitError as exc:
        raise UserError(f"{url}/v1/models: {exc.detail()}") from None
    except aiohttp.ClientConnectorError as exc:
        raise UserError(f"cannot reach {url}: {exc.os_error or exc}") from None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        if refused is None:
            return []
    if refused is not None:  # raised here, not inside the response: closing it must not hide the error
        raise UserError(f"{url}/v1/models: {http_detail(*refused)}; {auth_hint(refused[0], 'Authorization' in headers)}")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) or not data[0].get("id"):
        return []  # as before: a first entry without an id means the list is not read
    return [m for m in data if isinstance(m, dict) and m.get("id") and isinstance(m["id"], (str, int))]


def build_header(cfg: RunConfig, shape: BaseShape, workload_info: dict[str, Any], *, source: str, label: str,
                 model: str | None, hardware: str | None, target: dict[str, Any],
                 config_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run.json`` before the run, for measured and simulated runs alike (see docs/load.md)."""
    load = {**shape.header(), "limits": {
        "requests": cfg.requests, "duration_s": cfg.duration_s, "warmup": cfg.warmup,
        "max_concurrency": cfg.max_concurrency, "grace_s": cfg.grace_s if cfg.duration_s is not None else None}}
    if source != "simulated":
        load.update(workers=cfg.workers, backend="ray" if cfg.ray else ("processes" if cfg.workers > 1 else "local"))
    config = cfg.public()
    if config_extra:
        config.update(config_extra)
    header = RunHeader(version=__version__, source=source, label=label,
                       started_at=datetime.now(timezone.utc).isoformat(), seed=cfg.seed, model=model,
                       hardware=hardware, profile=(workload_info or {}).get("profile"), target=target, load=load,
                       workload=workload_info, host=host_info(), slo=cfg.slo, config=config)
    # --api-key KEY and the like masked, and any credential in a URL or a launch argument (infermeter.redact)
    return dict(redact_obj(header.to_json())) | {"argv": redact_args(sys.argv[1:])}


def run_header(m: Any, url: str, embedded: bool, model: str, label: str, emulated: dict[str, Any] | None,
               calibration: dict[str, Any] | None) -> dict[str, Any]:
    """A measured run's ``run.json`` before it runs."""
    cfg = m.cfg
    # a run against infermeter's own emulator measured a digital twin, not the hardware it models
    run = build_header(cfg, m.shape, m.workload.describe(), source="emulated" if emulated else "measured",
                       label=label, model=model,
                       hardware=cfg.hardware or ((emulated or {}).get("hardware")),
                       target={"url": url, "embedded": embedded,
                               "engine": (emulated and "infermeter-emulator") or None, "emulated": emulated,
                               **({"launch": m.launch} if m.launch else {})})
    run.pop("runtime", None)
    run.pop("server_metrics", None)
    if calibration is not None:
        run["calibration"] = calibration
    if m.soak:
        run["soak"] = m.soak
        run["segments"] = [{"started_at": run["started_at"], "first_index": 0, "shift_s": 0.0, "gap_s": 0.0}]
    return run


def runtime(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Runtime facts of a run from its workers' stats (one worker: its own)."""
    ok = [s for s in stats if "error" not in s]
    cpu = [s["client_cpu"] for s in ok if s.get("client_cpu") is not None]
    out: dict[str, Any] = {
        "sent": sum(s.get("sent", 0) for s in ok), "cap_held": sum(s.get("cap_held", 0) for s in ok),
        "max_in_flight": sum(s.get("max_in_flight", 0) for s in ok), "client_cpu": max(cpu) if cpu else None,
        "wall_s": max((s.get("wall_s", 0.0) for s in ok), default=0.0),
        "interrupted": any(s.get("interrupted") for s in ok) or len(ok) < len(stats)}
    for key in ("http_client", "event_loop"):  # how the requests were sent (client.openai, client.eventloop)
        seen = sorted({s[key] for s in ok if s.get(key)})
        if seen:
            out[key] = seen[0] if len(seen) == 1 else seen
    halted = next((s["halted"] for s in ok if s.get("halted")), None)
    if halted:
        out["halted"] = halted
    if len(stats) > 1 or any("clock_offset_s" in s for s in stats):
        out["workers"] = stats
    return out


MIN_REQUESTS_PER_STREAM = 2  # a closed loop where each stream sends fewer never holds its concurrency
MIN_OPEN_LOOP_S = 5.0  # an open loop sending for less leaves a queue no time to show


def _rate(r: float) -> str:
    return f"{r:,.0f}" if r >= 100 else f"{r:.3g}"


def sample_warnings(cfg: RunConfig, shape: BaseShape | None) -> list[str]:
    """Why ``cfg`` has too few requests for its load level or for the statistics it is judged on
    (empty when it has enough). Only runs that stop on ``--requests`` alone are judged here."""
    n = cfg.requests
    if n is None or cfg.duration_s is not None:
        return []
    out = []
    sent = n + cfg.warmup
    streams = shape.streams if shape is not None else None
    if streams is not None and sent < MIN_REQUESTS_PER_STREAM * streams:
        what = (f"only {sent} of the {streams} streams ever send" if sent < streams
                else f"each of the {streams} streams sends fewer than {MIN_REQUESTS_PER_STREAM}")
        out.append(f"too_few_requests: {n} requests" + (f" + {cfg.warmup} warmup" if cfg.warmup else "")
                   + f" at concurrency {streams}: {what}, so the load never holds at that level; "
                   f"use --requests {MIN_REQUESTS_PER_STREAM * streams} or more (10x the streams for steady state), "
                   "or --duration")
    rate = shape.mean_rate if shape is not None and shape.open_loop else None
    if rate and n / rate < MIN_OPEN_LOOP_S:
        out.append(f"too_few_requests: {n} requests at {_rate(rate)} req/s are sent in {n / rate:.1f} s, too short for a "
                   "queue to show that the server cannot keep up (a sweep or find-max can then report more than it "
                   f"sustains); use --requests {int(rate * MIN_OPEN_LOOP_S) + 1} or more, or --duration 30s")
    if cfg.load in ("sweep", "find-max") and cfg.slo:
        from infermeter.analysis.results import MIN_SAMPLES
        from infermeter.analysis.slo import percentile_key

        key = percentile_key(cfg.slo_percentile)
        if n < MIN_SAMPLES[key]:
            out.append(f"too_few_requests: --slo-percentile {cfg.slo_percentile:g} needs >= {MIN_SAMPLES[key]:,} "
                       f"requests per step to show that a step meets the SLO; --requests {n} gives at most {n}, so "
                       "every step misses it")
    return out


def check_samples(cfg: RunConfig, shape: BaseShape | None, notices: list[str], notify: Any,
                  strict: bool = True) -> list[str]:
    """Add :func:`sample_warnings` to ``notices`` (and say them); with --strict (and ``strict``) refuse instead."""
    found = sample_warnings(cfg, shape)
    if found and cfg.strict and strict:
        raise UserError(f"--strict: {found[0].removeprefix('too_few_requests: ')}")
    for w in found:
        notices.append(w)
        notify(w)
    return found


def check_fd_limit(cfg: RunConfig, shape: BaseShape, notices: list[str], notify: Any) -> dict[str, Any]:
    """Raise this client's open-file limit where allowed and refuse a run it cannot hold (``load.fdlimit``);
    the ``fd_limit`` block of run.json. A Ray run's actors hold their sockets on their own hosts: not checked."""
    if cfg.ray is not None:
        return {"checked": False, "basis": "Ray actors hold the sockets on their own hosts"}
    limits = Limits(requests=cfg.requests, warmup=cfg.warmup, max_concurrency=cfg.max_concurrency)
    info, warning = prepare_fd_limit(in_flight_bound(shape, limits), effective_workers(shape, cfg.workers))
    if warning:
        notices.append(warning)
        notify(warning)
    return info


async def check_capacity(m: Any, calibration: dict[str, Any] | None, notices: list[str]) -> dict[str, Any] | None:
    """Calibrate when the requested rate could matter; warn (or refuse with --strict) when it is too high."""
    cfg = m.cfg
    rate = requested_rate(m.shape)
    if not cfg.calibrate or rate is None:
        return calibration
    if calibration is None:
        first = [s.max_tokens for s in itertools.islice(m.workload.requests(), 32)]
        tokens = sum(first) / max(1, len(first))
        if not worth_calibrating(rate, tokens):
            return None
        m.notify(f"calibrating this client against the zero-delay emulator (requested {rate:g} req/s)")
        calibration = await calibrate(lambda: m.workload.requests())
    warning = capacity_warning(calibration, rate, cfg.workers, distributed=cfg.ray is not None)
    if warning:
        if cfg.strict:
            raise UserError(f"--strict: {warning}")
        notices.append(warning)
        m.notify(warning)
    return calibration
