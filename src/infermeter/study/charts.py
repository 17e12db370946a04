"""The study report's charts, as Plotly specs built with the run report's helpers (:mod:`infermeter.report.figures`).

The contract: one colour per configuration in every chart (:func:`config_colors`, study order), one
panel per profile (each profile on its own axis, so a slow profile's bars are not flattened by a
fast one's), full-width cards, axes with units, SLO limits drawn on latency charts, and no chart
(or panel) without informative data — :func:`infermeter.report.figures.chart` drops those and
says so. The first chart, :func:`decision_chart`, is the one to screenshot: cost at the cost basis
against p95 latency at SLO capacity, one point per configuration, per profile, with the interval
the decision knows of as error bars::

    >>> [v["name"] for v in throughput_chart(study, cells, colors)["views"]]
    ['output tokens/s at saturation', 'requests/s at saturation', 'requests/s at SLO capacity']
"""

from __future__ import annotations

from typing import Any

from infermeter.analysis.capacity import size
from infermeter.report.figures import Colors, axis, bar_panel, chart, line, panel, points, threshold
from infermeter.report.figures import num as rounded  # noqa: F401 - soakview rounds its chart numbers with it
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.decision import UNIT, Decision
from infermeter.study.matrix import METRIC, TAG, VALUE_METRIC
from infermeter.study.pricing import StudyPrices


def config_colors(study: StudyConfig) -> Colors:
    return Colors(c.label for c in study.configurations)


def _latency_key(study: StudyConfig) -> tuple[str, str]:
    """The latency the decision chart plots: the SLO's TTFT limit if any, else E2E, else TTFT."""
    lim = study.slo.limits
    if "ttft_ms" in lim or "e2e_ms" not in lim:
        return "ttft_ms", "TTFT"
    return "e2e_ms", "E2E"


def decision_chart(study: StudyConfig, cells: list[CellResult], prices: StudyPrices, decisions: dict[str, Decision],
                   colors: Colors) -> dict[str, Any] | None:
    """Cost per unit vs p95 latency at the cost basis, one point per configuration, one panel per profile."""
    key, name = _latency_key(study)
    pct = study.slo.percentile
    at = "capacity" if study.slo.limits else "saturation"
    metric = study.pricing.value_metric
    panels = []
    for profile in study.profiles:
        d = decisions.get(profile)
        traces = []
        for o in (d.options if d else []):
            c = o.cell
            y = o.value
            xv = ((c.latency.get(at) or {}).get(key) or {}).get(pct)
            iv = o.interval
            err = ([y - iv.lo], [iv.hi - y]) if iv else None
            star = d is not None and d.best is o
            hover = [f"{c.config} ({c.source}): ${y:,.3g} {UNIT[metric]}, {name} {pct} {xv:,.3g} ms"
                     if xv is not None else f"{c.config}: ${y:,.3g}"]
            traces.append(points(c.config + (" (recommended)" if star else ""), [xv], [y], colors[c.config],
                                 y_err=err, symbol="star" if star else "circle", group=c.config, hover=hover))
        limit = study.slo.limits.get(key)
        shapes = [threshold(limit, f"SLO {name} {pct} {limit:g} ms", along="x")] if limit else []
        panels.append(panel(profile, traces, axis(f"{name} {pct} at {'SLO capacity' if at == 'capacity' else 'saturation'} (ms)"),
                            axis(f"USD {UNIT[metric]}"), shapes=shapes, height=400))
    note = ("One point per configuration serving the study's model; lower is cheaper, left is faster. ★ = "
            "recommended. Error bars: the interval the decision knows of (the SLO edge's bracket; the performance "
            "model's prediction interval where it exists).")
    return chart("decision", "Cost vs latency at the load the decision prices", [{"name": "decision", "panels": panels}],
                 note=note, section="decision")


def _bars(chart_id: str, title: str, section: str, note: str, study: StudyConfig, cells: list[CellResult],
          views: list[tuple[str, str, Any]], colors: Colors) -> dict[str, Any] | None:
    """Per view, one panel per profile with a bar per configuration (its colour everywhere)."""
    by_key = {c.key: c for c in cells}
    confs = [c.label for c in study.configurations]
    source = {c.config: c.source for c in cells}
    out = []
    for name, unit, getter in views:
        panels = []
        for p in study.profiles:
            have = [n for n in confs if (n, p) in by_key and not by_key[(n, p)].unavailable]
            vals = [getter(by_key[(n, p)]) for n in have]
            cats = [f"{n} ({TAG.get(source.get(n, ''), '?')})" for n in have]
            panels.append(bar_panel(p, name, cats, vals, [colors[n] for n in have], axis("configuration"),
                                    axis(f"{name} ({unit})" if unit else name), height=360))
        out.append({"name": name, "panels": panels})
    return chart(chart_id, title, out, note=note, section=section)


def throughput_chart(study: StudyConfig, cells: list[CellResult], colors: Colors) -> dict[str, Any] | None:
    views = [("output tokens/s at saturation", "tokens/s", lambda c: c.saturation.get("output_tokens_per_s")),
             ("requests/s at saturation", "req/s", lambda c: c.saturation.get("requests_per_s"))]
    if study.slo.limits:
        views.append(("requests/s at SLO capacity", "req/s", lambda c: (c.capacity or {}).get("requests_per_s")))
    return _bars("study-throughput", "Throughput by configuration, per profile", "matrix",
                 "One panel per profile (its own scale); (sim.) = simulated, (meas.) = measured.", study, cells, views,
                 colors)


def server_chart(study: StudyConfig, cells: list[CellResult], colors: Colors) -> dict[str, Any] | None:
    views = [("KV-cache usage max", "%", lambda c: None if c.server.get("kv_cache_usage_max") is None
              else 100 * c.server["kv_cache_usage_max"]),
             ("prefix-cache hit rate", "%", lambda c: None if c.server.get("prefix_cache_hit_rate") is None
              else 100 * c.server["prefix_cache_hit_rate"]),
             ("waiting requests, max", "requests", lambda c: c.server.get("num_requests_waiting_max")),
             ("preemptions", "count", lambda c: c.server.get("num_preemptions"))]
    return _bars("study-server", "KV cache and queue at saturation", "server",
                 "From the closed-loop saturation step of each cell.", study, cells, views, colors)


def cost_chart(study: StudyConfig, cells: list[CellResult], prices: StudyPrices, colors: Colors) -> dict[str, Any] | None:
    vkey = VALUE_METRIC[study.pricing.value_metric]
    keys = [vkey] + [k for k in ("usd_1m_out", "usd_1m_total", "usd_1m_req") if k != vkey]
    units = {"usd_1m_req": "USD per 1M requests", "usd_1m_out": "USD per 1M output tokens",
             "usd_1m_total": "USD per 1M total tokens"}
    views = [(METRIC[k].title.split(" (")[0], units[k], lambda c, k=k: METRIC[k].value(c, prices.cost.get(c.key)))
             for k in keys]
    return _bars("study-cost", "Cost by configuration, per profile", "value",
                 "At each cell's cost basis; lower is better. Missing bars: no price or no load met the SLO.",
                 study, cells, [(n, u.removeprefix("USD "), g) for n, u, g in views], colors)


def load_chart(study: StudyConfig, cells: list[CellResult], colors: Colors) -> dict[str, Any] | None:
    """Latency vs achieved throughput over each cell's steps: views TTFT / E2E p95, one panel per profile."""
    views = []
    for metric, label, slo_key in (("ttft_ms_p95", "TTFT p95", "ttft_ms"), ("tpot_ms_p95", "TPOT p95", "tpot_ms"),
                                   ("e2e_ms_p95", "E2E p95", "e2e_ms")):
        panels = []
        for p in study.profiles:
            series = []
            for c in (c for c in cells if c.profile == p and not c.unavailable):
                pts = sorted(((s.get("request_throughput"), s.get(metric)) for s in c.steps
                              if s.get("request_throughput") and s.get(metric) is not None), key=lambda x: x[0] or 0)
                if pts:
                    series.append(line(c.config, [x for x, _ in pts], [y for _, y in pts], colors[c.config],
                                       dashed=c.source != "measured", markers=True))
            limit = study.slo.limits.get(slo_key)
            shapes = [threshold(limit, f"SLO {limit:g} ms")] if limit and study.slo.percentile == "p95" else []
            panels.append(panel(p, series, axis("requests/s"), axis(f"{label} (ms)"), shapes=shapes))
        views.append({"name": label, "panels": panels})
    return chart("study-load", "Latency vs throughput (every load step)", views, section="latency",
                 note="One point per step; where a curve turns up, queueing starts. Dashed = simulated. The red line "
                      "is the SLO limit.")


def break_even_chart(study: StudyConfig, prices: StudyPrices, colors: Colors, points_n: int = 120) -> dict[str, Any] | None:
    v = study.volume
    grid = [v.low * (v.high / v.low) ** (i / (points_n - 1)) for i in range(points_n)]
    panels = []
    for p in study.profiles:
        cands = prices.candidates.get(p) or []
        series = [line(f"{c.name} ({TAG.get(c.source, c.source)})", grid,
                       [size(c, x, v.peak_factor, v.headroom).usd_per_1m_requests for x in grid], colors[c.name],
                       step=True) for c in cands]
        panels.append(panel(p, series, axis("requests per day", log=True), axis("USD per 1M requests (fleet)", log=True)))
    return chart("study-break-even", "Break-even: fleet cost per 1M requests vs daily volume", [
        {"name": "fleet cost", "panels": panels}], section="break-even",
        note="Fleet cost (whole replicas, with headroom) per 1M requests served; the lowest line at a volume is the "
             "cheapest fleet there. Plotted per request rather than per month so the lines do not overlap.")


def study_charts(study: StudyConfig, cells: list[CellResult], prices: StudyPrices,
                 decisions: dict[str, Decision]) -> list[dict[str, Any]]:
    colors = config_colors(study)
    specs = [decision_chart(study, cells, prices, decisions, colors), throughput_chart(study, cells, colors),
             load_chart(study, cells, colors), server_chart(study, cells, colors),
             cost_chart(study, cells, prices, colors), break_even_chart(study, prices, colors)]
    return [s for s in specs if s is not None]
