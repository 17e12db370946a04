"""``infermeter emulate``: serve an emulated OpenAI-compatible engine (``engines.emulator``).

By default the backend is the digital twin: a vLLM-like continuous-batching engine whose step
times come from the performance model, for ``--model`` on ``--gpu`` (Llama 3.1 8B on one H100
SXM by default), with vLLM's ``/metrics``. ``--simple`` serves the fixed-timing backend instead
(TTFT + time per token), and ``--zero-delay`` a backend that costs nothing (client capacity
tests). The flags are :class:`~infermeter.engines.emulator.EmulatorConfig`'s fields.
"""

from __future__ import annotations

import asyncio
from typing import Optional

import typer

from infermeter.cli.help import field_help
from infermeter.engines.emulator.config import API_KEY_ENV, EmulatorConfig

H = field_help(EmulatorConfig)


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate(
        host: str = typer.Option("127.0.0.1", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port (0 = any free port)."),
        model: str = typer.Option("llama-3.1-8b", help=H["model"]),
        gpu: str = typer.Option("h100-sxm", help=H["gpu"]),
        tp: Optional[int] = typer.Option(None, help=H["tp"]),
        pp: Optional[int] = typer.Option(None, help=H["pp"]),
        dtype: str = typer.Option("bf16", help=H["dtype"]),
        kv_dtype: Optional[str] = typer.Option(None, help=H["kv_dtype"]),
        gpu_memory_utilization: float = typer.Option(0.9, help=H["gpu_memory_utilization"]),
        max_num_seqs: Optional[int] = typer.Option(None, help=H["max_num_seqs"]),
        max_num_batched_tokens: Optional[int] = typer.Option(None, help=H["max_num_batched_tokens"]),
        max_model_len: Optional[int] = typer.Option(None, help=H["max_model_len"]),
        num_gpu_blocks_override: Optional[int] = typer.Option(None, help=H["num_gpu_blocks_override"]),
        enable_prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching",
                                                   help=H["enable_prefix_caching"]),
        block_size: Optional[int] = typer.Option(None, help=H["block_size"]),
        frontend_overhead_s: Optional[float] = typer.Option(None, "--frontend-overhead", help=H["frontend_overhead_s"]),
        frontend_service_s: Optional[float] = typer.Option(None, "--frontend-service", help=H["frontend_service_s"]),
        served_model_name: Optional[str] = typer.Option(None, help=H["served_model_name"]),
        simple: bool = typer.Option(False, "--simple", help=H["simple"]),
        ttft_ms: Optional[float] = typer.Option(None, help=H["ttft_ms"]),
        itl_ms: Optional[float] = typer.Option(None, help=H["itl_ms"]),
        max_concurrency: Optional[int] = typer.Option(None, help=H["max_concurrency"]),
        zero_delay: bool = typer.Option(False, help=H["zero_delay"]),
        speedup: float = typer.Option(1.0, help=H["speedup"]),
        faults: Optional[str] = typer.Option(None, help=H["faults"]),
        fault_seed: int = typer.Option(0, help=H["fault_seed"]),
        stall_s: float = typer.Option(30.0, help=H["stall_s"]),
        cut_after: int = typer.Option(3, help=H["cut_after"]),
        api_key: Optional[str] = typer.Option(None, help=H["api_key"], envvar=API_KEY_ENV,
                                              show_default=False),
    ) -> None:
        """Serve OpenAI chat/completions from the digital twin (or a simple timing model), with /metrics and faults."""
        from infermeter.engines.emulator.app import serve_forever

        opts = {k: v for k, v in locals().items() if k not in ("host", "port", "serve_forever")}
        cfg = EmulatorConfig.build("emulate", **opts)
        try:
            asyncio.run(serve_forever(cfg, host, port, on_ready=lambda line: print(line, flush=True)))
        except KeyboardInterrupt:
            pass
