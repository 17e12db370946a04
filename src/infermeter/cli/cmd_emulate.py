"""``infermeter emulate``: run the emulated OpenAI-compatible server on its own."""

from __future__ import annotations

import asyncio
from typing import Optional

import typer

from infermeter.errors import ConfigError


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate(
        host: str = typer.Option("127.0.0.1", help="Address to listen on."),
        port: int = typer.Option(8000, help="Port (0 = any free port)."),
        model_name: str = typer.Option("infermeter-emulator", help="Model id served by /v1/models (simple backend)."),
        ttft_ms: float = typer.Option(50.0, help="Simple backend: time to first token (ms)."),
        itl_ms: float = typer.Option(10.0, help="Simple backend: time per output token (ms)."),
        max_concurrency: int = typer.Option(256, help="Simple backend: requests generated at once; the rest queue."),
        zero_delay: bool = typer.Option(False, help="All tokens at once, pre-rendered (client capacity tests)."),
        speedup: float = typer.Option(1.0, help="Run K times faster than real time."),
        faults: Optional[str] = typer.Option(None, help="Inject faults, e.g. '429=0.05,500=0.02,cut=0.02,stall=0.01,malformed=0.01,slow_first_byte=0.01,reset=0.01'."),
        fault_seed: int = typer.Option(0, help="Seed of the fault draws."),
        stall_s: float = typer.Option(30.0, help="Length of an injected stall (s)."),
        cut_after: int = typer.Option(3, help="Tokens before an injected stream cut."),
    ) -> None:
        """Serve OpenAI chat/completions with emulated timing (and optional faults) until Ctrl-C."""
        from aiohttp import web

        from infermeter.twin.faults import FaultPlan
        from infermeter.twin.server import make_app
        from infermeter.twin.simple import SimpleBackend

        if speedup <= 0:
            raise ConfigError("--speedup must be > 0")
        plan = FaultPlan.parse(faults, seed=fault_seed, stall_s=stall_s, cut_after=cut_after)

        async def main() -> None:
            backend = SimpleBackend(ttft_s=0 if zero_delay else ttft_ms / 1000, itl_s=0 if zero_delay else itl_ms / 1000,
                                    max_concurrency=max_concurrency, model_name=model_name, speedup=speedup)
            app = make_app(backend, faults=plan)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, host, port, backlog=1024)
            await site.start()
            print(f"infermeter emulator on http://{host}:{site._server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
            await asyncio.Event().wait()

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            pass
