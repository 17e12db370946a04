"""Render a :class:`~infermeter.report.content.ReportContent` as one self-contained HTML page.

The contract: the page needs no network and no other file. The stylesheet,
the bundled Plotly (``assets/plotly-basic.min.js``, MIT) and the chart script
(``assets/charts.js``) are inlined; chart data travels as JSON in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&``
escaped; labels inside it are escaped for Plotly's label markup
(:func:`infermeter.report.figures.label`) and the script builds its own nodes
with ``textContent``, so strings from result files (model names, labels, error
text) are shown as text and never run. A Content-Security-Policy allows only
the page's own scripts and stylesheet (by hash) as a second line of defence;
Plotly positions its elements with inline style attributes, so those (and only
those, never style elements) are allowed. Sections marked ``collapsed`` are
``<details>`` (open them to read); cards (a study's decision) come first in
their section::

    >>> page = render_html(content)
    >>> page.startswith("<!doctype html>")
    True

Tables are rendered here (not by the script), so the page is readable with
scripts off; the script adds the charts and click-to-sort headers.
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources
from typing import Any

from infermeter.report.content import Card, ReportContent, Section
from infermeter.report.table import Cell, Table
from infermeter.terminal import html_escape as escape  # html.escape of the text without control characters


def asset(name: str) -> str:
    """The text of ``report/assets/<name>``."""
    return resources.files("infermeter.report").joinpath("assets", name).read_text(encoding="utf-8")


def json_for_script(data: Any) -> str:
    """JSON that cannot close or confuse the ``<script>`` element it sits in."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(c: Cell) -> str:
    classes = []
    if c.best:
        classes.append("best")
    if c.flag in ("invalid", "simulated"):
        classes.append(c.flag)
    if not _is_number(c.value):
        classes.append("text")
        if len(c.display) > 40:
            classes.append("wrap")
    attrs = f' class="{" ".join(classes)}"' if classes else ""
    if _is_number(c.value):
        attrs += f' data-v="{escape(repr(float(c.value)))}"'
    return f"<td{attrs}>{escape(c.display)}</td>"


def render_table(t: Table) -> str:
    numeric = [any(_is_number(row[j].value) for row in t.rows) for j in range(len(t.columns))]
    th = ['<th>' if numeric[j] else '<th class="text">' for j in range(len(t.columns))]
    head = "".join(f"{th[j]}{escape(c)}</th>" for j, c in enumerate(t.columns))
    body = "\n".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return (f'<h3 id="t-{escape(t.key)}">{escape(t.title)}</h3>\n<div class="tablewrap"><table class="data" '
            f'data-key="{escape(t.key)}"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>{note}')


def render_card(c: Card) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in c.rows)
    bullets = ('<ul class="caveats">' + "".join(f"<li>{escape(b)}</li>" for b in c.bullets) + "</ul>") if c.bullets else ""
    return (f'<div class="card {escape(c.tone)}"><h3>{escape(c.title)}</h3><p class="verdict">{escape(c.headline)}</p>'
            + (f'<table class="kv">{rows}</table>' if rows else "") + bullets + "</div>")


def _section(s: Section) -> str:
    body = []
    if s.intro:
        body.append(f'<p class="lead">{escape(s.intro)}</p>')
    if s.cards:
        body.append('<div class="cards">' + "".join(render_card(c) for c in s.cards) + "</div>")
    if s.has_charts:
        body.append(f'<div class="charts" id="charts-{escape(s.key)}"></div>')
    body.extend(render_table(t) for t in s.tables)
    if s.notes:
        body.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in s.notes) + "</ul>")
    if s.collapsed:
        return (f'<section id="{escape(s.key)}"><details><summary><h2>{escape(s.title)}</h2></summary>\n'
                + "\n".join(body) + "\n</details></section>")
    return f'<section id="{escape(s.key)}"><h2>{escape(s.title)}</h2>\n' + "\n".join(body) + "\n</section>"


def render_html(content: ReportContent) -> str:
    """The whole page as a string (see the module docstring)."""
    script, style = asset("charts.js"), asset("report.css")
    plotly = asset("plotly-basic.min.js") if content.charts else ""  # 1.2 MB: only on pages with charts
    hashes = " ".join(f"'{_sha256(x)}'" for x in (plotly, script) if x)
    csp = (f"default-src 'none'; script-src {hashes}; "
           f"style-src-elem '{_sha256(style)}' '{_sha256('')}'; style-src-attr 'unsafe-inline'; "
           "img-src data: blob:; base-uri 'none'; form-action 'none'")
    nav = "".join(f'<a href="#{escape(s.key)}">{escape(s.title)}</a>' for s in content.sections)
    headline = "".join(f"<p>{escape(h)}</p>" for h in content.headline)
    sections = "\n".join(_section(s) for s in content.sections)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="infermeter {escape(content.version)}">
<title>{escape(content.title)}</title>
<style>{style}</style>
</head>
<body>
<header><h1>{escape(content.title)}</h1>{headline}<p>Generated {escape(content.generated_at)} by infermeter {escape(content.version)}.</p></header>
<nav>{nav}</nav>
<main>
{sections}
</main>
<script id="report-data" type="application/json">{json_for_script({"charts": content.charts})}</script>
{f"<script>{plotly}</script>" if plotly else ""}
<script>{script}</script>
</body>
</html>
"""
