"""How a number is written for people: one module, so a figure reads the same on the console, in
reports and in messages, and no Python repr (``None``, ``{'ttft_ms': 500.0}``, ``8.42637``,
``1.21e+03``) reaches the output::

    >>> sig(8.42637), rate(None), usd(1902.1), limits({"ttft_ms": 500.0, "tpot_ms": 50.0})
    ('8.426', 'none (closed loop)', '$1,902', 'ttft_ms <= 500, tpot_ms <= 50')

``MISSING`` ("–") stands for a value that was not measured, never a zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MISSING = "–"


def sig(v: float | None, digits: int = 4) -> str:
    """``v`` to ``digits`` significant figures, thousands separated, never in e-notation."""
    if v is None or not math.isfinite(v):
        return MISSING
    if v == 0:
        return "0"
    r = float(f"{v:.{digits}g}")
    if abs(r) >= 10 ** (digits - 1):
        return f"{r:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(r))))
    return f"{r:.{decimals}f}".rstrip("0").rstrip(".")


def rate(v: float | None, unit: str = "req/s") -> str:
    """A request rate: ``8.426 req/s``; a missing one is a closed loop's (it offers no rate of its own)."""
    return "none (closed loop)" if v is None else f"{sig(v)} {unit}"


def usd(v: float | None) -> str:
    """Money on the console: whole dollars from $100, cents from $0.10, four decimals below."""
    if v is None:
        return MISSING
    if abs(v) >= 100:
        return f"${v:,.0f}"
    return f"${v:,.2f}" if abs(v) >= 0.1 else f"${v:.4f}"


def limits(bounds: Mapping[str, float] | None) -> str:
    """SLO limits as text: ``ttft_ms <= 500, tpot_ms <= 50`` (never a dict's repr)."""
    return ", ".join(f"{k} <= {v:g}" for k, v in (bounds or {}).items()) or "no limits"
