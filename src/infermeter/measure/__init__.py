"""The measurement pipeline: one ``RunConfig`` in, one run directory out.

Composes the layers — workload (what), shape (when), client (how), records,
analysis — for ``infermeter run`` and for everything built on runs (sweeps,
campaigns, studies)::

    cfg = RunConfig(url="http://127.0.0.1:8000", concurrency=8, requests=100)
    result = asyncio.run(Measurement(cfg).run())
    result.summary["output_token_throughput"], result.run_dir

With no ``url`` it starts the embedded emulator in a child process and says so
in ``run.json`` (``target.emulated``). Records are journaled as they finish;
the summary is written at the end, also after Ctrl-C (``Measurement.stop()``).
A target that cannot be reached at all is a :class:`UserError` before any
request is sent.

Modules: ``config`` (RunConfig and how flags become a shape or a plan),
``run`` (Measurement: one run, here / in processes / on Ray), ``plans``
(sweeps and find-max in ``steps/<k>/``), ``soak`` (part files, checkpoints,
resume), ``header`` (run.json, runtime, the client capacity check).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infermeter.measure.config import (
        RunConfig,
        build_plan,
        build_shape,
        parse_slo,
        requested_rate,
        soak_settings,
        specs_for,
    )
    from infermeter.measure.header import default_out_dir, discover_model, host_info
    from infermeter.measure.run import Measurement, RunResult, summarize_dir

# name -> module: imported on first use (PEP 562), so a helper process that only makes requests
# (measure.feeder, measure.child) does not load the client, pyarrow and aiohttp (about 55 MiB each)
_EXPORTS = {
    **dict.fromkeys(("RunConfig", "build_plan", "build_shape", "parse_slo", "requested_rate", "soak_settings",
                     "specs_for"), "config"),
    **dict.fromkeys(("default_out_dir", "discover_model", "host_info"), "header"),
    **dict.fromkeys(("Measurement", "RunResult", "summarize_dir"), "run"),
}

__all__ = ["RunConfig", "Measurement", "RunResult", "build_plan", "build_shape", "default_out_dir", "discover_model",
           "host_info", "parse_slo", "requested_rate", "soak_settings", "specs_for", "summarize_dir"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'infermeter.measure' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"infermeter.measure.{module}"), name)
    globals()[name] = value
    return value
