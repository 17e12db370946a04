"""``Measurement``: one run of a ``RunConfig`` against a server, start to ``summary.json``.

Discovers the model, writes ``run.json``, runs the schedule — in this process,
in ``--workers N`` processes or as ``--ray`` actors (``load.workers``,
``load.ray_backend``), with soak storage when the run is long
(``measure.soak``) — and turns the records into the summary. Multi-step plans
go to ``measure.plans``. ``stop()`` ends any of them cleanly::

    m = Measurement(RunConfig(url=url, rate=50, duration_s=30, workers=2))
    result = asyncio.run(m.run())            # RunResult(run_dir, summary, run)
    Measurement.resume(run_dir)              # a killed soak run, continued

Every run's clock reads 0 at ``run.json``'s ``t0_unix`` (wall time); worker
processes and Ray actors share it (a start barrier at one wall time).

``--out`` is claimed for one run before anything is written (``records.outputs.claim_run_dir``:
a second run into it is refused, never merged). Records that cannot be written (disk full, I/O
error) stop the run once; what was written is kept and summarised, and ``run`` raises
:class:`~infermeter.errors.ResultsWriteError` saying so (exit 4).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic import BaseModel, ConfigDict

from infermeter.analysis.accumulator import Accumulator, build_summary
from infermeter.analysis.results import Summary
from infermeter.analysis.verdict import scrape_findings
from infermeter.client.errors import auth_hint
from infermeter.client.openai import ClientConfig
from infermeter.client.session import make_session
from infermeter.errors import ConfigError, ResultsWriteError, UserError
from infermeter.load.runner import Limits
from infermeter.load.stats import LiveStats
from infermeter.load.workers import WorkerPlan, WorkerRun, aligned_clock, effective_workers
from infermeter.measure.config import (
    RunConfig,
    build_plan,
    build_shape,
    build_workload,
    resume_config,
    soak_settings,
    specs_for,
    with_prompt_salt,
)
from infermeter.measure.header import (
    check_capacity,
    check_fd_limit,
    check_samples,
    default_label,
    default_out_dir,
    discover_model,
    run_header,
    runtime,
)
from infermeter.records import store
from infermeter.records.outputs import claim_run_dir, why

if TYPE_CHECKING:  # annotations only: _start_scraper imports it where it runs, an ImportError meaning no scraping
    from infermeter.telemetry.scraper import MetricsScraper


class RunResult(BaseModel):
    """What a run left: its directory, its validated ``summary``, and ``summary_json``, the object
    summary.json holds as written (key order too: ``run --json`` prints it), and its ``run.json``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    run_dir: Path
    summary: Summary
    summary_json: dict[str, Any]
    run: dict[str, Any]


def iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat()


class Measurement:
    """One run (or one multi-step plan); see the module docstring.

    ``notify`` receives one-line notices (calibration warnings, steps) for the console; ``launch`` is what an
    engine infermeter started runs (:attr:`infermeter.engines.target.LiveTarget.launch`), written into
    ``run.json`` as ``target.launch``."""

    def __init__(self, cfg: RunConfig, live: LiveStats | None = None,
                 notify: Callable[[str], None] | None = None, resume_dir: Path | None = None,
                 launch: dict[str, Any] | None = None) -> None:
        cfg = with_prompt_salt(cfg)  # new prompt text per run unless --prompt-salt says otherwise
        self.cfg = cfg
        self.live: Any = live or LiveStats()
        self.notify = notify or (lambda msg: None)
        self.resume_dir = resume_dir
        self.launch = dict(launch) if launch else None
        self.stopped = False
        self.auth_failure: dict[str, Any] | None = None  # the first requests got HTTP 401/403
        self.write_failure: dict[str, Any] | None = None  # records could not be written: the run stopped
        self._claims = ExitStack()  # the claim on --out, held while the run writes there
        self.in_plan = False  # a step of a sweep / find-max (its plan checked --strict before it started)
        self.early_failure: dict[str, Any] | None = None  # the first requests all got one other 4xx
        self.signal: int | None = None  # the signal that stopped it (set by the CLI's handler)
        self._active: Any = None  # what stop() must reach: a worker, a pool, a step's Measurement
        self.clock: Callable[[], float] = aligned_clock(time.time())
        self.plan = build_plan(cfg)
        self.shape = None if self.plan is not None else build_shape(cfg)
        self.workload = build_workload(cfg)
        self.soak = soak_settings(cfg) if self.plan is None else None
        if cfg.ray is not None or cfg.workers > 1:
            if self.soak:
                raise ConfigError("--workers/--ray with soak storage (--window, --checkpoint, runs >= 1 h) is not "
                                  "supported yet; run the soak in one process")
            if cfg.load == "replay":
                raise ConfigError("--load replay runs in one process; drop --workers/--ray")

    @classmethod
    def resume(cls, run_dir: Path, api_key: str | None = None, **kw: Any) -> Measurement:
        """A Measurement that continues the killed soak run in ``run_dir``."""
        return cls(resume_config(Path(run_dir), api_key), resume_dir=Path(run_dir), **kw)

    def stop(self) -> None:
        self.stopped = True
        if self._active is not None:
            self._active.stop()

    def snapshot(self) -> dict[str, Any]:
        """Live figures for the progress display (of the step running now, for plans)."""
        if isinstance(self._active, Measurement):
            return self._active.snapshot()
        return dict(self.live.snapshot(self.clock()))

    async def run(self) -> RunResult:
        cfg = self.cfg
        with ExitStack() as stack:
            url = cfg.url
            if url is None:
                from infermeter.engines.emulator.process import EmulatorProcess
                from infermeter.load.fdlimit import raise_fd_limit

                raise_fd_limit()  # the embedded emulator holds a socket for each request too
                url = stack.enter_context(EmulatorProcess(list(cfg.emulator_args))).base_url
            if self.plan is not None:
                from infermeter.measure.plans import measure_plan

                with self._claims:
                    return await measure_plan(self, url, cfg.url is None)
            return await self.run_on(url, cfg.url is None)

    async def run_on(self, url: str, embedded: bool, calibration: dict[str, Any] | None = None) -> RunResult:
        """Measure the server at ``url`` (a step of a plan passes the plan's calibration)."""
        with self._claims:
            return await self._run_on(url, embedded, calibration)

    async def _run_on(self, url: str, embedded: bool, calibration: dict[str, Any] | None) -> RunResult:
        cfg = self.cfg
        assert self.shape is not None
        async with make_session(connect_timeout_s=cfg.connect_timeout_s, max_connections=0) as session:
            headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
            model, model_info = await discover_model(session, url, headers, wanted=cfg.model)
            model = cfg.model or model
            if not model:
                raise UserError(f"{url}/v1/models gave no model id; pass --model")
            emulated = model_info.get("infermeter") if embedded or model_info.get("infermeter") else None
            label = cfg.label or default_label(model, url, embedded, self.shape, self.workload.describe())
            run_dir = self.resume_dir or (Path(cfg.out) if cfg.out else default_out_dir(label))
            if self.resume_dir is None:  # atomic: of two runs started together into one --out, one is refused
                run_dir = self._claims.enter_context(claim_run_dir(run_dir, fresh=not cfg.out))
            notices: list[str] = []
            calibration = await check_capacity(self, calibration, notices)
            few = check_samples(cfg, self.shape, notices, self.notify, strict=not self.in_plan)
            fd_limit = check_fd_limit(cfg, self.shape, notices, self.notify)
            run_dir.mkdir(parents=True, exist_ok=True)
            if self.resume_dir is not None:
                run = store.read_json(run_dir / store.RUN) | {"config": cfg.public()}
            else:
                run = run_header(self, url, embedded, model, label, emulated, calibration)
            if notices:
                run["notices"] = notices
            run["fd_limit"] = fd_limit
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
            gpu = await self._start_gpu(session)
            try:
                if self.soak:
                    from infermeter.measure.soak import execute_soak

                    summary = await execute_soak(self, wplan, run_dir, run)
                else:
                    run["runtime"] = runtime(await self.execute(wplan, run_dir, run))
            finally:
                try:
                    server_metrics = await self._stop_scraper(scraper, run_dir)
                finally:
                    if gpu is not None:
                        await gpu.stop()
                        gpu.write(run_dir)
        if server_metrics is not None:
            run["server_metrics"] = server_metrics
        if self.soak:
            summary["server_metrics"] = server_metrics
            # the soak's summary was judged before the scraper stopped: its scrape findings join it here
            for finding in scrape_findings(run):
                summary.setdefault("warnings", []).append(finding.line())
                summary.setdefault("findings", []).append(finding.model_dump(mode="json"))
        else:
            summary = build_summary(self._collect(run_dir, run, n), run=run).to_json()
        summary["run_dir"] = str(run_dir)
        summary.setdefault("warnings", []).extend(w for w in few if w not in summary.get("warnings", []))
        warm = warm_cache_warning(summary.get("server_metrics"), self.workload.describe(), cfg.prompt_salt)
        if warm:
            summary.setdefault("warnings", []).append(warm)
            self.notify(warm)
        if gpu is not None:
            summary["gpu"] = run["gpu"] = gpu.summary(output_tokens=summary.get("total_output_tokens") or 0)
        if cfg.alerts:
            summary["alerts"], notes = alert_results(cfg.alerts, run_dir, run, Summary.from_json(summary), scraper)
            summary.setdefault("warnings", []).extend(notes)
        if self.write_failure:
            summary.setdefault("warnings", []).append(
                f"write_failed: the run stopped when records could not be written ({self.write_failure['error']}); "
                f"{self.write_failure['unwritten']} requests that ended after that have no record")
            run.setdefault("runtime", {})["write_failure"] = self.write_failure
        try:
            store.write_json(run_dir / store.RUN, run)
            store.write_json(run_dir / store.SUMMARY, summary)
        except OSError as exc:
            if self.write_failure is None:
                raise
            self.write_failure["summary_error"] = why(exc)
        if self.write_failure:
            raise self._write_failed(run_dir, summary)
        if self.auth_failure:
            fail = self.auth_failure
            raise UserError(f"{url}: {fail.get('detail') or 'HTTP ' + str(fail.get('status'))} on the first requests; "
                            f"{auth_hint(int(fail.get('status') or 401), bool(cfg.api_key))} "
                            f"(run stopped; {summary['failed']} failed requests recorded in {run_dir})")
        if self.early_failure:
            fail = self.early_failure
            raise UserError(f"{url}: the first {fail.get('count')} requests to finish all failed with "
                            f"{fail.get('detail') or 'HTTP ' + str(fail.get('status'))} (run stopped; "
                            f"{summary['failed']} failed requests recorded in {run_dir})")
        if cfg.history:
            self._index(run_dir)
        return RunResult(run_dir=run_dir, summary=Summary.from_json(summary), summary_json=summary, run=run)

    def _index(self, run_dir: Path) -> None:
        """Add the run to the history database; a missing DuckDB or a locked file only warns."""
        try:
            from infermeter.report.history import index_run

            index_run(run_dir)
        except (UserError, OSError, ImportError) as exc:
            self.notify(f"history: not indexed ({exc})")

    async def _start_gpu(self, session: aiohttp.ClientSession) -> Any:
        if not self.cfg.gpu:
            return None
        from infermeter.telemetry.gpu import GpuSampler

        sampler = GpuSampler(interval_s=self.cfg.scrape_interval_s, now=lambda: self.clock(), dcgm_url=self.cfg.dcgm_url)
        await sampler.start(session)
        return sampler

    async def execute(self, wplan: WorkerPlan, run_dir: Path, run: dict[str, Any], sink: Any = None,
                      start_wall: float | None = None) -> list[dict[str, Any]]:
        """Run the schedule here, in processes or on Ray; one stats dict per worker."""
        def on_start(wall: float) -> None:
            self.clock = aligned_clock(wall)
            if self.resume_dir is None:
                run["t0_unix"] = wall
                run["started_at"] = iso(wall)
                if "segments" in run:
                    run["segments"][0]["started_at"] = run["started_at"]
                store.write_json(run_dir / store.RUN, run)  # a killed run's clock must be known on disk

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
            return self._note_halts([await work.run(t0)])
        self._active = pool
        self.live = pool.live
        if self.stopped:
            pool.stop()
        return self._note_halts(list(await pool.run(on_start=on_start)))

    def _note_halts(self, stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep why a worker stopped itself (an auth failure, one 4xx for every first request, a failed
        write) for after the summary is written."""
        self.early_failure = self.early_failure or next((s["early_failure"] for s in stats if s.get("early_failure")), None)
        self.auth_failure = self.auth_failure or next((s["auth_failure"] for s in stats if s.get("auth_failure")), None)
        failed = [s["write_failure"] for s in stats if s.get("write_failure")]
        if failed and self.write_failure is None:
            self.write_failure = dict(failed[0]) | {"unwritten": sum(int(f.get("unwritten") or 0) for f in failed)}
        return stats

    def _write_failed(self, run_dir: Path, summary: dict[str, Any]) -> ResultsWriteError:
        """The one line for a run stopped by a failed write: what failed, and what is kept where."""
        f = self.write_failure or {}
        kept = f.get("kept")
        where = f" ({f['path']})" if f.get("path") else ""
        if f.get("summary_error"):
            held = (f"kept in {run_dir} (summary.json could not be written either: {f['summary_error']}; "
                    f"`infermeter summarize {run_dir}` once there is room)")
        else:
            held = f"kept and summarised in {run_dir / store.SUMMARY}"
        lost = f"; {f['unwritten']:,} that ended after the failure have no record" if f.get("unwritten") else ""
        count = f"{kept:,} " if isinstance(kept, int) else ""
        return ResultsWriteError(f"{run_dir}: records cannot be written: {f.get('error')}{where}; the run stopped "
                                 f"sending. The {count}records written are {held}{lost}", summary)

    def _collect(self, run_dir: Path, run: dict[str, Any], n: int) -> Any:
        """Records -> requests.parquet: the journal, or the workers' journals merged exactly. After a failed
        write the records stay where they are (journals) when requests.parquet cannot be written either."""
        try:
            table = self._collect_files(run_dir, run, n)
        except OSError:
            if self.write_failure is None:
                raise
            if (run_dir / "workers").is_dir():
                from infermeter.load.workers import merge_records, worker_tables

                table = merge_records(worker_tables(run_dir, n))[0]
            else:
                table = store.load_table(run_dir)
        if self.write_failure is not None:
            self.write_failure["kept"] = table.num_rows
        return table

    def _collect_files(self, run_dir: Path, run: dict[str, Any], n: int) -> Any:
        if not (run_dir / "workers").is_dir():
            return store.finalize(run_dir)
        from infermeter.load.workers import merge_records, worker_tables

        cfg = self.cfg
        complete = not run["runtime"].get("interrupted") and not run["runtime"].get("halted") and cfg.duration_s is None
        expected = cfg.requests + cfg.warmup if complete and cfg.requests is not None else None
        table, report = merge_records(worker_tables(run_dir, n), expected)
        run["runtime"]["merge"] = report
        if report.get("missing"):
            run.setdefault("notices", []).append(f"merge: {report['missing']} requests have no record (a worker died?)")
        store.write_table(run_dir, table)
        shutil.rmtree(run_dir / "workers", ignore_errors=True)
        return table

    async def _start_scraper(self, session: aiohttp.ClientSession, url: str) -> MetricsScraper | None:
        if not self.cfg.scrape:
            return None
        try:
            from infermeter.telemetry.scraper import MetricsScraper
        except ImportError:
            return None
        scraper = MetricsScraper(url, interval_s=self.cfg.scrape_interval_s, now=lambda: self.clock(),
                                 max_bytes=int(self.cfg.scrape_max_mb * 2**20))
        await scraper.start()  # on its own thread and session: never on this loop
        return scraper

    async def _stop_scraper(self, scraper: MetricsScraper | None, run_dir: Path) -> dict[str, Any] | None:
        if scraper is None:
            return None
        await scraper.stop()
        try:
            scraper.write(run_dir)
        except OSError:
            if self.write_failure is None:  # after a failed write its failure is the one said
                raise
        return scraper.summary()


WARM_CACHE_HIT_RATE = 0.10  # a workload that shares no prefixes should see (almost) no prefix-cache hits


def warm_cache_warning(server_metrics: Mapping[str, Any] | None, workload: dict[str, Any],
                       prompt_salt: int | None) -> str | None:
    """A warning when the server's prefix-cache hit rate (of the summary's ``server_metrics``) is high on a
    workload that shares no prefixes: the cache held these prompts before the run (an earlier run with the
    same seed and salt)."""
    hit = (server_metrics or {}).get("prefix_cache_hit_rate")
    if workload.get("shares_prefixes") is not False or not isinstance(hit, (int, float)) or hit <= WARM_CACHE_HIT_RATE:
        return None
    why = ("the same --seed with --prompt-salt 0 sends the same text every run" if not prompt_salt else
           f"an earlier run sent these prompts (--prompt-salt {prompt_salt})")
    return (f"prefix_cache_warm: the server's prefix-cache hit rate was {hit:.0%} on a workload whose prompts share "
            f"no prefix, so its cache was warm ({why}); latencies are too low. Reset the cache between runs (vLLM "
            "and the emulator: POST /reset_prefix_cache, vLLM with VLLM_SERVER_DEV_MODE=1) or leave --prompt-salt "
            "unset for new text each run")


def alert_results(alerts: tuple[str, ...] | list[str], run_dir: Path, run: dict[str, Any], summary: Summary,
                  scraper: Any = None) -> tuple[list[dict[str, Any]], list[str]]:
    """``--alert`` rules evaluated on the run and on its time windows: (the summary's ``alerts``, warnings
    to add to its ``warnings``).

    A failure to build the windows only costs the windowed checks (a warning), never the summary."""
    alerts = tuple(alerts)
    notes: list[str] = []
    windows = None if summary.windows is None else [w.model_dump(mode="json") for w in summary.windows.series]
    if windows is None:
        try:
            windows = _alert_windows(run_dir, run, summary.duration_s)
        except Exception as exc:  # noqa: BLE001 - the whole-run checks below still hold
            notes.append(f"alerts: no windowed checks ({type(exc).__name__}: {exc})")
            windows = []
    for w in windows:
        if scraper is not None and "server_metrics" not in w:
            w["server_metrics"] = scraper.window(w["start_s"], w["end_s"])
    if len(windows) == 1:
        windows = []  # one window is the whole run: do not report each alert twice
    return _evaluate_alerts(alerts, summary, windows), notes + _unmeasured_alerts(alerts, summary)


def _evaluate_alerts(alerts: tuple[str, ...], summary: Summary, windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from infermeter.analysis.alerts import evaluate_alerts, parse_alert

    return evaluate_alerts([parse_alert(a) for a in alerts], summary, windows)


def _unmeasured_alerts(alerts: tuple[str, ...], summary: Summary) -> list[str]:
    from infermeter.analysis.alerts import parse_alert, unavailable_alerts

    return [f"alert {a!r} cannot fire: its metric was not measured"
            for a in unavailable_alerts([parse_alert(a) for a in alerts], summary)]


def _alert_windows(run_dir: Path, run: dict[str, Any], duration_s: float) -> list[dict[str, Any]]:
    """Windows of a finished run for windowed alerts: about 20 of them, at least 10 s each."""
    window_s = max(10.0, float(duration_s or 0.0) / 20)
    agg = Accumulator(window_s=window_s, slo=run.get("slo") or None)
    agg.add(store.load_table(run_dir))
    return [w.model_dump(mode="json") for w in agg.windows()]


def summarize_dir(run_dir: Path) -> dict[str, Any]:
    """Rebuild summary.json from what is on disk (also for killed runs, worker runs, soak runs and plans)."""
    run_dir = Path(run_dir)
    if (run_dir / "steps").is_dir():
        from infermeter.measure.plans import summarize_plan

        return summarize_plan(run_dir, summarize_dir)
    run = store.read_json(run_dir / store.RUN) if (run_dir / store.RUN).exists() else {}
    if (run_dir / "parts").is_dir() or run.get("soak"):
        from infermeter.measure.soak import summarize_soak

        summary = summarize_soak(run_dir, run)
    else:
        if (run_dir / "workers").is_dir():
            from infermeter.load.workers import merge_records, worker_tables

            table, _ = merge_records(worker_tables(run_dir))
            store.write_table(run_dir, table)
            shutil.rmtree(run_dir / "workers", ignore_errors=True)
        table = store.finalize(run_dir) if (run_dir / store.JOURNAL).exists() else store.load_table(run_dir)
        summary = build_summary(table, run=run).to_json()
    summary["run_dir"] = str(run_dir)
    alerts = (run.get("config") or {}).get("alerts") or []
    if alerts:
        summary["alerts"], notes = alert_results(alerts, run_dir, run, Summary.from_json(summary))
        summary.setdefault("warnings", []).extend(notes)
    store.write_json(run_dir / store.SUMMARY, summary)
    return summary
