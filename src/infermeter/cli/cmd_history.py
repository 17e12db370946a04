"""``infermeter history``: the runs indexed so far, filtered, and a metric's trend over time.

    infermeter history --since 7d --hardware h100-sxm
    infermeter history --model 'llama-3*' --trend ttft_p95_ms
    infermeter history --index results/old-run --index results/sweep

Every ``infermeter run`` indexes its result directory (``index_run``); older
ones can be added with ``--index``. The database is ``--db``, else
``$INFERMETER_HISTORY_DB``, else ``~/.infermeter/history.duckdb``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from infermeter.cli.fit import Fit, make_table
from infermeter.terminal import SafeConsole, escape

Db = Annotated[Optional[Path], typer.Option("--db", help="History database (default: $INFERMETER_HISTORY_DB or ~/.infermeter/history.duckdb).")]
_BARS = "▁▂▃▄▅▆▇█"
_SHOWN = [("started_at", "started"), ("label", "run"), ("source", "source"), ("model", "model"),
          ("hardware", "hardware"), ("profile", "profile"), ("valid", "valid"), ("output_token_throughput", "out tok/s"),
          ("ttft_p95_ms", "TTFT p95 ms"), ("error_rate", "err %")]
_NUMERIC = {"output_token_throughput", "ttft_p95_ms", "error_rate"}
_KIND = {**{c: "num" for c in _NUMERIC}, "source": "name", "hardware": "name", "profile": "name", "valid": "name"}


def sparkline(values: list[float | None]) -> str:
    """One character per value, scaled between the smallest and largest; a space for missing values."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(_BARS[0 if hi == lo else round((v - lo) / (hi - lo) * (len(_BARS) - 1))])
    return "".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    if hasattr(v, "strftime"):
        return str(v.strftime("%Y-%m-%d %H:%M"))
    return str(v)


def _jsonable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.items()} for r in rows]


def print_trend(console: Console, metric: str, rows: list[dict[str, Any]]) -> None:
    """The runs oldest first, then one line per comparable configuration: sparkline and first -> last."""
    from infermeter.report.history import GROUPED_BY

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["configuration"], []).append(r)
    number = {name: k + 1 for k, name in enumerate(groups)}
    t = make_table(f"{metric} over time", [(c, "num" if c in (metric, "group") else "text")
                                            for c in ("started", "run", "group", "valid", metric)])
    for r in rows:
        t.add_row(_cell(r["started_at"]), escape(str(r["label"])), str(number[r["configuration"]]), _cell(r["valid"]),
                  _cell(r["value"]))
    console.print(Fit(t))
    console.print(f"{len(groups)} configuration(s); runs are grouped by {GROUPED_BY}, and a trend is read "
                  "within one group only:", highlight=False)
    for name, members in groups.items():
        vals = [m["value"] for m in members]
        finite = [v for v in vals if v is not None]
        change = ""
        if len(finite) >= 2 and finite[0]:
            change = f"  {finite[0]:.4g} → {finite[-1]:.4g} ({(finite[-1] / finite[0] - 1) * 100:+.1f}%)"
        console.print(f"  {number[name]}. {escape(name)} ({len(members)} run{'s' if len(members) != 1 else ''}): "
                      f"{sparkline(vals)}{change}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("history")
    def history(
        db: Db = None,
        model: Annotated[Optional[str], typer.Option("--model", help="Model name (* wildcards, case-insensitive).")] = None,
        hardware: Annotated[Optional[str], typer.Option("--hardware", help="Hardware configuration (* wildcards).")] = None,
        profile: Annotated[Optional[str], typer.Option("--profile", help="Workload profile (* wildcards).")] = None,
        source: Annotated[Optional[str], typer.Option("--source", help="measured or simulated.")] = None,
        since: Annotated[Optional[str], typer.Option("--since", help="Runs started after: 7d, 12h, 2w or a date (2025-01-31).")] = None,
        until: Annotated[Optional[str], typer.Option("--until", help="Runs started before: an age or a date.")] = None,
        trend: Annotated[Optional[str], typer.Option("--trend", help="Show this metric over time, e.g. ttft_p95_ms or output_token_throughput.")] = None,
        index: Annotated[Optional[list[Path]], typer.Option("--index", help="Index this result directory first (repeatable).")] = None,
        limit: Annotated[int, typer.Option("--limit", help="Most runs to list (0 = all).")] = 50,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """List indexed runs (filter by model, hardware, profile, date) or show a metric's trend."""
        from infermeter.report import history as h

        console = SafeConsole()
        for d in index or []:
            for run_id in h.index_run(d, db):
                if not json_out:
                    console.print(f"indexed {run_id}", highlight=False, markup=False, soft_wrap=True)
        filters = {"model": model, "hardware": hardware, "profile": profile, "source": source,
                   "since": h.parse_when(since, flag="--since") if since else None,
                   "until": h.parse_when(until, flag="--until") if until else None}
        if trend:
            rows = h.trend(trend, db, **filters)
            if json_out:
                print(json.dumps({"metric": h.metric_column(trend), "runs": _jsonable(rows)}, indent=2))
            else:
                print_trend(console, h.metric_column(trend), rows)
            return
        rows = h.list_runs(db, limit=limit or None, **filters)
        if json_out:
            print(json.dumps({"runs": _jsonable(rows)}, indent=2))
            return
        t = make_table(f"{len(rows)} run(s) in {h.db_path(db)}", [(head, _KIND.get(col, "text"))
                                                                  for col, head in _SHOWN],
                       caption="--json adds each run's path (run_id)")
        for r in rows:
            t.add_row(*(escape(_cell(r[c] * 100 if c == "error_rate" and r[c] is not None else r[c])) for c, _ in _SHOWN))
        console.print(Fit(t))
