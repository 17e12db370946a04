"""The emulated server from an :class:`EmulatorConfig`: its backend, its app, serving it.

One way to start an emulator, used by ``infermeter emulate``, by the child process of
:class:`~infermeter.engines.emulator.process.EmulatorProcess` (``python -m
infermeter.engines.emulator``) and in-process by tests::

    cfg = EmulatorConfig(ttft_ms=20, itl_ms=5)
    app = build_app(cfg)                               # aiohttp application
    async with serve(app, port=0) as base_url: ...     # in-process, a free port
    asyncio.run(serve_forever(cfg, "127.0.0.1", 8000, on_ready=print))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from infermeter.engines.emulator.config import EmulatorConfig
from infermeter.engines.emulator.faults import FaultPlan
from infermeter.engines.emulator.live import TwinBackend
from infermeter.engines.emulator.reasoning import ThinkingPlan
from infermeter.engines.emulator.server import make_app, serve
from infermeter.engines.emulator.simple import SimpleBackend
from infermeter.twin.hashing import workload_chars_per_block

__all__ = ["build_app", "build_backend", "describe", "serve", "serve_forever", "twin_backend"]


def build_backend(cfg: EmulatorConfig) -> Any:
    """The timing backend the config asks for (ConfigError names a bad flag)."""
    if cfg.backend in ("simple", "zero-delay"):
        zero = cfg.backend == "zero-delay"
        return SimpleBackend(ttft_s=0 if zero else (50.0 if cfg.ttft_ms is None else cfg.ttft_ms) / 1000,
                             itl_s=0 if zero else (10.0 if cfg.itl_ms is None else cfg.itl_ms) / 1000,
                             max_concurrency=cfg.max_concurrency or 256,
                             model_name=cfg.served_model_name or "infermeter-emulator", speedup=cfg.speedup)
    if cfg.disaggregate:
        from infermeter.engines.emulator.disagg import DisaggBackend
        from infermeter.twin.disagg import disagg_twin

        dt = disagg_twin(cfg, cfg.disaggregate)
        return DisaggBackend(dt, speedup=cfg.speedup,
                             chars_per_block=workload_chars_per_block(block_size=dt.prefill.block_size))
    twin = cfg.twin()
    return TwinBackend(twin, speedup=cfg.speedup, chars_per_block=workload_chars_per_block(block_size=twin.block_size))


def twin_backend(model: str = "llama-3.1-8b", gpu: str = "h100-sxm", **options: Any) -> TwinBackend:
    """The twin backend of ``infermeter emulate MODEL GPU --option ...`` (ConfigError names a bad flag)."""
    backend: TwinBackend = build_backend(EmulatorConfig.build("emulate", model=model, gpu=gpu, **options))
    return backend


def _token_counter() -> Callable[[str], int]:
    """Count prompt tokens with the workload's default tokenizer, so usage matches what was asked."""
    from infermeter.workload import load_tokenizer

    tok = load_tokenizer(None)
    return lambda text: max(1, tok.count(text))


def build_app(cfg: EmulatorConfig, backend: Any = None) -> web.Application:
    plan = FaultPlan.parse(cfg.faults, seed=cfg.fault_seed, stall_s=cfg.stall_s, cut_after=cfg.cut_after)
    return make_app(backend if backend is not None else build_backend(cfg), faults=plan, count_tokens=_token_counter(),
                    api_key=cfg.api_key, thinking=ThinkingPlan.parse(cfg.reasoning_tokens, seed=cfg.fault_seed))


def describe(backend: Any) -> str:
    """One line naming what the server emulates."""
    what = backend.describe()
    if what.get("backend") == "twin":
        return f"{what.get('model')} on {what.get('hardware')} (digital twin)"
    return f"{what.get('backend')} timing model"


def describe_config(cfg: EmulatorConfig, backend: Any) -> str:
    """:func:`describe`, and the thinking tokens when it emulates a reasoning model."""
    line = describe(backend)
    return line + (f", thinking {cfg.reasoning_tokens} tokens per request" if cfg.reasoning_tokens else "")


async def serve_forever(cfg: EmulatorConfig, host: str, port: int,
                        on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until cancelled; ``on_ready`` gets one line with the bound URL."""
    backend = build_backend(cfg)
    runner = web.AppRunner(build_app(cfg, backend), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = int(runner.addresses[0][1])  # the port bound (port 0 = a free one)
    if on_ready is not None:
        on_ready(f"infermeter emulator: {describe_config(cfg, backend)} on http://{host}:{bound}")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
