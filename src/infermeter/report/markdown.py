"""``report.md`` (the same sections and tables as the HTML page) and ``summary.csv`` (one row per run).

The contract: :func:`render_markdown` prints every table of a
:class:`~infermeter.report.content.ReportContent` as a GitHub-flavoured
Markdown table with the very cells the HTML shows; a best value is
``**value** ★``; cards are a heading, a bold headline and bullets. Text from
result files is escaped (``|``, ``<``, backslashes, line breaks, a leading
``>`` or ``#``) so it cannot break a table or inject markup, and ``>`` prints as
``>``; control characters (``ESC[2J``, ``ESC]0;title``) are removed.
:func:`summary_rows` flattens each run's ``summary.json`` (and its price) into
raw, unformatted CSV columns::

    >>> print(render_markdown(content).splitlines()[0])
    # infermeter report: 3 run(s)
    >>> row = summary_rows(leaves, costs)[0]                # raw numbers: not rounded, not formatted
    >>> row["label"], row["ttft_ms_p95"]
    ('demo', 261.7634115197597)
"""

from __future__ import annotations

import csv
import io
from typing import Any

from infermeter.analysis import catalog
from infermeter.report.content import Card, ReportContent
from infermeter.report.pricing import RunCost
from infermeter.report.rundir import RunDir
from infermeter.report.table import Cell, Table
from infermeter.terminal import clean

# summary.csv's figure columns: the metric catalog's "csv" view (analysis/catalog.py)
CSV_COLUMNS = catalog.csv_columns()


def md_escape(text: str) -> str:
    """Text safe in a Markdown line or table cell: control characters removed (no ``ESC[2J`` reaches a terminal
    that shows the file), ``|`` and ``<`` backslash-escaped (so no HTML tag can open), line breaks joined, a
    leading ``>``/``#`` escaped so it starts no quote or heading; ``>`` is left as is."""
    out = clean(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "\\<")
    out = " ".join(out.splitlines()).strip()
    if out[:1] in (">", "#"):
        out = "\\" + out
    return out or " "


def render_md_card(c: Card) -> list[str]:
    lines = [f"### {md_escape(c.title)}", "", f"**{md_escape(c.headline)}**", ""]
    lines += [f"- **{md_escape(k)}:** {md_escape(v)}" for k, v in c.rows]
    if c.bullets:
        lines += ["", "Caveats:", ""] + [f"- {md_escape(b)}" for b in c.bullets]
    return lines + [""]


def _md_cell(c: Cell) -> str:
    text = md_escape(c.display)
    return f"**{text}** ★" if c.best else text


def render_md_table(t: Table) -> str:
    lines = [f"### {md_escape(t.title)}", "", "| " + " | ".join(md_escape(c) for c in t.columns) + " |",
             "|" + "|".join("---" for _ in t.columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{md_escape(t.note)}_"]
    return "\n".join(lines)


def render_markdown(content: ReportContent) -> str:
    out = [f"# {md_escape(content.title)}", ""]
    out += [md_escape(h) + "  " for h in content.headline]
    out += [f"Generated {content.generated_at} by infermeter {content.version}. "
            "Interactive charts are in report.html (same folder).", ""]
    for s in content.sections:
        out += [f"## {md_escape(s.title)}", ""]
        if s.intro:
            out += [md_escape(s.intro), ""]
        for c in s.cards:
            out += render_md_card(c)
        if s.has_charts and not s.tables and not s.cards:
            out += ["_Charts only: open report.html._", ""]
        for t in s.tables:
            out += [render_md_table(t), ""]
        out += [f"- {md_escape(n)}" for n in s.notes] + ([""] if s.notes else [])
    return clean("\n".join(out)).rstrip() + "\n"  # what did not pass md_escape (dates, the version) too


def summary_rows(leaves: list[RunDir], costs: list[RunCost]) -> list[dict[str, Any]]:
    """One flat dict per run (see the module docstring)."""
    by_run = {id(c.run): c for c in costs}
    rows = []
    for r in leaves:
        s = r.summary
        row: dict[str, Any] = {
            "label": r.label, "path": str(r.path), "source": r.source, "model": r.model, "hardware": r.hardware,
            "profile": r.profile, "sweep": r.parent, "started_at": r.started_at, "valid": s.valid,
            "invalid_reasons": "; ".join(str(x) for x in s.invalid_reasons),
        }
        row.update({c.name: c.ref.raw(s) for c in CSV_COLUMNS})
        c = by_run.get(id(r))
        res = c.result if c else None
        row.update({
            "usd_per_hour": res.usd_per_hour if res else None,
            "usd_per_1m_output_tokens": res.usd_per_1m_output_tokens if res else None,
            "usd_per_1m_total_tokens": res.usd_per_1m_total_tokens if res else None,
            "price_source": res.price.source if res else (c.reason if c else None),
            "price_date": res.price.date_text if res else None,
        })
        rows.append(row)
    return rows


def _csv_value(v: Any) -> Any:
    """Empty for missing; text that a spreadsheet would run as a formula gets a leading quote."""
    if v is None:
        return ""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return v


def render_csv(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()
