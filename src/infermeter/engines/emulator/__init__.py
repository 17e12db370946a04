"""The emulator: an OpenAI-compatible server whose timing comes from the digital twin (or a simple
model), run beside the real engines (``engines.vllm_cpu``) in-process or as a child process.

    from infermeter.engines.emulator import EmulatorConfig, EmulatorProcess, build_app, serve
    with EmulatorProcess(EmulatorConfig(model="llama-3.1-8b", gpu="h100-sxm")) as emu:
        emu.base_url                                   # a healthy child on 127.0.0.1
    async with serve(build_app(EmulatorConfig(ttft_ms=5)), port=0) as url: ...   # in-process

Modules: ``config`` (the one declaration of its settings), ``app`` (backend, app, serving),
``server`` (HTTP and SSE), ``simple`` and ``live`` (timing backends: fixed, or the twin's
engine against real time), ``metrics`` (vLLM's ``/metrics``), ``faults`` (injection),
``process`` (the child). See docs/twin.md.
"""

from infermeter.engines.emulator.app import build_app, build_backend, serve, serve_forever, twin_backend
from infermeter.engines.emulator.config import EmulatorConfig
from infermeter.engines.emulator.faults import FaultPlan
from infermeter.engines.emulator.live import RequestRejected, TwinBackend
from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.engines.emulator.simple import SimpleBackend

__all__ = ["EmulatorConfig", "EmulatorProcess", "FaultPlan", "RequestRejected", "SimpleBackend", "TwinBackend",
           "build_app", "build_backend", "serve", "serve_forever", "twin_backend"]
