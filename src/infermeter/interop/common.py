"""An imported run and how it becomes an infermeter run directory.

Promise: :func:`write_imported` writes ``run.json`` (``source: imported``, ``imported``: the tool, its
version, the command where the file records one, the file), ``requests.parquet`` when the import has
per-request rows, and ``summary.json`` built by the one summary path (``analysis.accumulator``) from
those rows; figures the rows cannot give are copied from the tool's aggregates and named in
``summary_method`` and ``imported.copied`` with the tool's definition. An import without per-request
rows gets its summary from the tool's aggregates only (``summary_method`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import shlex

import pyarrow as pa

from infermeter import __version__
from infermeter.analysis.accumulator import Accumulator
from infermeter.analysis.results import Distribution, Summary
from infermeter.errors import DataError
from infermeter.interop.definitions import DEFINITIONS
from infermeter.redact import redact_args, redact_obj, redact_text
from infermeter.records.record import ARROW_SCHEMA, rows_to_table
from infermeter.records.store import RUN, SUMMARY, write_json, write_run

RECOMPUTED = ("duration_s", "request_throughput", "input_token_throughput", "output_token_throughput",
              "total_token_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttft_from_intended_ms",
              "e2e_from_intended_ms", "schedule_lag_ms", "error_rate")


@dataclass
class Imported:
    """One run read from another tool's file: per-request ``rows`` (record dicts) or ``copied`` aggregates."""

    tool: str
    version: str | None
    path: Path
    model: str | None = None
    hardware: str | None = None
    command: str | None = None
    label: str | None = None
    started_at: str | None = None
    load: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] | None = None
    copied: dict[str, Any] = field(default_factory=dict)  # summary key -> value, in infermeter's units
    copied_definitions: dict[str, str] = field(default_factory=dict)  # summary key -> the tool's definition
    extra: dict[str, Any] = field(default_factory=dict)  # the tool's own figures worth keeping (run.json)


def bad(path: Path, where: str, why: str) -> DataError:
    """The one-line error for a file that cannot be imported, naming the file and the field."""
    return DataError(f"{path}: {where}: {why}")


def _command(cmd: str | None) -> str | None:
    """The tool's command line with every secret flag's value and anything credential-shaped masked."""
    if not cmd:
        return None
    try:
        return " ".join(redact_args(shlex.split(cmd)))
    except ValueError:  # unbalanced quotes: mask what looks like a secret in the text
        return redact_text(cmd)


def run_header(imp: Imported) -> dict[str, Any]:
    header: dict[str, Any] = redact_obj({
        "schema_version": 1, "tool": "infermeter", "version": __version__, "source": "imported",
        "label": imp.label or f"{imp.tool}:{imp.path.stem}", "started_at": imp.started_at, "model": imp.model,
        "hardware": imp.hardware, "load": imp.load, "target": {}, "workload": {}, "config": {},
        "imported": {"tool": imp.tool, "version": imp.version, "command": _command(imp.command), "file": str(imp.path),
                     "per_request": imp.rows is not None, **({"tool_figures": imp.extra} if imp.extra else {})},
    })
    return header


def summarize(imp: Imported) -> tuple[dict[str, Any], pa.Table | None, Summary]:
    """run.json, the records table (or None) and the summary of an import."""
    run = run_header(imp)
    defs = DEFINITIONS.get(imp.tool, {})
    if imp.rows is not None:
        if not imp.rows:
            raise bad(imp.path, "requests", "no per-request entries to import")
        for r in imp.rows:  # a tool's error text may echo a key (docs/metrics.md "Errors")
            if isinstance(r.get("error_detail"), str):
                r["error_detail"] = redact_text(r["error_detail"])[:300]
        table = rows_to_table(imp.rows)
        no_times = all(not r.get("chunk_times") for r in imp.rows)
        acc = Accumulator.for_run(run, derive_itl=no_times)
        acc.add(table)
        summary = acc.summary(run)
        copied = {k: v for k, v in imp.copied.items() if k not in RECOMPUTED}
        method = (f"imported from {imp.tool} per-request data: recomputed with infermeter's definitions "
                  f"(docs/metrics.md) from the tool's timestamps and token counts"
                  + (f"; kept the tool's rule for {', '.join(sorted(defs))}" if defs else "")
                  + (f"; copied: {', '.join(sorted(copied))}" if copied else ""))
        if no_times:
            method += "; ITL is each request's mean gap (no per-chunk times in the file)"
    else:
        table = None
        copied = dict(imp.copied)
        base = Accumulator.for_run(run).summary(run)
        summary = base.with_(valid=True, invalid_reasons=[], findings=[], warnings=[
            f"imported aggregates only: {imp.tool} wrote no per-request data, so no figure was recomputed"])
        method = (f"imported from {imp.tool} aggregates only: copied {', '.join(sorted(copied))} "
                  f"with {imp.tool}'s definitions; nothing recomputed")
    fields = {k: (Distribution(**v) if isinstance(v, dict) and "count" in v else v) for k, v in copied.items()
              if k in type(summary).model_fields}
    others = {k: v for k, v in copied.items() if k not in type(summary).model_fields}
    summary = summary.with_(**{k: (v.model_dump() if isinstance(v, Distribution) else v) for k, v in fields.items()},
                            summary_method=method, source="imported",
                            imported={"tool": imp.tool, "version": imp.version, "per_request": imp.rows is not None,
                                      "copied": {k: {"value": copied[k], "definition": imp.copied_definitions.get(
                                          k, f"{imp.tool}'s")} for k in sorted(copied)},
                                      "recomputed": sorted(RECOMPUTED) if imp.rows is not None else [],
                                      "tool_rules": defs, **({"tool_figures": others} if others else {})})
    return run, table, summary


def write_imported(imp: Imported, out_dir: Path) -> Summary:
    """Write ``out_dir`` (run.json, requests.parquet when per-request rows exist, summary.json)."""
    run, table, summary = summarize(imp)
    out_dir = Path(out_dir)
    if table is not None:
        write_run(out_dir, run, table.cast(ARROW_SCHEMA), summary.to_json())
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / RUN, run)
        write_json(out_dir / SUMMARY, summary.to_json())
    return summary
