"""``infermeter import FILE... [--out DIR] [--format F]``: other tools' results as infermeter run directories.

    infermeter import vllm-bench-result.json --out results/vllm-import
    infermeter import benchmarks.json profile_export.jsonl --out results/imported

One file giving one run writes it to ``--out`` (default ``results/imported-<file stem>``); several files
or runs (a GuideLLM or inference-benchmarker sweep) write ``--out/<stem>`` (``<stem>-<k>`` per benchmark). The format is detected
from the content (``--format`` forces it). Bad files: one line naming the file and the field, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from infermeter.terminal import SafeConsole, escape


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_(
        files: Annotated[list[Path], typer.Argument(help="Result files: vllm bench serve JSON, GuideLLM benchmarks JSON, AIPerf profile export (JSON or JSONL), inference-benchmarker results JSON.")],
        out: Annotated[Optional[Path], typer.Option("--out", help="Run directory (one run) or parent directory (several).")] = None,
        fmt: Annotated[Optional[str], typer.Option("--format", help="vllm-bench | guidellm | aiperf | inference-benchmarker (default: detected).")] = None,
        hardware: Annotated[Optional[str], typer.Option("--hardware", help="Hardware the server ran on (e.g. h100-sxm), for cost and capacity.")] = None,
        model: Annotated[Optional[str], typer.Option("--model", help="Model name (default: the file's).")] = None,
    ) -> None:
        """Import other benchmark tools' results as infermeter run directories (summary.json: source imported)."""
        from infermeter.interop.common import write_imported
        from infermeter.interop.readers import read_file

        runs = [(f, imp) for f in files for imp in read_file(f, fmt)]  # every file read before anything is written
        for _, imp in runs:
            imp.hardware = hardware or imp.hardware
            imp.model = model or imp.model
        console = SafeConsole()
        for k, (f, imp) in enumerate(runs):
            if len(runs) == 1:
                dest = out or Path("results") / f"imported-{f.stem}"
            else:
                same = [i for i, (g, _) in enumerate(runs) if g == f]
                name = f.stem + (f"-{same.index(k)}" if len(same) > 1 else "")
                dest = (out or Path("results") / "imported") / name
            s = write_imported(imp, dest)
            ttft = s.ttft_ms.p50
            console.print(f"{escape(str(f))}: {imp.tool} {escape(imp.version or '(version not recorded)')} -> "
                          f"{escape(str(dest))}: {s.completed} ok, {s.failed} failed, "
                          f"{s.request_throughput or 0:.2f} req/s, TTFT p50 "
                          f"{'–' if ttft is None else f'{ttft:.1f} ms'}; "
                          f"{'per-request data recomputed' if imp.rows is not None else 'aggregates copied'}",
                          highlight=False, soft_wrap=True)
