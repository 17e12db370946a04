"""twin: a vLLM-like continuous-batching engine on a performance model, offline and live.

    from infermeter.twin import build_twin, simulate, TwinBackend
    twin = build_twin("llama-3.1-8b", "h100-sxm")        # engines from the performance model
    TwinBackend(twin, speedup=10)                       # the emulator server's backend (live)
    simulate(twin, source, out_dir=..., run=...)         # a run directory in virtual time

Layers: ``engine`` (queues, KV blocks, prefix cache, steps) on ``kvcache``;
``loop`` (virtual clock, tie-break) and ``simulate`` + ``recorder`` offline;
``live`` + ``metrics`` for the emulator server. See docs/twin.md.
"""

from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import Twin, build_twin, engine_defaults, fake_twin
from infermeter.twin.engine import Engine
from infermeter.twin.kvcache import BLOCK_SIZE, BlockPool
from infermeter.twin.live import RequestRejected, TwinBackend
from infermeter.twin.loop import VirtualClock, arrival_first, run_virtual
from infermeter.twin.metrics import render_metrics
from infermeter.twin.predictor import LinearStepTime, StepTimePredictor
from infermeter.twin.request import SimRequest
from infermeter.twin.simulate import SimulationResult, simulate

__all__ = [
    "BLOCK_SIZE",
    "BlockPool",
    "Engine",
    "EngineConfig",
    "LinearStepTime",
    "RequestRejected",
    "SimRequest",
    "SimulationResult",
    "StepTimePredictor",
    "Twin",
    "TwinBackend",
    "VirtualClock",
    "arrival_first",
    "build_twin",
    "engine_defaults",
    "fake_twin",
    "render_metrics",
    "run_virtual",
    "simulate",
]
