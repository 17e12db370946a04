"""``infermeter sql "..."``: query the run history and every indexed run's per-request records.

    infermeter sql "SELECT hardware, avg(ttft_p95_ms) FROM runs GROUP BY 1"
    infermeter sql "SELECT run_id, quantile_cont(first_token_at - sent_at, 0.99) FROM requests GROUP BY 1" --format csv

Tables: ``runs`` (one row per indexed run; ``summary`` and ``run`` hold the
JSON files) and ``requests`` (every indexed ``requests.parquet``, with the
``run_id`` it belongs to). The database opens read-only.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from infermeter.cli.fit import Fit, make_table
from infermeter.errors import ConfigError
from infermeter.terminal import SafeConsole, escape

FORMATS = ("table", "csv", "json")


def _plain(v: Any) -> Any:
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def register(app: typer.Typer) -> None:
    @app.command("sql")
    def sql(
        query: Annotated[str, typer.Argument(help="A DuckDB SQL query over `runs` and `requests`.")],
        db: Annotated[Optional[Path], typer.Option("--db", help="History database (default: $INFERMETER_HISTORY_DB or ~/.infermeter/history.duckdb).")] = None,
        fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
        max_rows: Annotated[int, typer.Option("--max-rows", help="Most rows to print in a table (csv and json print all).")] = 200,
    ) -> None:
        """Run SQL over the run history and the runs' per-request Parquet files."""
        from infermeter.report.history import run_sql

        if fmt not in FORMATS:
            raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        columns, rows = run_sql(query, db)
        if fmt == "csv":
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(columns)
            w.writerows([[_plain(v) for v in r] for r in rows])
        elif fmt == "json":
            print(json.dumps([{c: _plain(v) for c, v in zip(columns, r, strict=True)} for r in rows], indent=2, default=str))
        else:
            kinds = [("num" if rows and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows[:max_rows])
                      else "text") for i in range(len(columns))]
            t = make_table(None, [(escape(str(c)), k) for c, k in zip(columns, kinds, strict=True)],
                           caption=f"{len(rows)} row(s)" + (f", first {max_rows} shown" if len(rows) > max_rows else ""))
            for r in rows[:max_rows]:
                t.add_row(*(escape("NULL" if v is None else str(_plain(v))) for v in r))
            SafeConsole().print(Fit(t))
