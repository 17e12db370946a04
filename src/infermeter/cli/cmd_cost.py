"""``infermeter cost RUN_DIR...``: what a million tokens (and requests) cost on the measured setup.

    infermeter cost results/chat-a100 --hardware 4xa100-80gb:tp4 --provider azure --overhead 0.2
    infermeter cost results/sweep --price-per-hour 16.28 --json

Prints, per run: $/1K and $/1M output tokens, $/1M input and total tokens, $/1M requests,
$/hour and $/month, tokens per dollar; then the price used with its source and date, the
overhead and utilization applied, and the cheapest run per workload profile. The price
flags and tables live in :mod:`infermeter.cli.costview` (shared with ``capacity``, ``plan`` and
``report``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer

from infermeter.analysis.cost import cost_runs
from infermeter.analysis.prices import PriceOptions, staleness_warnings
from infermeter.cli.costview import (
    Hardware,
    JsonOut,
    Overhead,
    cost_table,
    dump,
    print_best,
    print_prices,
    print_run_warnings,
    rate_table,
    with_price_flags,
)
from infermeter.terminal import SafeConsole


def register(app: typer.Typer) -> None:
    @app.command("cost")
    @with_price_flags
    def cost(
        run_dirs: Annotated[list[Path], typer.Argument(help="Run directories (summary.json; sweeps use the best step meeting the SLO).")],
        hardware: Hardware = None,
        overhead: Overhead = 0.0,
        utilization: Annotated[float, typer.Option("--utilization", help="Average share of the measured throughput production traffic uses (0-1].")] = 1.0,
        json_out: JsonOut = False,
        *,
        price_options: PriceOptions,
    ) -> None:
        """Cost per 1K/1M tokens and per 1M requests, per hour and per month, from measured or simulated runs."""
        today = dt.date.today()
        results = cost_runs(run_dirs, hardware, price_options, overhead=overhead, utilization=utilization, today=today)
        if json_out:
            dump({"schema_version": 1, "runs": [r.to_json() for r in results],
                  "stale_price_warnings": staleness_warnings([r.price for r in results], today)})
            return
        console = SafeConsole()
        console.print(cost_table(results))
        console.print(rate_table(results))
        print_prices(console, [r.price for r in results], overhead, today, utilization)
        print_run_warnings(console, results)
        print_best(console, results)
