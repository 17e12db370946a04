"""``infermeter summarize DIR``: rebuild summary.json from the records on disk."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from infermeter.analysis.results import Summary
from infermeter.cli.view import summary_table
from infermeter.terminal import SafeConsole


def register(app: typer.Typer) -> None:
    @app.command("summarize")
    def summarize(run_dir: Path = typer.Argument(..., help="A run directory (also one left by a killed run)."),
                  as_json: bool = typer.Option(False, "--json", help="Print summary.json.")) -> None:
        """Rebuild summary.json from requests.parquet / requests.jsonl (e.g. after a killed run)."""
        from infermeter.measure import summarize_dir

        s = summarize_dir(run_dir)
        if as_json:
            print(json.dumps(s, indent=2))
        else:
            SafeConsole().print(summary_table(Summary.from_json(s)))
