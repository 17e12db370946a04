"""Performance model: predict memory, latency and throughput of LLM serving on given hardware.

Public API (see ``api.py``): :func:`build_deployment` -> :class:`Deployment` with
``step_time``, ``decode_span``, ``steps_within``; :func:`parse_config` / :class:`HardwareConfig`.
Submodules are imported lazily so ``import infermeter.perfmodel`` stays cheap.
"""

from __future__ import annotations

from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.configspec import HardwareConfig, parse_config

__all__ = ["Deployment", "HardwareConfig", "build_deployment", "parse_config"]
