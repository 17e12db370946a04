"""``infermeter report RUN_DIR... --out DIR``: one shareable page (and Markdown and CSV) for any set of runs.

    infermeter report results/a100-chat results/h100-chat results/sweep --out reports/compare
    infermeter report results/* --out reports/all --provider lambda --api-price 0.6

Writes ``report.html`` (self-contained: opens offline, interactive charts),
``report.md`` (the same tables) and ``summary.csv`` (one row per run). Sweeps
expand into their steps. Prices use the same flags as ``infermeter cost``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from infermeter.cli.costview import with_price_flags
from infermeter.errors import ConfigError
from infermeter.terminal import SafeConsole


def register(app: typer.Typer) -> None:
    @app.command("report")
    @with_price_flags
    def report(
        run_dirs: Annotated[list[Path], typer.Argument(help="Result directories (runs or sweeps), measured or simulated.")],
        out: Annotated[Path, typer.Option("--out", "-o", help="Folder for report.html, report.md and summary.csv.")] = Path("report"),
        title: Annotated[Optional[str], typer.Option("--title", help="Page title (default: 'infermeter report: N run(s)').")] = None,
        api_price: Annotated[Optional[float], typer.Option("--api-price", help="A per-token API's USD per 1M output tokens, for the break-even chart.")] = None,
        *,
        price_options: Any,
    ) -> None:
        """Turn runs into report.html (interactive charts), report.md and summary.csv."""
        from infermeter.report.build import ReportOptions, build_report

        if api_price is not None and not api_price > 0:
            raise ConfigError(f"--api-price {api_price}: must be a positive USD amount per 1M tokens")
        files = build_report(run_dirs, out, ReportOptions(title=title, price_options=price_options, api_usd_per_1m=api_price))
        console = SafeConsole()
        for f in (files.html, files.markdown, files.csv):
            console.print(f"wrote {f}", highlight=False, markup=False, soft_wrap=True)
