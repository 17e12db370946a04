"""``infermeter emulate``: serve an emulated OpenAI-compatible engine.

By default the backend is the digital twin (``infermeter.twin.live``): a vLLM-like
continuous-batching engine whose step times come from the performance model, for
``--model`` on ``--gpu`` (Llama 3.1 8B on one H100 SXM by default), with vLLM's
``/metrics``. ``--simple`` serves the fixed-timing backend instead (TTFT + time per
token), and ``--zero-delay`` a backend that costs nothing (client capacity tests).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import typer

from infermeter.errors import ConfigError


def _backend(simple: bool, zero_delay: bool, opts: dict[str, Any]) -> Any:
    from infermeter.twin.simple import SimpleBackend

    # Any simple-backend flag selects the simple backend.
    simple = simple or any(opts[k] is not None for k in ("ttft_ms", "itl_ms", "max_concurrency"))
    if zero_delay or simple:
        ttft_ms = 50.0 if opts["ttft_ms"] is None else opts["ttft_ms"]
        itl_ms = 10.0 if opts["itl_ms"] is None else opts["itl_ms"]
        return SimpleBackend(ttft_s=0 if zero_delay else ttft_ms / 1000,
                             itl_s=0 if zero_delay else itl_ms / 1000,
                             max_concurrency=opts["max_concurrency"] or 256,
                             model_name=opts["served_model_name"] or "infermeter-emulator", speedup=opts["speedup"])
    from infermeter.twin.feeder import workload_chars_per_block
    from infermeter.twin.live import twin_backend

    return twin_backend(opts["model"], opts["gpu"], tp=opts["tp"], pp=opts["pp"], dtype=opts["dtype"],
                        kv_dtype=opts["kv_dtype"], gpu_memory_utilization=opts["gpu_memory_utilization"],
                        speedup=opts["speedup"], served_model_name=opts["served_model_name"],
                        max_num_seqs=opts["max_num_seqs"], max_num_batched_tokens=opts["max_num_batched_tokens"],
                        max_model_len=opts["max_model_len"], num_gpu_blocks_override=opts["num_gpu_blocks_override"],
                        enable_prefix_caching=opts["enable_prefix_caching"],
                        chars_per_block=workload_chars_per_block())


def _token_counter() -> Any:
    """Count prompt tokens with the workload's default tokenizer, so usage matches what was asked."""
    from infermeter.workload import load_tokenizer

    tok = load_tokenizer(None)
    return lambda text: max(1, tok.count(text))


def _exit_with_parent() -> None:
    """When started by ``infermeter run`` (EmulatorProcess), exit as soon as its stdin closes."""
    import os
    import sys
    import threading

    if os.environ.get("INFERMETER_EXIT_WITH_STDIN") != "1":
        return

    def watch() -> None:
        try:
            sys.stdin.buffer.read()
        finally:
            os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate(
        host: str = typer.Option("127.0.0.1", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port (0 = any free port)."),
        model: str = typer.Option("llama-3.1-8b", help="Twin: catalog model to emulate (or a config.json path)."),
        gpu: str = typer.Option("h100-sxm", help="Twin: hardware, e.g. h100-sxm, a100-40gb or 4xa100-80gb:tp4."),
        tp: Optional[int] = typer.Option(None, help="Twin: tensor-parallel degree."),
        pp: Optional[int] = typer.Option(None, help="Twin: pipeline-parallel degree."),
        dtype: str = typer.Option("bf16", help="Twin: weight dtype (bf16, fp8, int8, int4, ...)."),
        kv_dtype: Optional[str] = typer.Option(None, help="Twin: KV-cache dtype (bf16, fp8)."),
        gpu_memory_utilization: float = typer.Option(0.9, help="Twin: fraction of GPU memory the engine may use."),
        max_num_seqs: Optional[int] = typer.Option(None, help="Twin: most sequences per step (vLLM's option)."),
        max_num_batched_tokens: Optional[int] = typer.Option(None, help="Twin: token budget per step (vLLM's option)."),
        max_model_len: Optional[int] = typer.Option(None, help="Twin: prompt + output tokens per request."),
        num_gpu_blocks_override: Optional[int] = typer.Option(None, help="Twin: KV blocks (16 tokens each)."),
        enable_prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching", help="Twin: prefix caching."),
        served_model_name: Optional[str] = typer.Option(None, help="Model id served by /v1/models (default: the model)."),
        simple: bool = typer.Option(False, "--simple", help="Fixed timing instead of the twin: --ttft-ms, --itl-ms, --max-concurrency."),
        ttft_ms: Optional[float] = typer.Option(None, help="Simple backend: time to first token (ms, default 50; implies --simple)."),
        itl_ms: Optional[float] = typer.Option(None, help="Simple backend: time per output token (ms, default 10; implies --simple)."),
        max_concurrency: Optional[int] = typer.Option(None, help="Simple backend: requests generated at once, the rest queue (default 256; implies --simple)."),
        zero_delay: bool = typer.Option(False, help="All tokens at once, pre-rendered (client capacity tests)."),
        speedup: float = typer.Option(1.0, help="Run K times faster than real time."),
        faults: Optional[str] = typer.Option(None, help="Inject faults, e.g. '429=0.05,500=0.02,cut=0.02,stall=0.01,malformed=0.01,slow_first_byte=0.01,reset=0.01'."),
        fault_seed: int = typer.Option(0, help="Seed of the fault draws."),
        stall_s: float = typer.Option(30.0, help="Length of an injected stall (s)."),
        cut_after: int = typer.Option(3, help="Tokens before an injected stream cut."),
    ) -> None:
        """Serve OpenAI chat/completions from the digital twin (or a simple timing model), with /metrics and faults."""
        from aiohttp import web

        from infermeter.twin.faults import FaultPlan
        from infermeter.twin.server import make_app

        if speedup <= 0:
            raise ConfigError("--speedup must be > 0")
        plan = FaultPlan.parse(faults, seed=fault_seed, stall_s=stall_s, cut_after=cut_after)
        opts = dict(locals())
        backend = _backend(simple, zero_delay, opts)
        counter = _token_counter()

        _exit_with_parent()

        async def main() -> None:
            app = make_app(backend, faults=plan, count_tokens=counter)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, host, port, backlog=1024)
            await site.start()
            bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            what = backend.describe()
            label = (f"{what.get('model')} on {what.get('hardware')} (digital twin)" if what.get("backend") == "twin"
                     else f"{what.get('backend')} timing model")
            print(f"infermeter emulator: {label} on http://{host}:{bound}", flush=True)
            await asyncio.Event().wait()

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            pass
