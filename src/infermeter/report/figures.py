"""Chart specs for Plotly (bundled, ``assets/plotly-basic.min.js``): one builder for run reports and studies.

The contract: a chart is plain JSON the page's script hands to ``Plotly.newPlot`` unchanged — no
number is computed in the browser::

    {"id", "title", "note", "section",
     "views": [{"name", "panels": [{"title", "data": [trace, ...], "layout": {...}}]}]}

A *view* is one way to look at the chart (buttons, or a menu when there are many); a *panel* is
one plot (per-profile panels sit side by side in a full-width card). Every trace comes from
:func:`line`, :func:`points` or :func:`bar` (:func:`bar_panel`: upright or lying bars) and every axis
from :func:`axis` (a title with its unit, ``automargin`` so labels are never clipped; its type, category,
linear or log, is chosen from the data by :func:`panel`). Colours come from one :class:`Colors` per
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


def axis(title: str, log: bool | None = None, **extra: Any) -> dict[str, Any]:
    """An axis with its title (say the unit) that makes room for its labels rather than clipping them.

    Its type is settled by :func:`panel` from the data it shows (:func:`axis_type`): ``log=None`` (the
    default) lets the data choose, ``True``/``False`` ask for a log/linear scale; text data always gets a
    category axis."""
    return {"title": {"text": wrap(title, 40)}, "type": AUTO if log is None else ("log" if log else "linear"),
            "automargin": True, "zeroline": False, "gridcolor": "#eceff2", "linecolor": "#b8c0c8", **extra}


AUTO = "-"  # Plotly's "guess the type"; panel() replaces it with the type axis_type() picks
LOG_SPAN = 10.0  # positive values spanning more than this factor get a log axis
FAR = 3.0  # a limit line further than this factor beyond the data does not stretch the axis


def axis_type(values: Iterable[Any], requested: str = AUTO) -> str:
    """The Plotly axis type for ``values``: ``"category"`` when any is text (a number axis would draw nothing),
    else ``"log"`` when asked for (``requested="log"``) or, with ``requested`` auto, when every value is positive
    and they span more than :data:`LOG_SPAN`; else ``"linear"``. A log axis is never picked for values that
    include zero or a negative (it would drop them)::

        >>> axis_type(["h100 (sim.)", "a100 (sim.)"]), axis_type([1, 65]), axis_type([0, 65]), axis_type([2, 9])
        ('category', 'log', 'linear', 'linear')
    """
    present = [v for v in values if v is not None]
    if any(isinstance(v, str) for v in present):
        return "category"
    nums = [v for v in (num(x) for x in present) if v is not None]
    positive = bool(nums) and min(nums) > 0
    if requested == "log":
        return "log" if positive or not nums else "linear"
    if requested == "linear" or not positive:
        return "linear"
    return "log" if max(nums) / min(nums) > LOG_SPAN else "linear"


def _hover(name: str, xt: str, yt: str) -> str:
    return f"{label(name)}<br>{label(xt)}: %{{x}}<br>{label(yt)}: %{{y}}<extra></extra>"


def line(name: str, xs: Iterable[Any], ys: Iterable[Any], color: str, *, dashed: bool = False, markers: bool = False,
         step: bool = False, group: str | None = None, show_legend: bool = True) -> dict[str, Any]:
    """A line series (``dashed``: simulated); y None is a gap. A value with gaps on both sides has no line to
    sit on, so such a series gets markers too (else that value would not be drawn at all)."""
    xv, yv = [num(x) for x in xs], [num(y) for y in ys]
    have = [x is not None and y is not None for x, y in zip(xv, yv)]
    alone = any(h and not (i > 0 and have[i - 1]) and not (i + 1 < len(have) and have[i + 1])
                for i, h in enumerate(have))
    t: dict[str, Any] = {"type": "scatter", "mode": "lines+markers" if markers or alone else "lines",
                         "name": wrap(name, 40), "x": xv, "y": yv,
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
        show_legend: bool = True, lying: bool = False) -> dict[str, Any]:
    """Bars over categories (labels wrap); ``color`` one colour or one per bar; ``lying``: horizontal bars,
    the categories down the y axis."""
    if lying:
        return {"type": "bar", "orientation": "h", "name": wrap(name, 40), "y": [wrap(c, 28) for c in categories],
                "x": [num(v) for v in values], "marker": {"color": color}, "showlegend": show_legend,
                "hovertemplate": "%{y}: %{x}<extra>" + label(name) + "</extra>"}
    return {"type": "bar", "name": wrap(name, 40), "x": [wrap(c, 18) for c in categories],
            "y": [num(v) for v in values], "marker": {"color": color}, "showlegend": show_legend,
            "hovertemplate": "%{x}: %{y}<extra>" + label(name) + "</extra>"}


def bar_panel(title: str, name: str, categories: Sequence[str], values: Sequence[Any], color: str | Sequence[str],
              category_axis: dict[str, Any], value_axis: dict[str, Any], *, height: int = 360) -> dict[str, Any]:
    """A panel of one bar per category, without a legend. A few short labels stand under upright bars; many
    (more than 6) or long ones (over 24 characters) would be turned on end and squeeze the plot, so the bars lie
    down instead, labels on the left in the order given (first at the top), the plot as tall as they need."""
    lying = len(categories) > 6 or any(len(str(c)) > 24 for c in categories)
    t = bar(name, categories, values, color, show_legend=False, lying=lying)
    if not lying:
        return panel(title, [t], category_axis, value_axis, height=height, legend=False)
    rows = sum(wrap(c, 28).count("<br>") + 1 for c in categories)
    tall = max(height, 110 + 16 * rows + 14 * len(categories))
    return panel(title, [t], value_axis, {**category_axis, "autorange": "reversed"}, height=tall, legend=False)


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


def _extent(data: list[dict[str, Any]], along: str) -> list[float]:
    """The finite values the traces put on axis ``along``, error bars' ends included."""
    out = []
    for t in data:
        vals = [num(u) for u in (t.get(along) or [])]
        err = t.get(f"error_{along}") or {}
        plus = [num(e) for e in (err.get("array") or [])]
        minus = [num(e) for e in (err.get("arrayminus") or err.get("array") or [])]
        for i, v in enumerate(vals):
            if v is None:
                continue
            out.append(v)
            up = plus[i] if i < len(plus) else None
            down = minus[i] if i < len(minus) else None
            if up is not None:
                out.append(v + up)
            if down is not None:
                out.append(v - down)
    return out


def _values(data: list[dict[str, Any]], along: str) -> list[Any]:
    """What axis ``along`` has to show: the traces' values (text too) and their error bars' ends."""
    text = [v for t in data for v in (t.get(along) or []) if isinstance(v, str)]
    return text + list(_extent(data, along))


def panel(title: str, data: list[dict[str, Any]], x: dict[str, Any], y: dict[str, Any], *,
          shapes: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (), height: int = 380,
          barmode: str | None = None, legend: bool = True) -> dict[str, Any]:
    """One plot: traces, axes and limit lines. The legend sits at the bottom of the figure, under the axis title
    (it never covers data or labels); the page prints ``title`` above the plot as text.

    Each axis gets its type from the data it shows (:func:`axis_type`: category for text, log where positive
    values span more than 10x). A limit line within :data:`FAR` of the data widens the axis to include it, so it
    is drawn; one further away would squeeze the data into a corner, so the axis keeps to the data and the line's
    label says where the limit lies (the line itself is left out)."""
    x, y = dict(x), dict(y)
    for along, ax in (("x", x), ("y", y)):
        ax["type"] = axis_type(_values(data, along), ax.get("type", AUTO))
    layout: dict[str, Any] = {
        "xaxis": x, "yaxis": y, "height": height, "font": FONT, "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff", "margin": {"l": 10, "r": 24, "t": 24, "b": 10}, "hovermode": "closest",
        "showlegend": legend, "legend": {"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 0,
                                          "yanchor": "bottom"},
        "shapes": [], "annotations": []}
    if barmode:
        layout["barmode"] = barmode
    for shape, note in shapes:
        shape, note = dict(shape), dict(note)
        along = "x" if shape.get("xref") == "x" else "y"
        ax = layout[f"{along}axis"]
        value = float(shape[f"{along}0"])
        vals = _extent(data, along)
        if ax["type"] == "category" or (ax["type"] == "log" and value <= 0):
            continue  # no place for a number on this axis
        if vals and "range" not in ax:
            lo, hi = min(vals), max(vals)
            if ax["type"] == "log":
                far = not lo / FAR <= value <= hi * FAR
            else:  # a linear axis starts at zero: the data's extent from zero, FAR times over
                bottom, top = min(lo, 0.0), max(hi, 0.0)
                far = not bottom - (FAR - 1) * (top - bottom) <= value <= top + (FAR - 1) * (top - bottom)
            if far:
                ax["range"] = _range(ax["type"], lo, hi)
                layout["annotations"].append(_offscale(note, along, value > hi))
                continue
            if ax["type"] == "linear":
                ax["range"] = [min(0.0, lo, value), max(hi, value) * 1.08]
        if ax["type"] == "log":
            note[along] = math.log10(value)  # Plotly places annotations on a log axis by the exponent
        layout["shapes"].append(shape)
        layout["annotations"].append(note)
    for along, ax in (("x", x), ("y", y)):
        vals = [v for v in _extent(data, along) if v > 0]
        if ax["type"] != "log" or not vals:
            continue
        ax.update(_log_ticks(min(vals), max(vals)))
        bars = any(t.get("type") == "bar" and ("x" if t.get("orientation") == "h" else "y") == along for t in data)
        if bars and "range" not in ax:  # a bar grows from the axis' foot: put it a decade under the data
            top = _range("log", min(vals), max(vals))[1]
            ax["range"] = [math.floor(math.log10(min(vals)) - 0.3), top]
    return {"title": title, "data": data, "layout": layout}


def _short(v: float) -> str:
    """A tick label: 3 significant figures, k / M / G for thousands, millions, billions."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= size:
            return f"{v / size:.3g}{suffix}"
    return f"{v:.3g}"


def _log_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Ticks for a log axis over ``[lo, hi]``: 1-2-5 in each decade over at most four decades (Plotly's own
    labels there are bare digits: "2 5 1 2 5"), else Plotly's decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b - a > 4:
        return {}
    vals = [m * 10.0 ** k for k in range(a, b + 1) for m in (1, 2, 5)]
    vals = [float(f"{v:.3g}") for v in vals if lo / 2.5 <= v <= hi * 2.5]
    return {"tickvals": vals, "ticktext": [_short(v) for v in vals]}


def _range(kind: str, lo: float, hi: float) -> list[float]:
    """An axis range around the data ``[lo, hi]`` with a margin (exponents on a log axis)."""
    if kind == "log":
        a, b = math.log10(lo), math.log10(hi)
        pad = max(0.05 * (b - a), 0.05)
        return [a - pad, b + pad]
    a, b = min(lo, 0.0), max(hi, 0.0)
    pad = 0.08 * (b - a or abs(b) or 1.0)
    return [a - (pad if a < 0 else 0.0), b + pad]


def _offscale(note: dict[str, Any], along: str, above: bool) -> dict[str, Any]:
    """A limit line's label for a limit beyond the axis: at the plot's edge, saying which way it lies."""
    where = ("→ beyond the axis" if above else "← below the axis") if along == "x" else (
        "↑ above the plot" if above else "↓ below the plot")
    out = {**note, "text": f"{note['text'].rstrip()} ({where})"}
    if along == "x":
        out.update(xref="paper", x=1 if above else 0, xanchor="right" if above else "left", yref="paper", y=1,
                   yanchor="top")
    else:
        out.update(yref="paper", y=1 if above else 0, yanchor="top" if above else "bottom", xref="paper", x=1,
                   xanchor="right")
    return out


def informative(values: Iterable[Any]) -> bool:
    """Whether a series set is worth a chart: some finite value, and not all the same."""
    vs = [v for v in (num(x) for x in values) if v is not None]
    return bool(vs) and max(vs) != min(vs)


def panel_values(p: dict[str, Any]) -> list[Any]:
    """The values a panel shows: its traces' y (x for lying bars)."""
    return [v for t in p["data"] for v in (t.get("x" if t.get("orientation") == "h" else "y") or [])]


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
