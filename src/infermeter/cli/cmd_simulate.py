"""``infermeter simulate``: run a workload through the digital twin in virtual time.

Same workload and load flags as ``infermeter run``; writes the same result files
(``summary.json``, ``requests.parquet``, ``run.json`` with ``source: simulated``)::

    infermeter simulate --model llama-3.1-70b --gpu 4xa100-80gb:tp4 --rate 48 --duration 3600 \\
        --input-tokens 128 --output-tokens 128 --out results/soak-1h
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import typer

from infermeter.errors import ConfigError

TOKEN_TIMES_AUTO_LIMIT = 100_000  # records; above it per-token times are not stored
CHILD_FEEDER_MIN = 200_000  # expected requests from which a child process makes the request stream


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
        arrival: str = typer.Option("poisson", help="poisson | constant | gamma"),
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


class SimPlan:
    """Flags -> twin, shape, workload, source and run.json header (testable without the CLI)."""

    def __init__(self, cfg: Any, *, gpu: str, tp: int | None = None, pp: int | None = None, dtype: str = "bf16",
                 kv_dtype: str | None = None, gpu_memory_utilization: float = 0.9,
                 engine: dict[str, Any] | None = None, token_times: str = "auto") -> None:
        from infermeter.load.shapes import ConstantConcurrency, TraceReplay
        from infermeter.measure import build_shape
        from infermeter.twin.deploy import build_twin, engine_defaults, hardware_config
        from infermeter.workload import build_workload

        self.cfg = cfg
        self.shape = build_shape(cfg)
        self.twin = build_twin(cfg.model, hardware_config(gpu, tp, pp), dtype=dtype, kv_dtype=kv_dtype,
                               engine=engine_defaults(**(engine or {})),
                               gpu_memory_utilization=gpu_memory_utilization)
        self.workload = build_workload(**self.workload_args())
        self.closed = isinstance(self.shape, ConstantConcurrency)
        self.replay = isinstance(self.shape, TraceReplay)
        self.child_feeder = True
        expected = self._expected_requests()
        self.token_times = token_times == "on" or (
            token_times == "auto" and expected is not None and expected <= TOKEN_TIMES_AUTO_LIMIT)

    def _expected_requests(self) -> float | None:
        cfg = self.cfg
        if cfg.requests is not None:
            return cfg.requests + cfg.warmup
        rate = getattr(self.shape, "rate_per_s", None) or getattr(self.shape, "end_rate_per_s", None)
        if rate and cfg.duration_s:
            return rate * cfg.duration_s
        return None

    def workload_args(self) -> dict[str, Any]:
        cfg = self.cfg
        return {"profile": cfg.profile, "dataset": cfg.dataset, "input_tokens": cfg.input_tokens,
                "output_tokens": cfg.output_tokens, "prefix_tokens": cfg.prefix_tokens,
                "prefix_groups": cfg.prefix_groups, "tokenizer": cfg.tokenizer, "seed": cfg.seed, "api": cfg.api}

    def source(self) -> Any:
        """The arrival source; huge runs make their requests in a child process (twin.feeder)."""
        import numpy as np

        from infermeter.twin.feeder import ChildStream, FeedSpec, calibrate_chars_per_block, local_stream
        from infermeter.twin.sources import ClosedLoopSource, OpenLoopSource

        cfg = self.cfg
        cpb = calibrate_chars_per_block(iter(self.workload.requests()))
        self.chars_per_block = cpb
        expected = self._expected_requests()
        if self.child_feeder and (expected is None or expected > CHILD_FEEDER_MIN):
            limit = None if cfg.requests is None else cfg.requests + cfg.warmup
            reqs: Any = ChildStream(FeedSpec(workload=self.workload_args(), shape=None if self.closed else self.shape,
                                             seed=cfg.seed, replay=self.replay, time_scale=cfg.time_scale,
                                             limit=limit, duration_s=None if self.closed else cfg.duration_s,
                                             chars_per_block=cpb))
        else:
            offsets = None if (self.closed or self.replay) else self.shape.arrivals(np.random.default_rng(cfg.seed))
            reqs = local_stream(offsets, iter(self.workload.requests()), replay=self.replay,
                                time_scale=cfg.time_scale, chars_per_block=cpb)
        delay = self.twin.request_overhead_s
        if self.closed:
            return ClosedLoopSource(self.shape.concurrency, reqs, requests=cfg.requests, duration_s=cfg.duration_s,
                                    warmup=cfg.warmup, delay=delay)
        return OpenLoopSource(reqs, requests=cfg.requests, duration_s=cfg.duration_s, warmup=cfg.warmup,
                              max_concurrency=cfg.max_concurrency, delay=delay)

    def run_header(self, label: str) -> dict[str, Any]:
        from infermeter import __version__
        from infermeter.measure import host_info

        cfg = self.cfg
        load_desc: dict[str, Any] = {
            **self.shape.model_dump(mode="json"), "describe": self.shape.describe(), "open_loop": not self.closed,
            "target_rate": getattr(self.shape, "rate_per_s", None),
            "limits": {"requests": cfg.requests, "duration_s": cfg.duration_s, "warmup": cfg.warmup,
                       "max_concurrency": cfg.max_concurrency}}
        wl = self.workload.describe()
        return {
            "schema_version": 1, "tool": "infermeter", "version": __version__, "source": "simulated",
            "label": label, "started_at": datetime.now(timezone.utc).isoformat(), "seed": cfg.seed,
            "model": self.twin.served_model_name, "hardware": self.twin.hardware, "profile": wl.get("profile"),
            "target": {"url": None, "embedded": False, "engine": "infermeter-twin", "emulated": self.twin.describe()},
            "load": load_desc, "workload": wl, "host": host_info(), "slo": cfg.slo,
            "config": {**cfg.public(), "simulate": {
                "token_times": self.token_times,
                "prefix_key_chars_per_block": getattr(self, "chars_per_block", None),
                **self.twin.describe()}},
            "argv": sys.argv[1:],
        }

    def run(self, progress: Any = None) -> Any:
        from infermeter.measure import default_out_dir
        from infermeter.records import store
        from infermeter.twin.simulate import simulate

        cfg = self.cfg
        kind = self.shape.describe().split(",")[0].replace(" ", "-")
        label = cfg.label or f"sim-{self.twin.model}-{self.twin.hardware}-{kind}"
        out = Path(cfg.out) if cfg.out else default_out_dir(label)
        if (out / store.SUMMARY).exists():
            raise ConfigError(f"--out {out}: already holds a run; choose another directory")
        return simulate(self.twin, self.source(), out_dir=out, run=self.run_header(label), warmup=cfg.warmup,
                        token_times=self.token_times, slo=cfg.slo or None, on_progress=progress)
