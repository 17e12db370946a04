"""The measurement pipeline: one ``RunConfig`` in, one run directory out.

Composes the layers — workload (what), shape (when), client (how), records,
analysis — for ``infermeter run`` and for everything built on runs (sweeps,
campaigns, studies)::

    cfg = RunConfig(url="http://127.0.0.1:8000", concurrency=8, requests=100)
    result = asyncio.run(measure(cfg))
    result.summary["output_token_throughput"], result.run_dir

With no ``url`` it starts the embedded emulator in a child process and says so
in ``run.json`` (``target.emulated``). Records are journaled as they finish;
the summary is written at the end, also after Ctrl-C (``Measurement.stop()``).
A target that cannot be reached at all is a :class:`UserError` before any
request is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import aiohttp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from infermeter import __version__
from infermeter.analysis.summary import build_summary
from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.client.session import make_session
from infermeter.errors import ConfigError, UserError
from infermeter.load.runner import Limits, Runner, RunStats
from infermeter.load.shapes import (ConstantArrivalRate, ConstantConcurrency, RampingArrivalRate, Shape,
                                    TraceReplay)
from infermeter.load.stats import LiveStats
from infermeter.records import store


class RunConfig(BaseModel):
    """Everything ``infermeter run`` needs; see ``infermeter run --help`` for each field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = None
    model: str | None = None
    api: Literal["chat", "completions"] = "chat"
    api_key: str | None = Field(default=None, exclude=True, repr=False)
    ignore_eos: bool = False
    temperature: float | None = None
    extra_body: dict[str, Any] = {}
    # load
    concurrency: int | None = None
    rate: float | None = None
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = 1.0
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    max_concurrency: int | None = None
    load: Literal["replay"] | None = None
    time_scale: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    grace_s: float = 30.0
    seed: int = 0
    # workload
    profile: str | None = None
    dataset: str | None = None
    tokenizer: str | None = None
    input_tokens: str | None = None
    output_tokens: str | None = None
    prefix_tokens: int | None = None
    prefix_groups: int | None = None
    # timeouts (s)
    connect_timeout_s: float = 10.0
    first_token_timeout_s: float | None = 120.0
    timeout_s: float | None = 600.0
    # analysis / output
    slo: dict[str, float] = {}
    alerts: tuple[str, ...] = ()
    out: str | None = None
    label: str | None = None
    scrape: bool = True
    scrape_interval_s: float = 1.0
    emulator_args: tuple[str, ...] = ()
    hardware: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"--url {v!r}: expected http(s)://HOST[:PORT]")
        return v.rstrip("/").removesuffix("/v1") if v else v

    def public(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        d["api_key"] = "***" if self.api_key else None
        return d


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_ms=500,tpot_ms=50,e2e_ms=10000`` -> dict; ConfigError naming --slo when malformed."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep or k not in ("ttft_ms", "tpot_ms", "e2e_ms"):
            raise ConfigError(f"--slo: {part!r} is not one of ttft_ms=, tpot_ms=, e2e_ms=")
        try:
            out[k] = float(v)
        except ValueError:
            raise ConfigError(f"--slo: {k} value {v!r} is not a number") from None
        if out[k] <= 0:
            raise ConfigError(f"--slo: {k} must be > 0")
    return out


def build_shape(cfg: RunConfig) -> Shape:
    """Desugar the load flags into one shape; conflicting flags are an error naming both."""
    ramp = cfg.ramp_up_strategy is not None
    given = [n for n, v in (("--concurrency", cfg.concurrency), ("--rate", cfg.rate),
                            ("--ramp-up-strategy", cfg.ramp_up_strategy), ("--load replay", cfg.load)) if v is not None]
    if len(given) > 1:
        raise ConfigError(f"{given[0]} and {given[1]} both set a load shape; use one")
    if cfg.burstiness != 1.0 and cfg.arrival != "gamma":
        raise ConfigError(f"--burstiness {cfg.burstiness:g} needs --arrival gamma (poisson is gamma with k=1)")
    if cfg.requests is None and cfg.duration_s is None and cfg.load != "replay":
        raise ConfigError("give --requests N and/or --duration S so the run knows when to stop")
    if cfg.load == "replay":
        return TraceReplay(time_scale=cfg.time_scale)
    if ramp:
        if cfg.ramp_up_start_rps is None or cfg.ramp_up_end_rps is None:
            raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        a, b = cfg.ramp_up_start_rps, cfg.ramp_up_end_rps
        if a < 0 or b <= 0:
            raise ConfigError("--ramp-up-start-rps must be >= 0 and --ramp-up-end-rps > 0")
        if cfg.duration_s is not None:
            ramp_s = cfg.duration_s
        else:
            ramp_s = RampingArrivalRate.ramp_for_requests(cfg.ramp_up_strategy, a, b, cfg.requests or 1)  # type: ignore[arg-type]
        try:
            return RampingArrivalRate(strategy=cfg.ramp_up_strategy, start_rate_per_s=a, end_rate_per_s=b,
                                      ramp_s=ramp_s, arrival=cfg.arrival, burstiness=cfg.burstiness)
        except ValueError as exc:
            raise ConfigError(str(exc).splitlines()[-1]) from None
    if cfg.rate is not None:
        if cfg.rate <= 0:
            raise ConfigError(f"--rate must be > 0, got {cfg.rate:g}")
        return ConstantArrivalRate(rate_per_s=cfg.rate, arrival=cfg.arrival, burstiness=cfg.burstiness)
    n = cfg.concurrency if cfg.concurrency is not None else 1
    if n < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {n}")
    return ConstantConcurrency(concurrency=n)


def _build_workload(cfg: RunConfig) -> Any:
    from infermeter.workload import build_workload

    return build_workload(profile=cfg.profile, dataset=cfg.dataset, input_tokens=cfg.input_tokens,
                          output_tokens=cfg.output_tokens, prefix_tokens=cfg.prefix_tokens,
                          prefix_groups=cfg.prefix_groups, tokenizer=cfg.tokenizer, seed=cfg.seed, api=cfg.api)


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


async def discover_model(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    """First model id from /v1/models (None when the server has no such endpoint)."""
    try:
        async with session.get(url + "/v1/models", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return None, {}
            body = await r.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        raise UserError(f"cannot reach {url}: {exc.os_error or exc}") from None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None, {}
    data = body.get("data") if isinstance(body, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict) and data[0].get("id"):
        return str(data[0]["id"]), data[0]
    return None, {}


class RunResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    run_dir: Path
    summary: dict[str, Any]
    run: dict[str, Any]


class Measurement:
    """One run; ``stop()`` (e.g. from a SIGINT handler) ends it cleanly."""

    def __init__(self, cfg: RunConfig, live: LiveStats | None = None) -> None:
        self.cfg = cfg
        self.live = live or LiveStats()
        self.runner: Runner | None = None
        self.stopped = False
        self.shape = build_shape(cfg)
        self.workload = _build_workload(cfg)

    def stop(self) -> None:
        self.stopped = True
        if self.runner is not None:
            self.runner.stop()

    async def run(self) -> RunResult:
        cfg = self.cfg
        with ExitStack() as stack:
            url = cfg.url
            emulated = None
            if url is None:
                from infermeter.twin.process import EmulatorProcess

                emu = stack.enter_context(EmulatorProcess(list(cfg.emulator_args)))
                url = emu.base_url
            return await self._run(url, cfg.url is None)

    async def _run(self, url: str, embedded: bool) -> RunResult:
        cfg = self.cfg
        t_perf0 = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - t_perf0

        peak = cfg.concurrency or cfg.max_concurrency or 0
        async with make_session(connect_timeout_s=cfg.connect_timeout_s, max_connections=0) as session:
            headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
            model, model_info = await discover_model(session, url, headers)
            if cfg.model:
                model = cfg.model
            if not model:
                raise UserError(f"{url}/v1/models gave no model id; pass --model")
            emulated = model_info.get("infermeter") if embedded or model_info.get("infermeter") else None
            label = cfg.label or f"{model}-{self.shape.describe().split(',')[0].replace(' ', '-')}"
            run_dir = Path(cfg.out) if cfg.out else default_out_dir(label)
            if (run_dir / store.SUMMARY).exists() or (run_dir / store.JOURNAL).exists():
                raise ConfigError(f"--out {run_dir}: already holds a run; choose another directory")
            run_dir.mkdir(parents=True, exist_ok=True)
            load_desc: dict[str, Any] = {
                **self.shape.model_dump(mode="json"), "describe": self.shape.describe(),
                "open_loop": not isinstance(self.shape, ConstantConcurrency),
                "target_rate": getattr(self.shape, "rate_per_s", None), "limits": {
                    "requests": cfg.requests, "duration_s": cfg.duration_s, "warmup": cfg.warmup,
                    "max_concurrency": cfg.max_concurrency}}
            run: dict[str, Any] = {
                "schema_version": 1, "tool": "infermeter", "version": __version__, "source": "measured",
                "label": label, "started_at": datetime.now(timezone.utc).isoformat(), "seed": cfg.seed,
                "model": model, "hardware": cfg.hardware or ((emulated or {}).get("hardware")),
                "profile": (self.workload.describe() or {}).get("profile"),
                "target": {"url": url, "embedded": embedded, "engine": (emulated and "infermeter-emulator") or None,
                           "emulated": emulated},
                "load": load_desc, "workload": self.workload.describe(), "host": host_info(),
                "slo": cfg.slo, "config": cfg.public(),
            }
            store.write_json(run_dir / store.RUN, run)
            client = OpenAIClient(ClientConfig(base_url=url, model=model, api=cfg.api, api_key=cfg.api_key,
                                               ignore_eos=cfg.ignore_eos, temperature=cfg.temperature,
                                               extra_body=cfg.extra_body, connect_timeout_s=cfg.connect_timeout_s,
                                               first_token_timeout_s=cfg.first_token_timeout_s,
                                               total_timeout_s=cfg.timeout_s), session, clock)
            journal = store.Journal(run_dir)
            limits = Limits(requests=cfg.requests, duration_s=cfg.duration_s, warmup=cfg.warmup,
                            max_concurrency=cfg.max_concurrency, grace_s=cfg.grace_s)
            self.runner = Runner(send=client.send, specs=iter(self.workload.requests()), shape=self.shape,
                                 limits=limits, clock=clock, on_record=journal.write,
                                 rng=np.random.default_rng(cfg.seed), live=self.live)
            self.clock = clock
            if self.stopped:
                self.runner.stop()
            scraper = await self._start_scraper(session, url, clock)
            try:
                stats = await self.runner.run()
            finally:
                journal.close()
                server_metrics = await self._stop_scraper(scraper, run_dir)
        run["runtime"] = _runtime(stats)
        if server_metrics is not None:
            run["server_metrics"] = server_metrics
        table = store.finalize(run_dir)
        summary = build_summary(table, run=run)
        summary["run_dir"] = str(run_dir)
        if cfg.alerts:
            summary["alerts"] = _evaluate_alerts(cfg.alerts, summary)
        store.write_json(run_dir / store.RUN, run)
        store.write_json(run_dir / store.SUMMARY, summary)
        return RunResult(run_dir=run_dir, summary=summary, run=run)

    async def _start_scraper(self, session: aiohttp.ClientSession, url: str, clock: Any) -> Any:
        if not self.cfg.scrape:
            return None
        try:
            from infermeter.telemetry.scraper import MetricsScraper
        except ImportError:
            return None
        scraper = MetricsScraper(url, interval_s=self.cfg.scrape_interval_s, now=clock)
        await scraper.start(session)
        return scraper

    async def _stop_scraper(self, scraper: Any, run_dir: Path) -> dict[str, Any] | None:
        if scraper is None:
            return None
        await scraper.stop()
        scraper.write(run_dir)
        return scraper.summary()


def _runtime(stats: RunStats) -> dict[str, Any]:
    return {"sent": stats.sent, "cap_held": stats.cap_held, "max_in_flight": stats.max_in_flight,
            "client_cpu": stats.client_cpu, "wall_s": stats.wall_s, "interrupted": stats.interrupted}


def _evaluate_alerts(alerts: tuple[str, ...], summary: dict[str, Any]) -> list[dict[str, Any]]:
    from infermeter.analysis.alerts import evaluate_alerts, parse_alert

    return evaluate_alerts([parse_alert(a) for a in alerts], summary, [])


def summarize_dir(run_dir: Path) -> dict[str, Any]:
    """Rebuild summary.json from what is on disk (also for killed runs)."""
    run_dir = Path(run_dir)
    run = store.read_json(run_dir / store.RUN) if (run_dir / store.RUN).exists() else {}
    table = store.finalize(run_dir) if (run_dir / store.JOURNAL).exists() else store.load_table(run_dir)
    summary = build_summary(table, run=run)
    summary["run_dir"] = str(run_dir)
    store.write_json(run_dir / store.SUMMARY, summary)
    return summary


__all__ = ["RunConfig", "Measurement", "RunResult", "build_shape", "parse_slo", "summarize_dir", "json"]
