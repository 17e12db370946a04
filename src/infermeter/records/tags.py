"""Short names for what tells runs apart, from run.json's ``load`` and ``workload`` blocks.

One place decides how a run's load and traffic are named in a few characters; default run labels
(``measure``) and history trends (``report.history``) both use it, so a trend groups exactly the
runs whose labels would say the same::

    >>> load_tag({"kind": "constant-vus", "concurrency": 16})
    'c16'
    >>> load_tag({"kind": "constant-arrival-rate", "rate_per_s": 20.0, "arrival": "poisson"})
    '20rps-poisson'
    >>> workload_tag({"profile": "synthetic", "parameters": {"kind": "synthetic", "input_tokens": "200",
    ...                                                      "output_tokens": "100", "prefix_tokens": 0}})
    'in200-out100'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def load_tag(load: Mapping[str, Any]) -> str:
    """A load shape (or plan) and its level: ``c16``, ``20rps-poisson``, ``ramp1-50rps``, ``replay-x2``, ``sweep``."""
    kind = load.get("kind", "")
    if kind == "constant-vus":
        return f"c{load.get('concurrency')}"
    if kind == "constant-arrival-rate":
        return f"{float(load.get('rate_per_s') or 0):g}rps-{load.get('arrival', 'poisson')}"
    if kind == "ramping-arrival-rate":
        return f"ramp{float(load.get('start_rate_per_s') or 0):g}-{float(load.get('end_rate_per_s') or 0):g}rps"
    if kind == "replay":
        return f"replay-x{float(load.get('time_scale') or 1):g}"
    if kind == "find-max":
        return f"find-max-{load.get('dimension', 'rate')}"
    if kind:
        return str(kind)
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(load.get("describe") or "")).strip("-") or "?"


def _first(v: Any) -> str:
    return str(v).split(",")[0]  # the mean of a length spec "mean[,stdev[,min,max]]"


def workload_tag(workload: Mapping[str, Any]) -> str:
    """What the requests look like: ``in200-out100`` (synthetic), ``fixed-in512-out64``, ``chat``, a dataset's name."""
    ds = workload.get("dataset")
    if ds:
        name = (ds.get("name") or ds.get("path")) if isinstance(ds, Mapping) else ds
        return Path(str(name)).name
    p = workload.get("parameters") or {}
    kind = p.get("kind") or workload.get("profile") or "synthetic"
    if kind in ("synthetic", "fixed"):
        tag = f"in{_first(p.get('input_tokens'))}-out{_first(p.get('output_tokens'))}"
        if p.get("prefix_tokens"):
            tag += f"-prefix{p['prefix_tokens']}x{p.get('prefix_groups', 1)}"
        return tag if kind == "synthetic" else f"fixed-{tag}"
    return str(kind)
