"""Chart specifications: plain JSON the page's script draws (no numbers are computed in the browser).

The contract: each builder returns a dict ``{"id", "title", "note", "views":
[view, ...]}``; a view is ``{"name", "type": "line"|"bar", "x": {"label",
"log"}, "y": {"label", "log"}, "series": [...]}``. A line series is ``{"name",
"points": [[x, y], ...], "dashed", "markers"}`` (``y`` null = gap); a bar view
has ``x.categories`` and series ``{"name", "values"}``. The time-series spec
is ``{"id": "timeseries", "type": "timeseries", "runs": [{"label", "window_s",
"signals": [{"key", "title", "unit", "series"}]}]}``; the page offers a run
selector. Numbers are rounded to 5 significant digits::

    >>> spec = distribution_chart("ttft_ms", "TTFT", [(run, aggregates)])
    >>> [v["name"] for v in spec["views"]]
    ['CDF', 'histogram']

Simulated runs are drawn dashed everywhere.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from infermeter.report.aggregate import RunAggregates
from infermeter.report.pricing import BreakEven, RunCost, break_even_curves, fmt_tokens
from infermeter.report.rundir import RunDir
from infermeter.report.tables import offered_load


def _r(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return float(f"{v:.5g}") if math.isfinite(v) else None


def _pts(xs: Any, ys: Any) -> list[list[float | None]]:
    return [[_r(x), _r(y)] for x, y in zip(xs, ys, strict=True) if _r(x) is not None]


def _simulated(r: RunDir) -> bool:
    return r.source != "measured"


def distribution_chart(key: str, name: str, runs: list[tuple[RunDir, RunAggregates]]) -> dict[str, Any] | None:
    """CDF and histogram views of one latency over every run that recorded it."""
    cdf, hist = [], []
    lo, hi = math.inf, 0.0
    for r, agg in runs:
        d = agg.distributions.get(key)
        if d is None:
            continue
        lo, hi = min(lo, d.cdf[0][0]), max(hi, d.cdf[-1][0])
        dashed = _simulated(r)
        cdf.append({"name": r.label, "points": _pts([v for v, _ in d.cdf], [p for _, p in d.cdf]), "dashed": dashed})
        steps = [[_r(a), _r(s * 100)] for a, _, s in d.hist] + [[_r(d.hist[-1][1]), _r(d.hist[-1][2] * 100)]]
        hist.append({"name": r.label, "points": steps, "dashed": dashed, "step": True})
    if not cdf:
        return None
    x = {"label": f"{name} (ms)", "log": bool(lo > 0 and hi / lo > 20)}
    return {
        "id": f"dist-{key}", "title": f"{name} distribution",
        "note": "CDF: share of requests at or below each latency. Histogram: share of requests per bin.",
        "views": [
            {"name": "CDF", "type": "line", "x": x, "y": {"label": "share of requests ≤ x", "log": False}, "series": cdf},
            {"name": "histogram", "type": "line", "x": x, "y": {"label": "% of requests in bin", "log": False}, "series": hist},
        ],
    }


def _groups(runs: list[RunDir]) -> list[tuple[str, list[RunDir], bool]]:
    """Sweeps are one series each; other runs are grouped by configuration and profile."""
    out: list[tuple[str, list[RunDir], bool]] = []
    loose: dict[str, list[RunDir]] = {}
    for r in runs:
        if r.steps:
            out.append((r.label, list(r.steps), _simulated(r)))
        else:
            loose.setdefault(f"{r.configuration} · {r.profile or 'no profile'}", []).append(r)
    out.extend((name, members, any(_simulated(m) for m in members)) for name, members in loose.items())
    return out


def load_charts(runs: list[RunDir]) -> list[dict[str, Any]]:
    """Throughput vs offered load and latency vs throughput; empty for a single plain run."""
    if len(runs) < 2 and not any(r.steps for r in runs):
        return []
    thr_views: dict[str, list[dict[str, Any]]] = {"output tokens/s": [], "requests/s": []}
    lat_views: dict[str, list[dict[str, Any]]] = {"TTFT p95": [], "TPOT p95": [], "E2E p95": []}
    def series(name: str, dashed: bool, xs: list[Any], ys: list[Any]) -> dict[str, Any]:
        pts = [p for p in _pts(xs, ys) if p[1] is not None]
        return {"name": name, "points": pts, "dashed": dashed, "markers": True}

    for name, members, dashed in _groups(runs):
        # points follow the offered load, so a saturated sweep bends back instead of zigzagging
        s = sorted((m.summary for m in members), key=lambda x: offered_load(x) or 0.0)
        load = [offered_load(x) for x in s]
        out_tps = [x.get("output_token_throughput") for x in s]
        thr_views["output tokens/s"].append(series(name, dashed, load, out_tps))
        thr_views["requests/s"].append(series(name, dashed, load, [x.get("request_throughput") for x in s]))
        for view, key in (("TTFT p95", "ttft_ms"), ("TPOT p95", "tpot_ms"), ("E2E p95", "e2e_ms")):
            lat_views[view].append(series(name, dashed, out_tps, [(x.get(key) or {}).get("p95") for x in s]))
    thr = {
        "id": "throughput-vs-load", "title": "Throughput vs offered load",
        "note": "Each point is a run (or sweep step); where the curve flattens, the deployment is saturated.",
        "views": [{"name": v, "type": "line", "x": {"label": "offered load (req/s)", "log": False},
                   "y": {"label": v, "log": False}, "series": ser} for v, ser in thr_views.items()],
    }
    lat = {
        "id": "latency-vs-throughput", "title": "Latency vs throughput",
        "note": "Each point is a run (or sweep step); the knee is where latency starts to climb for little extra throughput.",
        "views": [{"name": v, "type": "line", "x": {"label": "output tokens/s", "log": False},
                   "y": {"label": f"{v} (ms)", "log": False}, "series": ser} for v, ser in lat_views.items()],
    }
    return [thr, lat]


def timeseries_spec(runs: list[tuple[RunDir, RunAggregates]]) -> dict[str, Any] | None:
    out = []
    for r, agg in runs:
        if not agg.signals:
            continue
        signals = [{
            "key": sig.key, "title": sig.title, "unit": sig.unit,
            "series": [{"name": s.name, "points": _pts(s.t, s.v), "dashed": _simulated(r)} for s in sig.series],
        } for sig in agg.signals]
        out.append({"label": r.label, "window_s": agg.window_s, "signals": signals})
    if not out:
        return None
    return {"id": "timeseries", "type": "timeseries", "title": "Time series", "runs": out,
            "note": "Seconds from the run start. Client-side signals are averaged over windows; server and GPU "
                    "signals are the recorded samples (averaged when there are many)."}


def cost_chart(costs: list[RunCost]) -> dict[str, Any] | None:
    priced = [c for c in costs if c.result is not None]
    if not priced:
        return None
    cats = [f"{c.run.label} ({c.run.hardware})" for c in priced]
    return {
        "id": "cost", "title": "Cost per 1M tokens by configuration",
        "note": "At each run's measured throughput and full utilization; lower is better. A sweep is shown by "
                "its best valid step.",
        "views": [{"name": "$ per 1M tokens", "type": "bar", "x": {"label": "run (configuration)", "categories": cats},
                   "y": {"label": "USD per 1M tokens", "log": False},
                   "series": [{"name": "output tokens", "values": [_r(c.usd_per_1m_output) for c in priced]},
                              {"name": "total tokens", "values": [_r(c.usd_per_1m_total) for c in priced]}]}],
    }


def break_even_chart(items: list[BreakEven], api_usd_per_1m: float | None) -> dict[str, Any] | None:
    grid, curves = break_even_curves(items, api_usd_per_1m)
    if not curves:
        return None
    series = [{"name": name, "points": _pts(grid, np.asarray(v)), "dashed": name == "per-token API"}
              for name, v in curves.items()]
    note = "Monthly cost to serve a monthly volume of output tokens (at each run's input:output mix); steps are added deployments."
    if api_usd_per_1m:
        crossings = [f"{i.label}: {fmt_tokens(i.api_break_even_tokens)} tokens/month"
                     for i in items if i.api_break_even_tokens is not None]
        note += f" Break-even with the API at ${api_usd_per_1m:g}/1M: " + "; ".join(crossings) + "."
    else:
        note += " Give --api-price USD_PER_1M to add a per-token API line."
    return {
        "id": "break-even", "title": "Break-even: monthly cost vs volume", "note": note,
        "views": [{"name": "monthly cost", "type": "line", "x": {"label": "output tokens per month", "log": True},
                   "y": {"label": "USD per month", "log": True}, "series": series}],
    }
