"""Cost per 1M tokens for the runs in a report, and the break-even curves.

The contract: :func:`price_runs` prices every run through
:func:`infermeter.analysis.cost.cost_for_throughput` (the catalog is loaded
once; ``PriceOptions`` are the same flags as ``infermeter cost``). A run that
cannot be priced (no hardware, unknown GPU, zero throughput, or no cost
module) gets a :class:`RunCost` with ``result=None`` and the reason, shown as
"no price" in the report, never as zero::

    >>> from infermeter.analysis.prices import PriceOptions
    >>> costs, notes = price_runs(leaves, PriceOptions(provider="lambda"))
    >>> costs[0].run.label, costs[0].result.price.usd_per_hour, round(costs[0].usd_per_1m_output, 2), costs[0].reason
    ('demo', 3.99, 0.66, None)

Break-even (:func:`break_even`): monthly cost of serving V output tokens per
month on a configuration is ceil(V / capacity) x $/month, with capacity = the
measured output tokens/s x 3600 x 720 h (the cost module's month); a per-token
API at P $/1M costs V x P / 1e6. Self-hosting one deployment breaks even with
the API at V* = $/month / P x 1e6.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from infermeter.errors import UserError
from infermeter.report.rundir import RunDir


@dataclass(frozen=True)
class RunCost:
    run: RunDir
    result: Any | None  # infermeter.analysis.cost.CostResult
    reason: str | None = None  # why there is no price

    @property
    def usd_per_1m_output(self) -> float | None:
        return self.result.usd_per_1m_output_tokens if self.result else None

    @property
    def usd_per_1m_total(self) -> float | None:
        return self.result.usd_per_1m_total_tokens if self.result else None

    @property
    def usd_per_hour(self) -> float | None:
        return self.result.usd_per_hour if self.result else None

    @property
    def usd_per_month(self) -> float | None:
        return self.result.usd_per_month if self.result else None


def price_runs(runs: list[RunDir], options: Any | None = None, today: dt.date | None = None) -> tuple[list[RunCost], list[str]]:
    """A :class:`RunCost` per run (same order) and report-level notes (staleness, missing module)."""
    try:
        from infermeter.analysis.cost import cost_for_throughput
        from infermeter.analysis.prices import PriceOptions, load_catalog, staleness_warnings
    except ImportError:  # the cost module is optional for reports
        return [RunCost(r, None, "no price: the cost module is not installed") for r in runs], []
    today = today or dt.date.today()
    options = options or PriceOptions()
    catalog = None
    if not options.overrides_catalog:
        try:
            catalog = load_catalog(overrides=options.prices_file)
        except UserError as exc:
            return [RunCost(r, None, f"no price: {exc}") for r in runs], [str(exc)]
    out: list[RunCost] = []
    for r in runs:
        s = r.summary
        if not r.hardware:
            out.append(RunCost(r, None, "no price: the run does not name its hardware"))
            continue
        if r.source == "emulated" and not options.overrides_catalog:
            out.append(RunCost(r, None, f"no price: emulated ({r.emulated_text}), not a measurement of {r.hardware}; "
                                        "give --price-per-hour to price it anyway"))
            continue
        try:
            res = cost_for_throughput(
                r.hardware, float(s.output_token_throughput or 0.0), float(s.input_token_throughput or 0.0),
                float(s.request_throughput or 0.0), options=options, catalog=catalog, source=r.source,
                label=r.label, model=r.model, profile=r.profile, today=today,
            )
        except UserError as exc:
            out.append(RunCost(r, None, f"no price: {exc}"))
            continue
        out.append(RunCost(r, res))
    prices = [c.result.price for c in out if c.result is not None]
    return out, staleness_warnings(prices, today)


@dataclass(frozen=True)
class BreakEven:
    label: str
    capacity_tokens_per_month: float
    usd_per_month: float
    api_break_even_tokens: float | None  # V* against the API price, when given


def break_even(costs: list[RunCost], api_usd_per_1m: float | None) -> list[BreakEven]:
    """One entry per priced configuration with throughput (see the module docstring)."""
    out = []
    for c in costs:
        if c.result is None:
            continue
        tps = float(c.run.summary.output_token_throughput or 0.0)
        if tps <= 0:
            continue
        month_h = c.result.usd_per_month / c.result.usd_per_hour if c.result.usd_per_hour else 720.0
        cap = tps * 3600.0 * month_h
        v_star = c.result.usd_per_month / api_usd_per_1m * 1e6 if api_usd_per_1m else None
        out.append(BreakEven(c.run.label, cap, c.result.usd_per_month, v_star))
    return out


def break_even_curves(items: list[BreakEven], api_usd_per_1m: float | None, points: int = 160) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Volume grid (log-spaced output tokens/month) and monthly cost per configuration (and ``API``)."""
    if not items:
        return np.empty(0), {}
    lo = min(i.capacity_tokens_per_month for i in items) / 50
    hi = max(i.capacity_tokens_per_month for i in items) * 20
    grid = np.geomspace(lo, hi, points)
    curves = {i.label: np.ceil(grid / i.capacity_tokens_per_month - 1e-12) * i.usd_per_month for i in items}
    if api_usd_per_1m:
        curves["per-token API"] = grid * api_usd_per_1m / 1e6
    return grid, curves


def fmt_tokens(v: float) -> str:
    """1.2B, 340M, 12k ..."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}" if math.isfinite(v) else "–"
