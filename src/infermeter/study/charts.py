"""Chart specs of the study report, in the report package's JSON format (drawn by its script).

The contract: each builder returns ``{"id", "title", "note", "section", "views": [...]}`` (see
:mod:`infermeter.report.charts`) from figures already in the tables, or None when there is
nothing to draw. Simulated series are dashed; bar categories carry ``(sim.)`` / ``(meas.)``::

    >>> [v["name"] for v in throughput_chart(study, cells)["views"]]
    ['output tokens/s at saturation', 'requests/s at saturation', 'requests/s at SLO capacity']
"""

from __future__ import annotations

import math
from typing import Any

from infermeter.analysis.capacity import size
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.matrix import METRIC, TAG, VALUE_METRIC
from infermeter.study.pricing import StudyPrices


def rounded(v: Any) -> float | None:
    """A number for chart JSON: 5 significant digits; None for missing or not finite."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return float(f"{x:.5g}") if math.isfinite(x) else None


_r = rounded


def _bars(chart_id: str, title: str, section: str, note: str, study: StudyConfig, cells: list[CellResult],
          views: list[tuple[str, Any]]) -> dict[str, Any] | None:
    by_key = {c.key: c for c in cells}
    confs = [c.label for c in study.configurations]
    source = {c.config: c.source for c in cells}
    cats = [f"{n} ({TAG.get(source.get(n, ''), '?')})" for n in confs]
    out = []
    for name, getter in views:
        series = []
        for p in study.profiles:
            vals = [_r(getter(by_key[(n, p)])) if (n, p) in by_key else None for n in confs]
            if any(v is not None for v in vals):
                series.append({"name": p, "values": vals})
        if series:
            out.append({"name": name, "type": "bar", "x": {"label": "configuration", "categories": cats},
                        "y": {"label": name, "log": False}, "series": series})
    if not out:
        return None
    return {"id": chart_id, "title": title, "section": section, "note": note, "views": out}


def throughput_chart(study: StudyConfig, cells: list[CellResult]) -> dict[str, Any] | None:
    views = [("output tokens/s at saturation", lambda c: c.saturation.get("output_tokens_per_s")),
             ("requests/s at saturation", lambda c: c.saturation.get("requests_per_s"))]
    if study.slo.limits:
        views.append(("requests/s at SLO capacity", lambda c: (c.capacity or {}).get("requests_per_s")))
    return _bars("study-throughput", "Throughput by configuration and profile", "matrix",
                 "Bars per profile; (sim.) = simulated, (meas.) = measured.", study, cells, views)


def server_chart(study: StudyConfig, cells: list[CellResult]) -> dict[str, Any] | None:
    views = [("KV-cache usage max (%)", lambda c: None if c.server.get("kv_cache_usage_max") is None
              else 100 * c.server["kv_cache_usage_max"]),
             ("prefix-cache hit rate (%)", lambda c: None if c.server.get("prefix_cache_hit_rate") is None
              else 100 * c.server["prefix_cache_hit_rate"]),
             ("waiting requests max", lambda c: c.server.get("num_requests_waiting_max")),
             ("preemptions", lambda c: c.server.get("num_preemptions"))]
    return _bars("study-server", "KV cache and queue at saturation", "server",
                 "From the closed-loop saturation step of each cell.", study, cells, views)


def cost_chart(study: StudyConfig, cells: list[CellResult], prices: StudyPrices) -> dict[str, Any] | None:
    keys = [VALUE_METRIC[study.pricing.value_metric]] + [k for k in ("usd_1m_out", "usd_1m_total", "usd_1m_req")
                                                         if k != VALUE_METRIC[study.pricing.value_metric]]
    views = [(METRIC[k].title, lambda c, k=k: METRIC[k].value(c, prices.cost.get(c.key))) for k in keys]
    return _bars("study-cost", "Cost by configuration and profile", "value",
                 "At each cell's cost basis; lower is better. Missing bars: no price or no load met the SLO.",
                 study, cells, views)


def load_chart(study: StudyConfig, cells: list[CellResult]) -> dict[str, Any] | None:
    """Latency vs achieved throughput over each cell's steps, one view per profile and metric."""
    views = []
    for p in study.profiles:
        for metric, label in (("ttft_ms_p95", "TTFT p95"), ("e2e_ms_p95", "E2E p95")):
            series = []
            for c in (c for c in cells if c.profile == p):
                pts = sorted(([_r(s.get("request_throughput")), _r(s.get(metric))] for s in c.steps
                              if s.get("request_throughput") and s.get(metric) is not None), key=lambda x: x[0] or 0)
                if pts:
                    series.append({"name": c.config, "points": pts, "dashed": c.source != "measured",
                                   "markers": True})
            if series:
                views.append({"name": f"{p}: {label}", "type": "line", "x": {"label": "requests/s", "log": False},
                              "y": {"label": f"{label} (ms)", "log": True}, "series": series})
    if not views:
        return None
    return {"id": "study-load", "title": "Latency vs throughput (every load step)", "section": "latency",
            "note": "One point per step; where a curve turns up, queueing starts. Dashed = simulated.", "views": views}


def break_even_chart(study: StudyConfig, prices: StudyPrices, points: int = 120) -> dict[str, Any] | None:
    v = study.volume
    grid = [v.low * (v.high / v.low) ** (i / (points - 1)) for i in range(points)]
    views = []
    for p in study.profiles:
        cands = prices.candidates.get(p) or []
        series = [{"name": f"{c.name} ({TAG.get(c.source, c.source)})", "points": [[_r(x), _r(size(c, x, v.peak_factor, v.headroom).usd_per_month)]
                                              for x in grid], "dashed": c.source != "measured"} for c in cands]
        if series:
            views.append({"name": p, "type": "line", "x": {"label": "requests per day", "log": True},
                          "y": {"label": "USD per month", "log": True}, "series": series})
    if not views:
        return None
    return {"id": "study-break-even", "title": "Break-even: monthly fleet cost vs daily volume", "section": "break-even",
            "note": "Steps are added replicas; the lowest line at a volume is the cheapest fleet there.", "views": views}


def study_charts(study: StudyConfig, cells: list[CellResult], prices: StudyPrices) -> list[dict[str, Any]]:
    specs = [throughput_chart(study, cells), load_chart(study, cells), server_chart(study, cells),
             cost_chart(study, cells, prices), break_even_chart(study, prices)]
    return [s for s in specs if s is not None]
