"""``infermeter emulate``: serve an emulated OpenAI-compatible engine (``engines.emulator``).

By default the backend is the digital twin: a vLLM-like continuous-batching engine whose step
times come from the performance model, for ``--model`` on ``--gpu`` (Llama 3.1 8B on one H100
SXM by default), with vLLM's ``/metrics``. ``--simple`` serves the fixed-timing backend instead
(TTFT + time per token), and ``--zero-delay`` a backend that costs nothing (client capacity
tests). The flags are :class:`~infermeter.engines.emulator.EmulatorConfig`'s fields.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

from infermeter.cli.flags import TWIN
from infermeter.cli.options import FlagSpec, model_flags, with_flags
from infermeter.engines.emulator.config import API_KEY_ENV, EmulatorConfig

EMULATOR = model_flags(EmulatorConfig, {
    "disaggregate": FlagSpec(metavar="prefill=CONFIG,decode=CONFIG"), "simple": FlagSpec(flag="--simple/--no-simple"), "ttft_ms": None, "itl_ms": None, "max_concurrency": None,
    "zero_delay": None, "speedup": None, "faults": FlagSpec(metavar="KIND=SHARE,..."), "fault_seed": None,
    "stall_s": None, "cut_after": None, "api_key": FlagSpec(envvar=API_KEY_ENV, show_default=False),
    "served_model_name": None, "reasoning_tokens": FlagSpec(metavar="N|MEAN,STDEV,MIN,MAX"),
}, "Emulator")


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    @with_flags(TWIN, EMULATOR)
    def emulate(
        values: dict[str, Any],
        host: str = typer.Option("127.0.0.1", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port (0 = any free port)."),
    ) -> None:
        """Serve OpenAI chat/completions from the digital twin (or a simple timing model), with /metrics and faults."""
        from infermeter.engines.emulator.app import serve_forever

        cfg = EmulatorConfig.build("emulate", **values)
        try:
            asyncio.run(serve_forever(cfg, host, port, on_ready=lambda line: print(line, flush=True)))
        except KeyboardInterrupt:
            pass
