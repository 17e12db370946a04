"""``infermeter run``: measure an OpenAI-compatible server (or the embedded emulator)."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live

from infermeter.cli.view import progress_panel, summary_table
from infermeter.errors import ConfigError, UserError


def _config_error(exc: ValidationError) -> ConfigError:
    msgs = []
    for e in exc.errors():
        loc = "--" + "-".join(str(x) for x in e["loc"]).replace("_", "-")
        msgs.append(f"{loc}: {e['msg']}")
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
        arrival: str = typer.Option("poisson", help="poisson | constant | gamma"),
        burstiness: float = typer.Option(1.0, help="Gamma shape k for --arrival gamma (k<1 burstier)."),
        ramp_up_strategy: Optional[str] = typer.Option(None, help="linear | exponential rate ramp (vLLM's flag)."),
        ramp_up_start_rps: Optional[float] = typer.Option(None, help="Ramp start rate (req/s)."),
        ramp_up_end_rps: Optional[float] = typer.Option(None, help="Ramp end rate (req/s)."),
        max_concurrency: Optional[int] = typer.Option(None, help="Cap on in-flight requests for open loops."),
        load: Optional[str] = typer.Option(None, help="'replay': send at a trace dataset's timestamps."),
        time_scale: float = typer.Option(1.0, help="Replay: multiply trace offsets by this."),
        requests: Optional[int] = typer.Option(None, help="Measured requests to send (after warmup)."),
        duration: Optional[float] = typer.Option(None, help="Seconds to send for."),
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
        scrape_interval: float = typer.Option(1.0, help="Seconds between /metrics scrapes."),
        emulator: Optional[str] = typer.Option(None, help="Arguments for the embedded emulator, e.g. \"--ttft-ms 20\"."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
    ) -> None:
        """Measure an OpenAI-compatible server under a precise load and write summary.json, requests.parquet, run.json."""
        from infermeter.measure import Measurement, RunConfig, parse_slo

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
                            extra_body=body, concurrency=concurrency, rate=rate, arrival=arrival, burstiness=burstiness,
                            ramp_up_strategy=ramp_up_strategy, ramp_up_start_rps=ramp_up_start_rps,
                            ramp_up_end_rps=ramp_up_end_rps, max_concurrency=max_concurrency, load=load,
                            time_scale=time_scale, requests=requests, duration_s=duration, warmup=warmup, seed=seed,
                            profile=profile, dataset=dataset, tokenizer=tokenizer, input_tokens=input_tokens,
                            output_tokens=output_tokens, prefix_tokens=prefix_tokens, prefix_groups=prefix_groups,
                            connect_timeout_s=connect_timeout, first_token_timeout_s=first_token_timeout or None,
                            timeout_s=timeout or None, grace_s=grace, slo=parse_slo(slo), alerts=tuple(alert or ()),
                            out=str(out) if out else None, label=label, hardware=hardware, scrape=scrape,
                            scrape_interval_s=scrape_interval, emulator_args=tuple(shlex.split(emulator or "")))
        except ValidationError as exc:
            raise _config_error(exc) from None
        measurement = Measurement(cfg)
        console = Console(stderr=True)
        out_console = Console()
        if url is None:
            console.print("[cyan]no --url: measuring infermeter's embedded emulator on 127.0.0.1[/]")
        result = asyncio.run(_run_with_progress(measurement, console))
        s = result.summary
        if as_json:
            print(json.dumps(s, indent=2))
        else:
            emu = (result.run.get("target") or {}).get("emulated")
            title = None
            if emu:
                out_console.print(f"[cyan]target: embedded emulator[/] ({_emu_desc(emu)})")
            out_console.print(summary_table(s, title))
            out_console.print(f"results: {result.run_dir}")
        if s["completed"] == 0 and s["failed"]:
            top = max(s["errors"].items(), key=lambda kv: kv[1])[0]
            raise UserError(f"every request failed ({s['failed']}; mostly {top}); results kept in {result.run_dir}")
        if s.get("alerts"):
            raise typer.Exit(3)


def _emu_desc(emu: dict) -> str:
    if emu.get("backend") == "simple":
        return f"simple timing model: TTFT {emu['ttft_s'] * 1000:g} ms, {emu['itl_s'] * 1000:g} ms/token, max {emu['max_concurrency']} concurrent"
    return ", ".join(f"{k}={v}" for k, v in emu.items() if not isinstance(v, dict))


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
                live.update(progress_panel(measurement.live.snapshot(time.monotonic() - t0), time.monotonic() - t0,
                                           total, cfg.duration_s))
                await asyncio.wait({task}, timeout=0.25)
    else:
        await asyncio.wait({task})
    if measurement.stopped:
        console.print("[yellow]stopped: summary covers the requests that finished[/]")
    return task.result()
