"""Distribution summaries: the one place percentiles are computed.

    >>> distribution([1.0, 2.0, 3.0, 4.0])["p50"]
    2.5

Percentiles use linear interpolation between order statistics (numpy's
default, the same as vLLM's bench and GuideLLM). An empty input gives ``None``
for every statistic, never zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STAT_KEYS = ("count", "mean", "stdev", "min", "max", "p50", "p90", "p95", "p99", "p999")
_PCTS = (50, 90, 95, 99, 99.9)


def distribution(values: Any, scale: float = 1.0) -> dict[str, float | int | None]:
    """count, mean, stdev (population), min, max, p50, p90, p95, p99, p99.9 of finite values × scale."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        out: dict[str, float | int | None] = {k: None for k in STAT_KEYS}
        out["count"] = 0
        return out
    a = a * scale
    p = np.percentile(a, _PCTS)
    return {
        "count": int(a.size),
        "mean": float(a.mean()),
        "stdev": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
        "p50": float(p[0]),
        "p90": float(p[1]),
        "p95": float(p[2]),
        "p99": float(p[3]),
        "p999": float(p[4]),
    }
