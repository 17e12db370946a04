"""``infermeter run``: measure an OpenAI-compatible server (or the embedded emulator)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from infermeter.analysis.results import Summary
from infermeter.cli.fit import Fit, make_table
from infermeter.client import eventloop
from infermeter.cli.flags import (
    GRACE,
    LOAD,
    OUTPUT,
    PLANS,
    SALT,
    SCALE,
    SLO,
    SOAK,
    TARGET,
    TELEMETRY,
    TIMEOUTS,
    WORKLOAD,
)
from infermeter.cli.interrupt import interrupted
from infermeter.cli.options import with_flags
from infermeter.cli.view import progress_panel, summary_table, target_line
from infermeter.durations import parse_duration
from infermeter.errors import ConfigError, UserError
from infermeter.numbers import limits
from infermeter.terminal import SafeConsole, escape

if TYPE_CHECKING:  # annotations only: the command imports measure.run when it runs
    from infermeter.measure.run import Measurement, RunResult


def _config_error(exc: ValidationError) -> ConfigError:
    msgs = []
    for e in exc.errors():
        loc = "--" + "-".join(str(x) for x in e["loc"]).replace("_", "-")
        msgs.append(f"{loc}: {str(e['msg']).removeprefix('Value error, ')}")
    return ConfigError("; ".join(msgs))


def register(app: typer.Typer) -> None:
    @app.command("run", no_args_is_help=False)
    @with_flags(TARGET, LOAD, GRACE, PLANS, SCALE, SOAK, WORKLOAD, SALT, TIMEOUTS, SLO, OUTPUT, TELEMETRY)
    def run(
        values: dict[str, Any],
        resume: Optional[Path] = typer.Option(None, help="Continue the killed soak run in this directory (other flags come from its run.json)."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
        progress_every: str = typer.Option("10s", "--progress-every", metavar="DURATION",
                                           help="Without a terminal (CI, a pipe, a log file), print a progress line "
                                                "this often; 0: never. A terminal shows a live panel instead."),
        calibrate_twin: Optional[Path] = typer.Option(
            None, "--calibrate-twin", metavar="FILE",
            help="Then fit the twin of the server to this run (what `infermeter calibrate RUN_DIR --out FILE` does; "
                 "best after --load sweep) and write the calibration file. Not --calibrate: that checks this "
                 "client's own capacity first."),
    ) -> None:
        """Measure an OpenAI-compatible server under a precise load and write summary.json, requests.parquet, run.json."""
        from infermeter.measure import Measurement, RunConfig

        console = SafeConsole(stderr=True)
        out_console = SafeConsole()
        every = 0.0 if progress_every.strip() in ("0", "0s") else (parse_duration(progress_every, "--progress-every") or 0.0)

        def notify(msg: str) -> None:
            console.print(f"[yellow]{escape(msg)}[/]", highlight=False)

        if calibrate_twin is not None:
            from infermeter.records.outputs import output_file

            output_file(calibrate_twin, "--calibrate-twin")  # before the run, not after it

        if resume is not None:
            measurement = Measurement.resume(resume, api_key=values.get("api_key"), notify=notify)
            _finish(_measure(measurement, console, every, as_json), out_console, as_json, measurement, console,
                    calibrate_twin)
            return
        try:
            cfg = RunConfig(**values)
        except ValidationError as exc:
            raise _config_error(exc) from None
        measurement = Measurement(cfg, notify=notify)
        if cfg.url is None:
            console.print("[cyan]no --url: measuring infermeter's embedded emulator on 127.0.0.1[/]")
        _finish(_measure(measurement, console, every, as_json), out_console, as_json, measurement, console,
                calibrate_twin)


def _finish(result: RunResult, out_console: Console, as_json: bool, measurement: Measurement | None = None,
            console: Console | None = None, calibrate_twin: Path | None = None) -> None:
    s = result.summary
    if as_json:
        print(json.dumps(result.summary_json, indent=2))  # summary.json as written
    else:
        target = result.run.get("target") or {}
        emu = target.get("emulated")
        if emu:
            what = "embedded emulator" if target.get("embedded") else f"infermeter emulator at {target.get('url')}"
            out_console.print(f"[cyan]target: {escape(what)}[/] — {escape(target_line(emu))}", highlight=False)
        if s.get("steps"):
            out_console.print(steps_table(s))
        out_console.print(summary_table(s, None))
        out_console.print(f"results: {escape(result.run_dir)}")
    if measurement is not None and measurement.stopped:
        interrupted(console or out_console, f"the summary covers the requests that finished; results in {result.run_dir}",
                    getattr(measurement, "signal", None))
    if s.completed == 0 and s.failed:
        top = max(s.errors.items(), key=lambda kv: kv[1])[0]
        raise UserError(f"every request failed ({s.failed}; mostly {top}); results kept in {result.run_dir}")
    if calibrate_twin is not None and not (measurement is not None and measurement.stopped):
        _calibrate_to(result.run_dir, calibrate_twin, console if as_json and console is not None else out_console)
    if s.alerts:
        raise typer.Exit(3)


def _calibrate_to(run_dir: Path, path: Path, console: Console) -> None:
    """``run --calibrate-twin FILE``: the twin fitted to the run just measured (its results stay whatever happens)."""
    from infermeter.cli.calview import show_calibration
    from infermeter.measure.calibrate import calibrate

    try:
        cal = calibrate([run_dir])
    except UserError as exc:
        raise type(exc)(f"--calibrate-twin: {exc} (for `infermeter calibrate {run_dir}`; the run's results are "
                        f"kept there)") from None
    console.print(f"[bold]calibrating the twin to {escape(run_dir)}[/]", highlight=False)
    show_calibration(cal, cal.write(path), console)


def steps_table(s: Summary) -> Group:
    """The steps of a sweep / find-max run, why each one that missed the SLO missed it, and the capacity
    (the plan's own sections of the summary: ``steps``, ``stopped``, ``capacity``; load/steps.plan_summary)."""
    t = make_table(f"Steps: {s.load}", [(c, "name" if c in ("kind", "SLO") else "num") for c in
                                               ("step", "kind", "load", "req/s", "out tok/s", "TTFT p99", "TPOT p99",
                                                "errors", "SLO")], title_justify="left")
    why: list[Text] = []
    for k, e in enumerate(s["steps"]):
        load = f"{e['offered_rate']:.3g}/s" if e.get("offered_rate") else f"c={e.get('concurrency')}"
        t.add_row(str(k), e.get("step", ""), load, _num(e.get("request_throughput"), ".2f"),
                  _num(e.get("output_token_throughput"), ".0f"),
                  _num((e.get("ttft_from_intended_ms") or {}).get("p99"), ".1f"),
                  _num((e.get("tpot_ms") or {}).get("p99"), ".1f"), str(e.get("failed", 0)),
                  {True: "yes", False: "no", None: "–"}[e.get("meets_slo")])
        if e.get("client_limited"):
            again = "retried" if e.get("retried") else "not retried again"
            why.append(Text(f"  step {k}: the client could not apply the load ({again}; not read as an SLO miss): "
                            + "; ".join(e["client_limited"]), style="yellow"))
        elif e.get("meets_slo") is False:
            why.append(Text(f"  step {k} misses the SLO: " + "; ".join(e.get("slo_reasons") or ["no reason recorded"]),
                            style="yellow"))
    parts: list[Any] = [Fit(t), *why]
    if s.get("stopped"):
        parts.append(Text(f"search {s['stopped']}", style="bold red"))
    cap = s.get("capacity")
    if cap:
        dim = cap["dimension"]
        if cap.get(dim) is None:
            parts.append(Text(f"capacity: none ({cap.get('note')})", style="bold red"))
        else:
            unit = " req/s" if dim == "rate" else " streams"
            lo, hi = cap["bracket"]
            within = f", known within [{lo:.4g}, {hi:.4g}]" if hi is not None else f" ({cap.get('note')})"
            if cap.get("stopped") and hi is None:
                within = " or more (the search stopped before the SLO broke)"
            parts.append(Text(f"capacity under the SLO: {dim} {cap[dim]:.4g}{unit}{within} "
                              f"(step {cap['step']}, p{cap['slo']['percentile']:g} of {limits(cap['slo']['limits'])})",
                              style="bold yellow" if cap.get("stopped") else "bold green"))
    return Group(*parts)


def _num(v: Any, fmt: str) -> str:  # v: a figure of the summary JSON
    return "–" if v is None else format(v, fmt)


def progress_line(snap: dict[str, Any], elapsed: float, total: int | None) -> str:
    """One plain progress line (logs and CI, where no live panel can be drawn)."""
    done = f"{snap['done']}/{total}" if total else str(snap["done"])
    ttft = snap.get("ttft_p50_ms")
    return (f"progress: {done} done, {snap['in_flight']} in flight, {snap['req_per_s']:.2f} req/s, "
            f"{snap['out_tok_per_s']:.0f} out tok/s, TTFT p50 " + ("–" if ttft is None else f"{ttft:.1f} ms")
            + f", {snap['errors']} errors, {elapsed:.0f} s")


def _measure(measurement: Measurement, console: Console, every: float, as_json: bool = False) -> RunResult:
    """The run, with the summary of what was written shown when a failed write stopped it (then the one line)."""
    from infermeter.errors import ResultsWriteError

    try:
        return eventloop.run(_run_with_progress(measurement, console, every))
    except ResultsWriteError as exc:
        if exc.summary is not None:
            if as_json:
                print(json.dumps(exc.summary, indent=2))
            else:
                SafeConsole().print(summary_table(Summary.from_json(exc.summary), None))
        raise


async def _run_with_progress(measurement: Measurement, console: Console, every: float = 10.0) -> RunResult:
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        measurement.signal = measurement.signal or signum
        measurement.stop()

    try:
        loop.add_signal_handler(signal.SIGINT, on_signal, signal.SIGINT)
        loop.add_signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM)
    except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
        pass
    task = asyncio.create_task(measurement.run())
    cfg = measurement.cfg
    total = (cfg.requests + cfg.warmup) if cfg.requests else None
    t0 = time.monotonic()
    if console.is_terminal:
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while not task.done():
                live.update(progress_panel(measurement.snapshot(), time.monotonic() - t0, total, cfg.duration_s))
                await asyncio.wait({task}, timeout=0.25)
    elif every > 0:
        while not task.done():
            await asyncio.wait({task}, timeout=every)
            if not task.done():
                console.print(progress_line(measurement.snapshot(), time.monotonic() - t0, total), highlight=False,
                              soft_wrap=True)
    else:
        await asyncio.wait({task})
    return task.result()
