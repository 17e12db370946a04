"""``infermeter export RUN_DIR --format vllm-bench|guidellm|aiperf --out FILE``: a run in another tool's schema.

    infermeter export results/demo --format vllm-bench --out demo-vllm.json

What each field means in the other tool is :mod:`infermeter.interop.export`'s docstring; importing the
file again (``infermeter import``) gives the same summary figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infermeter.terminal import SafeConsole, escape


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        run_dir: Annotated[Path, typer.Argument(help="An infermeter run directory (with requests.parquet).")],
        fmt: Annotated[str, typer.Option("--format", help="vllm-bench | guidellm | aiperf.")],
        out: Annotated[Path, typer.Option("--out", help="File to write.")],
    ) -> None:
        """Write a run's records in vllm bench serve, GuideLLM or AIPerf result schema."""
        from infermeter.interop.export import export_run

        n = export_run(run_dir, fmt, out)
        SafeConsole().print(f"{escape(str(run_dir))} -> {escape(str(out))} ({fmt}, {n} requests)", highlight=False)
