"""Chart specs for Plotly (bundled, ``assets/plotly-basic.min.js``): one builder for run reports and studies.

The contract: a chart is plain JSON the page's script hands to ``Plotly.newPlot`` unchanged — no
number is computed in the browser::

    {"id", "title", "note", "section",
     "views": [{"name", "panels": [{"title", "data": [trace, ...], "layout": {...}}]}]}

A *view* is one way to look at the chart (buttons, or a menu when there are many); a *panel* is
one plot (per-profile panels sit side by side in a full-width card). Every trace comes from
:func:`line`, :func:`points` or :func:`bar` and every axis from :func:`axis` (a title with its
unit, ``automargin`` so labels are never clipped). Colours come from one :class:`Colors` per
report, so a configuration has the same colour in every chart. Text from result files is
escaped for Plotly's label markup (:func:`label`) and long labels wrap at word boundaries
(:func:`wrap`) instead of being cut. Builders return None for a chart with no data or a flat
one (:func:`informative`); callers then say so in a note::

    >>> colors = Colors(["h100-sxm", "a100-40gb"])
    >>> t = line("h100-sxm", [1, 2], [10.0, 12.0], colors["h100-sxm"])
    >>> panel("chat", [t], axis("requests/s"), axis("TTFT p95 (ms)"))["layout"]["xaxis"]["title"]["text"]
    'requests/s'

Why Plotly's basic bundle (MIT, from the npm package ``plotly.js-basic-dist-min``, 1.2 MB): it
draws SVG (labels are real text whose boxes a test can check), exports PNG and SVG from its
toolbar, has legends that hide series, hover values, zoom, log axes, error bars and shapes (SLO
lines), with no network access; Plotly's Python package ships the full 4.6 MB bundle, uPlot
draws to a canvas (no text boxes, no SVG export) and Vega-Lite needs three libraries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

# Okabe-Ito (colour-blind safe) first, then Tableau 10
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
           "#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#B07AA1", "#9C755F", "#76B7B2", "#EDC948")
FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12, "color": "#1d2125"}


def num(x: Any) -> float | None:
    """A number for chart JSON: 5 significant digits; None for missing or not finite."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return float(f"{v:.5g}") if math.isfinite(v) else None


class Colors:
    """One colour per name, in order of first use; the same name always gets the same colour."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._map: dict[str, str] = {}
        for n in names:
            self[n]

    def __getitem__(self, name: str) -> str:
        if name not in self._map:
            self._map[name] = PALETTE[len(self._map) % len(PALETTE)]
        return self._map[name]


def label(text: Any) -> str:
    """Text from result files made safe for Plotly's label markup (it reads <br>, <b> ... and entities)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def wrap(text: Any, width: int = 22) -> str:
    """``label(text)`` broken into lines of about ``width`` characters at spaces, '·', '(' or ','."""
    words, line_, out = str(text).replace("(", " (").split(), "", []
    for w in words:
        if line_ and len(line_) + 1 + len(w) > width:
            out.append(line_)
            line_ = w
        else:
            line_ = f"{line_} {w}".strip()
    if line_:
        out.append(line_)
    return "<br>".join(label(x) for x in out) or label(text)


def axis(title: str, log: bool = False, **extra: Any) -> dict[str, Any]:
    """An axis with its title (say the unit) that makes room for its labels rather than clipping them."""
    return {"title": {"text": wrap(title, 40)}, "type": "log" if log else "linear", "automargin": True,
            "zeroline": False, "gridcolor": "#eceff2", "linecolor": "#b8c0c8", **extra}


def _hover(name: str, xt: str, yt: str) -> str:
    return f"{label(name)}<br>{label(xt)}: %{{x}}<br>{label(yt)}: %{{y}}<extra></extra>"


def line(name: str, xs: Iterable[Any], ys: Iterable[Any], color: str, *, dashed: bool = False, markers: bool = False,
         step: bool = False, group: str | None = None, show_legend: bool = True) -> dict[str, Any]:
    """A line series (``dashed``: simulated); y None is a gap."""
    t: dict[str, Any] = {"type": "scatter", "mode": "lines+markers" if markers else "lines", "name": wrap(name, 40),
                         "x": [num(x) for x in xs], "y": [num(y) for y in ys],
                         "line": {"color": color, "width": 2, "dash": "dash" if dashed else "solid",
                                  "shape": "hv" if step else "linear"},
                         "marker": {"color": color, "size": 6}, "showlegend": show_legend}
    if group:
        t["legendgroup"] = group
    return t


def points(name: str, xs: Sequence[Any], ys: Sequence[Any], color: str, *, y_err: tuple[list[Any], list[Any]] | None = None,
           symbol: str = "circle", group: str | None = None, show_legend: bool = True,
           hover: list[str] | None = None) -> dict[str, Any]:
    """Markers, optionally with asymmetric y error bars ``(minus, plus)``."""
    t: dict[str, Any] = {"type": "scatter", "mode": "markers", "name": wrap(name, 40), "x": [num(x) for x in xs],
                         "y": [num(y) for y in ys], "marker": {"color": color, "size": 11, "symbol": symbol,
                                                               "line": {"color": "#ffffff", "width": 1}},
                         "showlegend": show_legend}
    if y_err is not None:
        t["error_y"] = {"type": "data", "symmetric": False, "array": [num(v) for v in y_err[1]],
                        "arrayminus": [num(v) for v in y_err[0]], "color": color, "thickness": 1.5, "width": 5}
    if group:
        t["legendgroup"] = group
    if hover is not None:
        t["text"] = [label(h) for h in hover]
        t["hovertemplate"] = "%{text}<extra></extra>"
    return t


def bar(name: str, categories: Sequence[str], values: Sequence[Any], color: str | Sequence[str], *,
        show_legend: bool = True) -> dict[str, Any]:
    """Bars over categories (labels wrap); ``color`` one colour or one per bar."""
    return {"type": "bar", "name": wrap(name, 40), "x": [wrap(c, 18) for c in categories],
            "y": [num(v) for v in values], "marker": {"color": color}, "showlegend": show_legend,
            "hovertemplate": "%{x}: %{y}<extra>" + label(name) + "</extra>"}


def threshold(value: float, text: str, along: str = "y") -> tuple[dict[str, Any], dict[str, Any]]:
    """A dashed limit line across the plot (``along='y'``: horizontal at y=value) and its label."""
    if along == "y":
        shape = {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": value, "y1": value,
                 "line": {"color": "#b3261e", "width": 1.5, "dash": "dash"}}
        note = {"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": value, "yanchor": "bottom",
                "text": label(text), "showarrow": False, "font": {"color": "#b3261e", "size": 11}}
    else:
        shape = {"type": "line", "yref": "paper", "y0": 0, "y1": 1, "xref": "x", "x0": value, "x1": value,
                 "line": {"color": "#b3261e", "width": 1.5, "dash": "dash"}}
        note = {"yref": "paper", "y": 0, "yanchor": "bottom", "xref": "x", "x": value, "xanchor": "right",
                "text": label(text) + " ", "showarrow": False, "font": {"color": "#b3261e", "size": 11}}
    return shape, note


def panel(title: str, data: list[dict[str, Any]], x: dict[str, Any], y: dict[str, Any], *,
          shapes: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (), height: int = 380,
          barmode: str | None = None, legend: bool = True) -> dict[str, Any]:
    """One plot: traces, axes and limit lines. The legend sits at the bottom of the figure, under the axis title
    (it never covers data or labels); the page prints ``title`` above the plot as text. A limit line on a linear axis widens that axis's
    range to include it, so the line is always drawn."""
    layout: dict[str, Any] = {
        "xaxis": x, "yaxis": y, "height": height, "font": FONT, "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff", "margin": {"l": 10, "r": 24, "t": 24, "b": 10}, "hovermode": "closest",
        "showlegend": legend, "legend": {"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 0,
                                          "yanchor": "bottom"},
        "shapes": [s for s, _ in shapes], "annotations": [a for _, a in shapes]}
    if barmode:
        layout["barmode"] = barmode
    for shape, _ in shapes:
        along = "x" if shape.get("xref") == "x" else "y"
        ax = layout[f"{along}axis"]
        if ax.get("type") == "log" or "range" in ax:
            continue
        vals = [v for t in data for v in (num(u) for u in (t.get(along) or [])) if v is not None]
        err = [num(v) for t in data for v in ((t.get("error_y") or {}).get("array") or [])] if along == "y" else []
        top = max([shape[f"{along}0"], *vals]) + max([e for e in err if e is not None], default=0.0)
        bottom = min([0.0, *vals])
        ax["range"] = [bottom, top * 1.08]
    return {"title": title, "data": data, "layout": layout}


def informative(values: Iterable[Any]) -> bool:
    """Whether a series set is worth a chart: some finite value, and not all the same."""
    vs = [v for v in (num(x) for x in values) if v is not None]
    return bool(vs) and max(vs) != min(vs)


def panel_values(p: dict[str, Any]) -> list[Any]:
    return [y for t in p["data"] for y in (t.get("y") or [])]


def chart(chart_id: str, title: str, views: list[dict[str, Any]], *, note: str = "", section: str = "",
          omitted: list[str] | None = None) -> dict[str, Any] | None:
    """A chart of non-empty views (a view is ``{"name", "panels"}``); None when no panel has informative data.
    Panels without data are dropped and named in the note."""
    kept = []
    dropped = list(omitted or [])
    for v in views:
        ps = [p for p in v["panels"] if informative(panel_values(p))]
        dropped += [f"{v['name']} · {p['title']}" if len(views) > 1 else p["title"] for p in v["panels"] if p not in ps]
        if ps:
            kept.append({"name": v["name"], "panels": ps})
    if not kept:
        return None
    if dropped:
        note = (note + " " if note else "") + "Not drawn (no data, or every value the same): " + "; ".join(dropped) + "."
    return {"id": chart_id, "title": title, "note": note, "section": section, "views": kept}


def from_series_spec(spec: dict[str, Any] | None, colors: Colors | None = None) -> dict[str, Any] | None:
    """A chart in the older series format (``views`` of ``{"type", "x", "y", "series"}``, as
    :mod:`infermeter.study.soakview` writes) as a Plotly chart of this module's kind."""
    if not spec:
        return None
    colors = colors or Colors()
    views = []
    for v in spec.get("views") or []:
        x, y = v.get("x") or {}, v.get("y") or {}
        if v.get("type") == "bar":
            cats = x.get("categories") or []
            data = [bar(s["name"], cats, s.get("values") or [], colors[s["name"]]) for s in v.get("series") or []]
        else:
            data = [line(s["name"], [p[0] for p in s.get("points") or []], [p[1] for p in s.get("points") or []],
                         colors[s["name"]], dashed=bool(s.get("dashed")), markers=bool(s.get("markers")))
                    for s in v.get("series") or []]
        views.append({"name": v.get("name", ""), "panels": [panel(v.get("name", ""), data,
                                                                  axis(x.get("label", ""), bool(x.get("log"))),
                                                                  axis(y.get("label", ""), bool(y.get("log"))))]})
    return chart(str(spec.get("id")), str(spec.get("title", "")), views, note=str(spec.get("note") or ""),
                 section=str(spec.get("section") or ""))
