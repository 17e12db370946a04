"""``infermeter simulate``: run a workload through the digital twin in virtual time.

Same workload and load flags as ``infermeter run``; writes the same result files
(``summary.json``, ``requests.parquet``, ``run.json`` with ``source: simulated``)::

    infermeter simulate --model llama-3.1-70b --gpu 4xa100-80gb:tp4 --rate 48 --duration 3600 \\
        --input-tokens 128 --output-tokens 128 --out results/soak-1h
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer

from infermeter.errors import ConfigError
from infermeter.load.shapes.arrivals import ARRIVALS
from infermeter.measure.simplan import TOKEN_TIMES_AUTO_LIMIT, SimPlan


def register(app: typer.Typer) -> None:
    @app.command("simulate", no_args_is_help=False)
    def simulate_cmd(
        model: str = typer.Option("llama-3.1-8b", help="Model to emulate (catalog name, e.g. llama-3.1-70b)."),
        gpu: str = typer.Option("h100-sxm", "--gpu", "--hardware", help="Hardware configuration, e.g. 4xa100-80gb:tp4."),
        tp: Optional[int] = typer.Option(None, help="Tensor parallel size (overrides the configuration's)."),
        pp: Optional[int] = typer.Option(None, help="Pipeline parallel size (overrides the configuration's)."),
        dtype: str = typer.Option("bf16", help="Weight dtype: bf16 | fp16 | fp8 | int8 | int4 ..."),
        kv_dtype: Optional[str] = typer.Option(None, help="KV-cache dtype (default: the engine's for --dtype)."),
        gpu_memory_utilization: float = typer.Option(0.9, help="vLLM's --gpu-memory-utilization."),
        max_num_seqs: Optional[int] = typer.Option(None, help="vLLM's --max-num-seqs (default 256)."),
        max_num_batched_tokens: Optional[int] = typer.Option(None, help="vLLM's --max-num-batched-tokens (default 8192)."),
        max_model_len: Optional[int] = typer.Option(None, help="vLLM's --max-model-len."),
        num_gpu_blocks_override: Optional[int] = typer.Option(None, help="KV blocks of 16 tokens (replaces the model's capacity)."),
        enable_prefix_caching: bool = typer.Option(True, help="vLLM's prefix caching."),
        enable_chunked_prefill: bool = typer.Option(True, help="vLLM's chunked prefill."),
        api: str = typer.Option("chat", help="chat | completions (what the prompt text looks like)."),
        concurrency: Optional[int] = typer.Option(None, help="Closed loop with N streams (default 1 when no --rate)."),
        rate: Optional[float] = typer.Option(None, help="Open loop: mean requests per second."),
        arrival: str = typer.Option("poisson", help=" | ".join(ARRIVALS)),
        burstiness: float = typer.Option(1.0, help="Gamma shape k for --arrival gamma (k<1 burstier)."),
        ramp_up_strategy: Optional[str] = typer.Option(None, help="linear | exponential rate ramp."),
        ramp_up_start_rps: Optional[float] = typer.Option(None, help="Ramp start rate (req/s)."),
        ramp_up_end_rps: Optional[float] = typer.Option(None, help="Ramp end rate (req/s)."),
        max_concurrency: Optional[int] = typer.Option(None, help="Cap on in-flight requests for open loops."),
        load: Optional[str] = typer.Option(None, help="'replay': send at a trace dataset's timestamps."),
        time_scale: float = typer.Option(1.0, help="Replay: multiply trace offsets by this."),
        requests: Optional[int] = typer.Option(None, help="Measured requests (after warmup)."),
        duration: Optional[float] = typer.Option(None, help="Seconds of (virtual) sending."),
        warmup: int = typer.Option(0, help="Requests sent first and not counted."),
        seed: int = typer.Option(0, help="Seed for arrivals and the workload."),
        profile: Optional[str] = typer.Option(None, help="Workload profile (see `infermeter profiles`)."),
        dataset: Optional[str] = typer.Option(None, help="Dataset file."),
        tokenizer: Optional[str] = typer.Option(None, help="Tokenizer for lengths."),
        input_tokens: Optional[str] = typer.Option(None, help="Prompt length: mean[,stdev[,min,max]]."),
        output_tokens: Optional[str] = typer.Option(None, help="max_tokens: mean[,stdev[,min,max]] (the twin generates all)."),
        prefix_tokens: Optional[int] = typer.Option(None, help="Shared prefix length (synthetic)."),
        prefix_groups: Optional[int] = typer.Option(None, help="Number of distinct shared prefixes."),
        slo: Optional[str] = typer.Option(None, help="Goodput SLO, e.g. ttft_ms=500,tpot_ms=50."),
        token_times: str = typer.Option("auto", help=f"Store per-token times: auto (runs up to {TOKEN_TIMES_AUTO_LIMIT} requests) | on | off."),
        out: Optional[Path] = typer.Option(None, help="Result directory (default results/<UTC time>-<label>/)."),
        label: Optional[str] = typer.Option(None, help="A name for this run."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
    ) -> None:
        """Simulate a continuous-batching engine (vLLM-like) on the chosen hardware, in virtual time."""
        from pydantic import ValidationError
        from rich.console import Console

        from infermeter.cli.view import summary_table
        from infermeter.measure import RunConfig, parse_slo

        if token_times not in ("auto", "on", "off"):
            raise ConfigError(f"--token-times {token_times!r}: use auto, on or off")
        try:
            cfg = RunConfig(model=model, api=api, concurrency=concurrency, rate=rate, arrival=arrival,
                            burstiness=burstiness, ramp_up_strategy=ramp_up_strategy,
                            ramp_up_start_rps=ramp_up_start_rps, ramp_up_end_rps=ramp_up_end_rps,
                            max_concurrency=max_concurrency, load=load, time_scale=time_scale, requests=requests,
                            duration_s=duration, warmup=warmup, seed=seed, profile=profile, dataset=dataset,
                            tokenizer=tokenizer, input_tokens=input_tokens, output_tokens=output_tokens,
                            prefix_tokens=prefix_tokens, prefix_groups=prefix_groups, slo=parse_slo(slo),
                            out=str(out) if out else None, label=label)
        except ValidationError as exc:
            raise ConfigError("; ".join(f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                                        for e in exc.errors())) from None
        plan = SimPlan(cfg, gpu=gpu, tp=tp, pp=pp, dtype=dtype, kv_dtype=kv_dtype,
                       gpu_memory_utilization=gpu_memory_utilization,
                       engine={"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                               "max_model_len": max_model_len, "num_gpu_blocks_override": num_gpu_blocks_override,
                               "enable_prefix_caching": enable_prefix_caching,
                               "enable_chunked_prefill": enable_chunked_prefill},
                       token_times=token_times)
        err = Console(stderr=True)
        err.print(f"[cyan]simulating[/] {plan.twin.model} on {plan.twin.hardware} "
                  f"({plan.twin.config.describe()}, {plan.twin.num_blocks * plan.twin.lanes} KV blocks); "
                  f"load: {plan.shape.describe()}", highlight=False)
        res = plan.run(progress=_progress(err))
        s = res.summary
        if as_json:
            print(json.dumps(s, indent=2))
        else:
            out_console = Console()
            out_console.print(summary_table(s, None))
            out_console.print(f"results: {res.run_dir}  (simulated {res.records} requests, "
                              f"{res.virtual_s:,.0f} s virtual, in {res.wall_s:.1f} s)")


def _progress(err: Any) -> Any:
    last = [time.monotonic()]

    def cb(t_virtual: float, n: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0:
            last[0] = now
            err.print(f"  {n:,} requests done, virtual time {t_virtual / 3600:.2f} h", highlight=False)

    return cb
