"""Real inference engines that infermeter can install and run locally (for tests and studies).

    from infermeter.engines import launch
    with launch("vllm-cpu", port=None).running() as eng:
        eng.base_url        # "http://127.0.0.1:PORT", model name in eng.model

:func:`launch` builds the engine object (nothing starts until ``start()`` or
``running()``); :data:`ENGINES` lists the names it knows. Failures raise
:class:`EngineError` (a :class:`~infermeter.errors.UserError`).
"""

from __future__ import annotations

from typing import Any

from infermeter.engines.venv import EngineError, cache_root
from infermeter.engines.vllm_cpu import VllmCpuEngine

ENGINES: dict[str, type[VllmCpuEngine]] = {"vllm-cpu": VllmCpuEngine}  # real engines infermeter installs and starts


def launch(name: str, **settings: Any) -> VllmCpuEngine:
    """The engine called ``name`` with ``settings`` (e.g. ``port=None``)."""
    try:
        cls = ENGINES[name]
    except KeyError:
        raise EngineError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return cls(**settings)


__all__ = ["ENGINES", "EngineError", "VllmCpuEngine", "cache_root", "launch"]
