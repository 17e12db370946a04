"""The measurement pipeline: one ``RunConfig`` in, one run directory out.

Composes the layers — workload (what), shape (when), client (how), records,
analysis — for ``infermeter run`` and for everything built on runs (sweeps,
campaigns, studies)::

    cfg = RunConfig(url="http://127.0.0.1:8000", concurrency=8, requests=100)
    result = asyncio.run(Measurement(cfg).run())
    result.summary["output_token_throughput"], result.run_dir

With no ``url`` it starts the embedded emulator in a child process and says so
in ``run.json`` (``target.emulated``). Records are journaled as they finish;
the summary is written at the end, also after Ctrl-C (``Measurement.stop()``).
A target that cannot be reached at all is a :class:`UserError` before any
request is sent.

The same entry point runs the bigger shapes of docs/load.md: ``load="sweep"``
and ``load="find-max"`` (one step per sub-directory ``steps/<k>/``, driven by
``measure_plan``), ``workers=N`` processes or ``ray=ADDRESS`` actors (one
striped schedule, merged exactly), soak storage (part files, checkpoints,
windows; ``soak_settings``) and ``Measurement.resume(DIR)``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from infermeter import __version__
from infermeter.analysis.summary import build_summary
from infermeter.client.openai import ClientConfig
from infermeter.client.session import make_session
from infermeter.errors import ConfigError, UserError
from infermeter.load.runner import Limits
from infermeter.load.shapes import (ConstantArrivalRate, ConstantConcurrency, RampingArrivalRate, Shape,
                                    TraceReplay)
from infermeter.load.stats import LiveStats
from infermeter.load.workers import WorkerPlan, WorkerRun, aligned_clock, effective_workers
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
    load: Literal["replay", "sweep", "find-max"] | None = None
    time_scale: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    grace_s: float = 30.0
    seed: int = 0
    # multi-step plans (docs/load.md)
    sweep_rates: int = Field(5, ge=0)
    search: Literal["rate", "concurrency"] = "rate"
    search_start: float | None = Field(None, gt=0)
    search_max: float | None = Field(None, gt=0)
    resolution: float = Field(0.05, gt=0, lt=1)
    max_steps: int = Field(12, ge=2)
    slo_percentile: float = 99.0
    max_error_rate: float = Field(0.01, ge=0, le=1)
    # scale: processes, Ray, client calibration
    workers: int = Field(1, ge=1)
    ray: str | None = None
    calibrate: bool = True
    strict: bool = False
    # soak storage
    window_s: float | None = Field(None, gt=0)
    checkpoint_s: float | None = Field(None, gt=0)
    part_records: int = Field(5000, ge=100)
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
    if cfg.load in ("sweep", "find-max"):
        raise ConfigError(f"--load {cfg.load} is a multi-step plan, not one shape (see build_plan)")
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


def requested_rate(shape: Shape) -> float | None:
    """The peak open-loop rate a shape asks for (None: closed loop or replay)."""
    if isinstance(shape, ConstantArrivalRate):
        return shape.rate_per_s
    if isinstance(shape, RampingArrivalRate):
        return max(shape.start_rate_per_s, shape.end_rate_per_s)
    return None


def soak_settings(cfg: RunConfig) -> dict[str, Any] | None:
    """Soak storage (parts, checkpoints, windows) for long runs or when asked; None for ordinary runs."""
    long_run = (cfg.duration_s or 0) >= 3600 or (cfg.requests or 0) >= 200_000
    if not (long_run or cfg.window_s or cfg.checkpoint_s):
        return None
    dur = cfg.duration_s or 0
    window = cfg.window_s or (3600.0 if dur >= 6 * 3600 else 300.0 if dur >= 3600 else 60.0)
    return {"window_s": window, "checkpoint_s": cfg.checkpoint_s or 60.0, "part_records": cfg.part_records}


def _build_workload(cfg: RunConfig) -> Any:
    from infermeter.workload import build_workload

    return build_workload(profile=cfg.profile, dataset=cfg.dataset, input_tokens=cfg.input_tokens,
                          output_tokens=cfg.output_tokens, prefix_tokens=cfg.prefix_tokens,
                          prefix_groups=cfg.prefix_groups, tokenizer=cfg.tokenizer, seed=cfg.seed, api=cfg.api)


def specs_for(cfg: RunConfig) -> Any:
    """The run's request specs (module level, so worker processes and Ray actors can rebuild them)."""
    return iter(_build_workload(cfg).requests())


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


def iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat()


class RunResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    run_dir: Path
    summary: dict[str, Any]
    run: dict[str, Any]


class Measurement:
    """One run (or one multi-step plan); ``stop()`` (e.g. from a SIGINT handler) ends it cleanly.

    ``notify`` receives one-line notices (calibration warnings, steps) for the console."""

    def __init__(self, cfg: RunConfig, live: LiveStats | None = None,
                 notify: Callable[[str], None] | None = None, resume_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.live: Any = live or LiveStats()
        self.notify = notify or (lambda msg: None)
        self.resume_dir = resume_dir
        self.stopped = False
        self._active: Any = None  # what stop() must reach: a worker, a pool, a step's Measurement
        self.clock: Callable[[], float] = aligned_clock(time.time())
        from infermeter.load.plans import build_plan

        self.plan = build_plan(cfg)
        self.shape = None if self.plan is not None else build_shape(cfg)
        self.workload = _build_workload(cfg)
        self.soak = soak_settings(cfg) if self.plan is None else None
        if cfg.ray is not None or cfg.workers > 1:
            if self.soak:
                raise ConfigError("--workers/--ray with soak storage (--window, --checkpoint, runs >= 1 h) is not "
                                  "supported yet; run the soak in one process")
            if cfg.load == "replay":
                raise ConfigError("--load replay runs in one process; drop --workers/--ray")

    @classmethod
    def resume(cls, run_dir: Path, api_key: str | None = None, **kw: Any) -> "Measurement":
        """A Measurement that continues the killed soak run in ``run_dir``."""
        from infermeter.load.plans import resume_config

        return cls(resume_config(Path(run_dir), api_key), resume_dir=Path(run_dir), **kw)

    def stop(self) -> None:
        self.stopped = True
        if self._active is not None:
            self._active.stop()

    def snapshot(self, now: float) -> dict[str, Any]:
        src = self._active if self._active is not None and hasattr(self._active, "snapshot") else None
        return src.snapshot(now) if src is not None and not isinstance(src, WorkerRun) else self.live.snapshot(now)

    async def run(self) -> RunResult:
        cfg = self.cfg
        with ExitStack() as stack:
            url = cfg.url
            if url is None:
                from infermeter.twin.process import EmulatorProcess

                url = stack.enter_context(EmulatorProcess(list(cfg.emulator_args))).base_url
            if self.plan is not None:
                from infermeter.load.plans import measure_plan

                return await measure_plan(self, url, cfg.url is None)
            return await self._run(url, cfg.url is None)

    async def _run(self, url: str, embedded: bool, calibration: dict[str, Any] | None = None) -> RunResult:
        from infermeter.load import plans

        cfg = self.cfg
        assert self.shape is not None
        async with make_session(connect_timeout_s=cfg.connect_timeout_s, max_connections=0) as session:
            headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
            model, model_info = await discover_model(session, url, headers)
            model = cfg.model or model
            if not model:
                raise UserError(f"{url}/v1/models gave no model id; pass --model")
            emulated = model_info.get("infermeter") if embedded or model_info.get("infermeter") else None
            label = cfg.label or f"{model}-{self.shape.describe().split(',')[0].replace(' ', '-')}"
            run_dir = self.resume_dir or (Path(cfg.out) if cfg.out else default_out_dir(label))
            if self.resume_dir is None and ((run_dir / store.SUMMARY).exists() or (run_dir / store.JOURNAL).exists()):
                raise ConfigError(f"--out {run_dir}: already holds a run; choose another directory")
            calibration = await plans.check_capacity(self, calibration)
            run_dir.mkdir(parents=True, exist_ok=True)
            run = plans.run_header(self, url, embedded, model, label, emulated, calibration)
            if self.resume_dir is not None:
                run = store.read_json(run_dir / store.RUN) | {"config": cfg.public()}
            store.write_json(run_dir / store.RUN, run)
            client = ClientConfig(base_url=url, model=model, api=cfg.api, api_key=cfg.api_key, ignore_eos=cfg.ignore_eos,
                                  temperature=cfg.temperature, extra_body=cfg.extra_body,
                                  connect_timeout_s=cfg.connect_timeout_s, first_token_timeout_s=cfg.first_token_timeout_s,
                                  total_timeout_s=cfg.timeout_s)
            limits = Limits(requests=cfg.requests, duration_s=cfg.duration_s, warmup=cfg.warmup,
                            max_concurrency=cfg.max_concurrency, grace_s=cfg.grace_s)
            n = cfg.workers if cfg.ray else effective_workers(self.shape, cfg.workers)
            wplan = WorkerPlan(client=client, shape=self.shape, limits=limits, seed=cfg.seed, workers=n,
                               make_specs=partial(specs_for, cfg), connect_timeout_s=cfg.connect_timeout_s)
            scraper = await self._start_scraper(session, url)
            try:
                if self.soak:
                    from infermeter.load.plans import execute_soak

                    summary = await execute_soak(self, wplan, run_dir, run)
                else:
                    worker_stats = await self._execute(wplan, run_dir, run)
            finally:
                server_metrics = await self._stop_scraper(scraper, run_dir)
        if server_metrics is not None:
            run["server_metrics"] = server_metrics
        if self.soak:
            summary.update({k: run[k] for k in ("server_metrics",) if k in run})
        else:
            run["runtime"] = plans.runtime(worker_stats)
            table = self._collect(run_dir, run, n)
            summary = build_summary(table, run=run)
        summary["run_dir"] = str(run_dir)
        summary["warnings"] = list(summary.get("warnings") or []) + run.get("notices", [])
        if cfg.alerts:
            summary["alerts"] = _evaluate_alerts(cfg.alerts, summary)
        store.write_json(run_dir / store.RUN, run)
        store.write_json(run_dir / store.SUMMARY, summary)
        return RunResult(run_dir=run_dir, summary=summary, run=run)

    def _on_start(self, run: dict[str, Any]) -> Callable[[float], None]:
        def on_start(start_wall: float) -> None:
            self.clock = aligned_clock(start_wall)
            if self.resume_dir is None:
                run["t0_unix"] = start_wall
                run["started_at"] = iso(start_wall)
        return on_start

    async def _execute(self, wplan: WorkerPlan, run_dir: Path, run: dict[str, Any], sink: Any = None,
                       start_wall: float | None = None) -> list[dict[str, Any]]:
        on_start = self._on_start(run)
        if self.cfg.ray is not None:
            from infermeter.load.ray_backend import RayPool

            pool: Any = RayPool(wplan, run_dir, self.cfg.ray)
        elif wplan.workers > 1:
            from infermeter.load.workers import ProcessPool

            pool = ProcessPool(wplan, run_dir)
        else:
            work = WorkerRun(wplan, 0, run_dir, sink=sink, live=self.live)
            self._active = work
            work.prepare()
            t0 = start_wall if start_wall is not None else time.time()
            on_start(t0)
            if self.stopped:
                work.stop()
            return [await work.run(t0)]
        self._active = pool
        self.live = pool.live
        if self.stopped:
            pool.stop()
        return list(await pool.run(on_start=on_start))

    def _collect(self, run_dir: Path, run: dict[str, Any], n: int) -> Any:
        """Records -> requests.parquet: the journal, or the workers' journals merged exactly."""
        if not (run_dir / "workers").is_dir():
            return store.finalize(run_dir)
        from infermeter.load.workers import merge_records, worker_tables

        cfg = self.cfg
        interrupted = bool((run.get("runtime") or {}).get("interrupted"))
        expected = cfg.requests + cfg.warmup if cfg.requests is not None and not interrupted and not cfg.duration_s else None
        table, report = merge_records(worker_tables(run_dir, n), expected)
        run["runtime"]["merge"] = report
        if report.get("missing"):
            run.setdefault("notices", []).append(f"merge: {report['missing']} requests have no record (a worker died?)")
        store.write_table(run_dir, table)
        shutil.rmtree(run_dir / "workers", ignore_errors=True)
        return table

    async def _start_scraper(self, session: aiohttp.ClientSession, url: str) -> Any:
        if not self.cfg.scrape:
            return None
        try:
            from infermeter.telemetry.scraper import MetricsScraper
        except ImportError:
            return None
        scraper = MetricsScraper(url, interval_s=self.cfg.scrape_interval_s, now=lambda: self.clock())
        await scraper.start(session)
        return scraper

    async def _stop_scraper(self, scraper: Any, run_dir: Path) -> dict[str, Any] | None:
        if scraper is None:
            return None
        await scraper.stop()
        scraper.write(run_dir)
        return scraper.summary()


def _evaluate_alerts(alerts: tuple[str, ...], summary: dict[str, Any]) -> list[dict[str, Any]]:
    from infermeter.analysis.alerts import evaluate_alerts, parse_alert

    return evaluate_alerts([parse_alert(a) for a in alerts], summary, [])


def summarize_dir(run_dir: Path) -> dict[str, Any]:
    """Rebuild summary.json from what is on disk (also for killed runs, worker runs and soak runs)."""
    run_dir = Path(run_dir)
    run = store.read_json(run_dir / store.RUN) if (run_dir / store.RUN).exists() else {}
    if (run_dir / "parts").is_dir() or run.get("soak"):
        from infermeter.load.plans import summarize_soak

        summary = summarize_soak(run_dir, run)
    else:
        if (run_dir / "workers").is_dir():
            from infermeter.load.workers import merge_records, worker_tables

            table, _ = merge_records(worker_tables(run_dir))
            store.write_table(run_dir, table)
            shutil.rmtree(run_dir / "workers", ignore_errors=True)
        table = store.finalize(run_dir) if (run_dir / store.JOURNAL).exists() else store.load_table(run_dir)
        summary = build_summary(table, run=run)
    summary["run_dir"] = str(run_dir)
    store.write_json(run_dir / store.SUMMARY, summary)
    return summary


__all__ = ["RunConfig", "Measurement", "RunResult", "build_shape", "parse_slo", "summarize_dir", "specs_for",
           "soak_settings", "requested_rate", "json", "asyncio"]
