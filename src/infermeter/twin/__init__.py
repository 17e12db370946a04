"""twin: the digital twin's engine core, a vLLM-like continuous-batching engine on the performance model.

No I/O and no clock here: the engine is told the time. Around it, ``measure.simulate`` runs it
offline in virtual time (a simulated run beside a measured one) and ``engines.emulator`` serves
it live over HTTP::

    from infermeter.twin import build_twin, run_virtual
    twin = build_twin("llama-3.1-8b", "h100-sxm")        # engines from the performance model
    engines = twin.engines()

Modules: ``engine`` (queues, KV blocks, prefix cache, steps) on ``kvcache``; ``predictor``
(step times); ``loop`` (virtual clock, the one tie-break) and ``sources`` (arrivals);
``deploy`` (a model on hardware as engines); ``hashing`` (prefix-cache keys). See docs/twin.md.
"""

from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import Twin, build_twin, engine_defaults, fake_twin
from infermeter.twin.engine import Engine
from infermeter.twin.kvcache import BLOCK_SIZE, BlockPool
from infermeter.twin.loop import VirtualClock, arrival_first, run_virtual
from infermeter.twin.predictor import LinearStepTime, StepTimePredictor
from infermeter.twin.request import SimRequest

__all__ = [
    "BLOCK_SIZE",
    "BlockPool",
    "Engine",
    "EngineConfig",
    "LinearStepTime",
    "SimRequest",
    "StepTimePredictor",
    "Twin",
    "VirtualClock",
    "arrival_first",
    "build_twin",
    "engine_defaults",
    "fake_twin",
    "run_virtual",
]
