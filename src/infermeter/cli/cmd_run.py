"""``infermeter run``: measure an OpenAI-compatible server (or the embedded emulator)."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import time
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from infermeter.cli.view import progress_panel, summary_table, target_line
from infermeter.errors import ConfigError, UserError
from infermeter.load.shapes.arrivals import ARRIVALS


def _config_error(exc: ValidationError) -> ConfigError:
    msgs = []
    for e in exc.errors():
        loc = "--" + "-".join(str(x) for x in e["loc"]).replace("_", "-")
        msgs.append(f"{loc}: {str(e['msg']).removeprefix('Value error, ')}")
    return ConfigError("; ".join(msgs))


def register(app: typer.Typer) -> None:
    @app.command("run", no_args_is_help=False)
    def run(
        url: Optional[str] = typer.Option(None, help="Base URL of an OpenAI-compatible server (default: start the embedded emulator)."),
        model: Optional[str] = typer.Option(None, help="Model name (default: first id from /v1/models)."),
        api: str = typer.Option("chat", help="chat | completions"),
        api_key: Optional[str] = typer.Option(None, envvar="OPENAI_API_KEY", help="API key (or env OPENAI_API_KEY); never written anywhere.", show_default=False),
        concurrency: Optional[int] = typer.Option(None, help="Closed loop with N streams (default 1 when no --rate)."),
        rate: Optional[float] = typer.Option(None, help="Open loop: mean requests per second."),
        arrival: Optional[str] = typer.Option(None, help=" | ".join(ARRIVALS) + " (default poisson; constant for sweep/find-max)."),
        burstiness: float = typer.Option(1.0, help="Gamma shape k for --arrival gamma (k<1 burstier)."),
        ramp_up_strategy: Optional[str] = typer.Option(None, help="linear | exponential rate ramp (vLLM's flag)."),
        ramp_up_start_rps: Optional[float] = typer.Option(None, help="Ramp start rate (req/s)."),
        ramp_up_end_rps: Optional[float] = typer.Option(None, help="Ramp end rate (req/s)."),
        max_concurrency: Optional[int] = typer.Option(None, help="Cap on in-flight requests for open loops."),
        load: Optional[str] = typer.Option(None, help="replay (a trace's timestamps) | sweep (synchronous, max throughput, rates between) | find-max (highest rate/concurrency meeting --slo)."),
        sweep_rates: int = typer.Option(5, help="Sweep: open-loop rates between synchronous and max throughput."),
        search: str = typer.Option("rate", help="Find-max: search the 'rate' or the 'concurrency'."),
        search_start: Optional[float] = typer.Option(None, help="Find-max: first value tried (default: the synchronous rate, or concurrency 1)."),
        search_max: Optional[float] = typer.Option(None, help="Find-max: never try more than this."),
        resolution: float = typer.Option(0.05, help="Find-max: stop when the bracket is this narrow (relative)."),
        max_steps: int = typer.Option(12, help="Find-max: at most this many steps."),
        slo_percentile: float = typer.Option(99.0, help="Sweep/find-max: a step meets --slo when this percentile does (50, 90, 95, 99, 99.9)."),
        max_error_rate: float = typer.Option(0.01, help="Sweep/find-max: a step with more errors than this share misses the SLO."),
        workers: int = typer.Option(1, help="Client processes sharing one striped schedule (or Ray actors with --ray)."),
        ray: Optional[str] = typer.Option(None, help="Run the workers as Ray actors: ADDRESS, 'auto' or 'local' (extra 'distributed')."),
        calibrate: bool = typer.Option(True, help="Measure this client's capacity first when the requested rate could exceed it."),
        strict: bool = typer.Option(False, help="Refuse to run when the requested rate exceeds the calibrated client capacity."),
        window: Optional[str] = typer.Option(None, help="Soak: per-window series of this length (e.g. 1h); turns on soak storage."),
        checkpoint: Optional[str] = typer.Option(None, help="Soak: checkpoint this often (default 60s); turns on soak storage."),
        part_records: int = typer.Option(5000, help="Soak: records per part file."),
        resume: Optional[Path] = typer.Option(None, help="Continue the killed soak run in this directory (other flags come from its run.json)."),
        time_scale: float = typer.Option(1.0, help="Replay: multiply trace offsets by this."),
        requests: Optional[int] = typer.Option(None, help="Measured requests to send (after warmup)."),
        duration: Optional[str] = typer.Option(None, help="How long to send for: seconds or 90s, 45m, 72h, 1h30m."),
        warmup: int = typer.Option(0, help="Requests sent first and not counted."),
        seed: int = typer.Option(0, help="Seed for arrivals and the workload."),
        profile: Optional[str] = typer.Option(None, help="Workload profile (see `infermeter profiles`)."),
        dataset: Optional[str] = typer.Option(None, help="Dataset file or Hub name."),
        tokenizer: Optional[str] = typer.Option(None, help="Tokenizer for lengths (tokenizer.json, HF folder, GGUF, Hub id)."),
        input_tokens: Optional[str] = typer.Option(None, help="Prompt length: mean[,stdev[,min,max]]."),
        output_tokens: Optional[str] = typer.Option(None, help="max_tokens: mean[,stdev[,min,max]]."),
        prefix_tokens: Optional[int] = typer.Option(None, help="Shared prefix length (synthetic)."),
        prefix_groups: Optional[int] = typer.Option(None, help="Number of distinct shared prefixes."),
        ignore_eos: bool = typer.Option(False, help="Send ignore_eos/min_tokens so outputs reach max_tokens (vLLM)."),
        temperature: Optional[float] = typer.Option(None, help="Sampling temperature."),
        extra_body: Optional[str] = typer.Option(None, help="JSON object merged into every request body."),
        slo: Optional[str] = typer.Option(None, help="Goodput SLO, e.g. ttft_ms=500,tpot_ms=50,e2e_ms=10000."),
        alert: Optional[list[str]] = typer.Option(None, help="Alert rule, e.g. 'ttft_p95_ms>500' (repeatable); exit 3 when one fires."),
        connect_timeout: float = typer.Option(10.0, help="Connect timeout (s)."),
        first_token_timeout: float = typer.Option(120.0, help="First-token timeout (s), 0 = none."),
        timeout: float = typer.Option(600.0, help="Total per-request timeout (s), 0 = none."),
        grace: float = typer.Option(30.0, help="After --duration, wait this long for in-flight requests."),
        out: Optional[Path] = typer.Option(None, help="Result directory (default results/<UTC time>-<label>/)."),
        label: Optional[str] = typer.Option(None, help="A name for this run."),
        hardware: Optional[str] = typer.Option(None, help="What the server runs on, e.g. 4xa100-80gb:tp4 (for cost)."),
        scrape: bool = typer.Option(True, help="Scrape the server's /metrics during the run."),
        gpu: bool = typer.Option(True, "--gpu/--no-gpu", help="Sample local GPUs (NVML, extra 'gpu') or --dcgm-url during the run; without a GPU it says so."),
        dcgm_url: Optional[str] = typer.Option(None, help="A DCGM exporter's /metrics URL to sample GPU telemetry from."),
        history: bool = typer.Option(True, "--history/--no-history", help="Index the run in the history database (see `infermeter history`)."),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="Override a profile field or dataset option, KEY=VALUE (repeatable; see `infermeter profiles`)."),
        scrape_interval: float = typer.Option(1.0, help="Seconds between /metrics scrapes."),
        emulator: Optional[str] = typer.Option(None, help="Arguments for the embedded emulator, e.g. \"--ttft-ms 20\"."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
    ) -> None:
        """Measure an OpenAI-compatible server under a precise load and write summary.json, requests.parquet, run.json."""
        from infermeter.durations import parse_duration
        from infermeter.measure import Measurement, RunConfig, parse_slo

        console = Console(stderr=True)
        out_console = Console()

        def notify(msg: str) -> None:
            console.print(f"[yellow]{msg}[/]", highlight=False)

        if resume is not None:
            measurement = Measurement.resume(resume, api_key=api_key, notify=notify)
            _finish(asyncio.run(_run_with_progress(measurement, console)), out_console, as_json)
            return
        try:
            body = json.loads(extra_body) if extra_body else {}
        except ValueError as exc:
            raise ConfigError(f"--extra-body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ConfigError("--extra-body must be a JSON object")
        if alert:
            from infermeter.analysis.alerts import parse_alert

            for a in alert:
                parse_alert(a)
        try:
            cfg = RunConfig(url=url, model=model, api=api, api_key=api_key, ignore_eos=ignore_eos, temperature=temperature,
                            extra_body=body, concurrency=concurrency, rate=rate,
                            arrival=arrival or ("constant" if load in ("sweep", "find-max") else "poisson"), burstiness=burstiness,
                            ramp_up_strategy=ramp_up_strategy, ramp_up_start_rps=ramp_up_start_rps,
                            ramp_up_end_rps=ramp_up_end_rps, max_concurrency=max_concurrency, load=load,
                            time_scale=time_scale, requests=requests, duration_s=parse_duration(duration), warmup=warmup, seed=seed,
                            sweep_rates=sweep_rates, search=search, search_start=search_start, search_max=search_max,
                            resolution=resolution, max_steps=max_steps, slo_percentile=slo_percentile,
                            max_error_rate=max_error_rate, workers=workers, ray=ray, calibrate=calibrate, strict=strict,
                            window_s=parse_duration(window, "--window"), checkpoint_s=parse_duration(checkpoint, "--checkpoint"),
                            part_records=part_records,
                            profile=profile, dataset=dataset, tokenizer=tokenizer, input_tokens=input_tokens,
                            output_tokens=output_tokens, prefix_tokens=prefix_tokens, prefix_groups=prefix_groups,
                            connect_timeout_s=connect_timeout, first_token_timeout_s=first_token_timeout or None,
                            timeout_s=timeout or None, grace_s=grace, slo=parse_slo(slo), alerts=tuple(alert or ()),
                            out=str(out) if out else None, label=label, hardware=hardware, scrape=scrape,
                            scrape_interval_s=scrape_interval, emulator_args=tuple(shlex.split(emulator or "")),
                            gpu=gpu, dcgm_url=dcgm_url, history=history, profile_overrides=_overrides(set_))
        except ValidationError as exc:
            raise _config_error(exc) from None
        measurement = Measurement(cfg, notify=notify)
        if url is None:
            console.print("[cyan]no --url: measuring infermeter's embedded emulator on 127.0.0.1[/]")
        _finish(asyncio.run(_run_with_progress(measurement, console)), out_console, as_json)


def _finish(result, out_console: Console, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    s = result.summary
    if as_json:
        print(json.dumps(s, indent=2))
    else:
        emu = (result.run.get("target") or {}).get("emulated")
        if emu:
            out_console.print(f"[cyan]target: embedded emulator[/] — {target_line(emu)}", highlight=False)
        if s.get("steps"):
            out_console.print(steps_table(s))
        out_console.print(summary_table(s, None))
        out_console.print(f"results: {result.run_dir}")
    if s["completed"] == 0 and s["failed"]:
        top = max(s["errors"].items(), key=lambda kv: kv[1])[0]
        raise UserError(f"every request failed ({s['failed']}; mostly {top}); results kept in {result.run_dir}")
    if s.get("alerts"):
        raise typer.Exit(3)


def steps_table(s: dict) -> Group:
    """The steps of a sweep / find-max run, and the capacity when there is one."""
    t = Table(title=f"Steps: {s.get('load')}", title_justify="left", show_edge=False)
    for c in ("step", "kind", "load", "req/s", "out tok/s", "TTFT p99", "TPOT p99", "errors", "SLO"):
        t.add_column(c, justify="left" if c in ("kind", "SLO") else "right")
    for k, e in enumerate(s["steps"]):
        load = f"{e['offered_rate']:.3g}/s" if e.get("offered_rate") else f"c={e.get('concurrency')}"
        t.add_row(str(k), e.get("step", ""), load, _num(e.get("request_throughput"), ".2f"),
                  _num(e.get("output_token_throughput"), ".0f"),
                  _num((e.get("ttft_from_intended_ms") or {}).get("p99"), ".1f"),
                  _num((e.get("tpot_ms") or {}).get("p99"), ".1f"), str(e.get("failed", 0)),
                  {True: "yes", False: "no", None: "–"}[e.get("meets_slo")])
    parts: list = [t]
    cap = s.get("capacity")
    if cap:
        dim = cap["dimension"]
        if cap.get(dim) is None:
            parts.append(Text(f"capacity: none ({cap.get('note')})", style="bold red"))
        else:
            unit = " req/s" if dim == "rate" else " streams"
            lo, hi = cap["bracket"]
            within = f", known within [{lo:.4g}, {hi:.4g}]" if hi is not None else f" ({cap.get('note')})"
            parts.append(Text(f"capacity under the SLO: {dim} {cap[dim]:.4g}{unit}{within} "
                              f"(step {cap['step']}, p{cap['slo']['percentile']:g} of {cap['slo']['limits']})",
                              style="bold green"))
    return Group(*parts)


def _num(v, fmt: str) -> str:  # type: ignore[no-untyped-def]
    return "–" if v is None else format(v, fmt)


def _overrides(items: list[str] | None) -> dict:
    """``--set KEY=VALUE`` pairs; values are parsed as JSON when they can be (numbers, lists), else kept as text."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set turns=3")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


async def _run_with_progress(measurement, console: Console):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, measurement.stop)
        loop.add_signal_handler(signal.SIGTERM, measurement.stop)
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
    else:
        await asyncio.wait({task})
    if measurement.stopped:
        console.print("[yellow]stopped: summary covers the requests that finished[/]")
    return task.result()
