"""The run report's charts, as Plotly specs (:mod:`infermeter.report.figures`; no numbers computed in the browser).

The contract: each builder returns a chart ``{"id", "title", "note", "views": [{"name", "panels"}]}``
or None when there is nothing informative to draw (no data, or every value the same: then the
section says so instead of showing an empty or flat chart). Colours come from one
:class:`~infermeter.report.figures.Colors` per report (a run has the same colour in every chart);
simulated and emulated runs are drawn dashed; every axis names its unit; latency charts draw the
runs' SLO limit when they have one::

    >>> colors = Colors(r.label for r in runs)
    >>> spec = distribution_chart("ttft_ms", "TTFT", [(run, aggregates)], colors)
    >>> [v["name"] for v in spec["views"]]
    ['CDF', 'histogram']
"""

from __future__ import annotations

from typing import Any

from infermeter.report.aggregate import RunAggregates
from infermeter.report.figures import PALETTE, Colors, axis, bar_panel, chart, line, panel, threshold
from infermeter.report.pricing import BreakEven, RunCost, break_even_curves, fmt_tokens
from infermeter.report.rundir import RunDir
from infermeter.report.tables import load_x

LOAD_AXIS = "offered load (req/s; closed loop: achieved)"


def _dashed(r: RunDir) -> bool:
    return r.source != "measured"


def _slo_limit(runs: list[RunDir], key: str) -> float | None:
    """The SLO limit ``key`` (e.g. ``ttft_ms``) shared by the runs that set one (None when none or they differ)."""
    limits = {float(v) for r in runs for v in [((r.run.get("slo") or r.summary.slo or {}) or {}).get(key)]
              if isinstance(v, (int, float))}
    return limits.pop() if len(limits) == 1 else None


def distribution_chart(key: str, name: str, runs: list[tuple[RunDir, RunAggregates]],
                       colors: Colors | None = None) -> dict[str, Any] | None:
    """CDF and histogram views of one latency over every run that recorded it."""
    colors = colors or Colors()
    cdf, hist = [], []
    for r, agg in runs:
        d = agg.distributions.get(key)
        if d is None:
            continue
        c = colors[r.label]
        cdf.append(line(r.label, [v for v, _ in d.cdf], [p for _, p in d.cdf], c, dashed=_dashed(r)))
        xs = [a for a, _, _ in d.hist] + [d.hist[-1][1]]
        ys = [s * 100 for _, _, s in d.hist] + [d.hist[-1][2] * 100]
        hist.append(line(r.label, xs, ys, c, dashed=_dashed(r), step=True))
    if not cdf:
        return None
    x = axis(f"{name} (ms)")  # log where the latencies span more than 10x (figures.axis_type)
    limit = _slo_limit([r for r, _ in runs], key)
    shapes = [threshold(limit, f"SLO {limit:g} ms", along="x")] if limit else []
    return chart(f"dist-{key}", f"{name} distribution", [
        {"name": "CDF", "panels": [panel(f"{name}: share of requests at or below", cdf, x,
                                         axis("share of requests ≤ x", log=False, range=[0, 1.02]), shapes=shapes)]},
        {"name": "histogram", "panels": [panel(f"{name}: requests per bin", hist, x,
                                               axis("% of requests in bin", log=False),
                                               shapes=shapes)]},
    ], note="CDF: share of requests at or below each latency. Histogram: share of requests per bin. "
            "Dashed = simulated or emulated.")


def _groups(runs: list[RunDir]) -> list[tuple[str, list[RunDir], bool]]:
    """Sweeps are one series each; other runs are grouped by configuration and profile."""
    out: list[tuple[str, list[RunDir], bool]] = []
    loose: dict[str, list[RunDir]] = {}
    for r in runs:
        if r.steps:
            out.append((r.label, list(r.steps), _dashed(r)))
        else:
            loose.setdefault(f"{r.configuration} · {r.profile or 'no profile'}", []).append(r)
    out.extend((name, members, any(_dashed(m) for m in members)) for name, members in loose.items())
    return out


def load_charts(runs: list[RunDir], colors: Colors | None = None) -> list[dict[str, Any]]:
    """Throughput vs offered load and latency vs throughput; empty for a single plain run. A closed-loop run is
    plotted at the rate it achieved (:func:`~infermeter.report.tables.load_x`)."""
    if len(runs) < 2 and not any(r.steps for r in runs):
        return []
    colors = colors or Colors()
    thr: dict[str, list[dict[str, Any]]] = {"output tokens/s": [], "requests/s": []}
    lat: dict[str, list[dict[str, Any]]] = {"TTFT p95": [], "TPOT p95": [], "E2E p95": []}
    for name, members, dashed in _groups(runs):
        # points follow the load, so a saturated sweep bends back instead of zigzagging
        s = sorted((m.summary for m in members), key=lambda x: load_x(x) or 0.0)
        load = [load_x(x) for x in s]
        out_tps = [x.output_token_throughput for x in s]
        c = colors[name]
        thr["output tokens/s"].append(line(name, load, out_tps, c, dashed=dashed, markers=True))
        thr["requests/s"].append(line(name, load, [x.request_throughput for x in s], c, dashed=dashed,
                                      markers=True))
        for view, key in (("TTFT p95", "ttft_ms"), ("TPOT p95", "tpot_ms"), ("E2E p95", "e2e_ms")):
            lat[view].append(line(name, out_tps, [x.distribution(key).p95 for x in s], c, dashed=dashed,
                                  markers=True))
    every = [leaf for r in runs for leaf in r.leaves()]
    out = []
    spec = chart("throughput-vs-load", "Throughput vs offered load", [
        {"name": v, "panels": [panel(f"{v} vs offered load", ser, axis(LOAD_AXIS), axis(v))]}
        for v, ser in thr.items()],
        note="Each point is a run (or sweep step), at its offered rate (open loop) or, for a closed loop, which offers "
             "no rate of its own, at the rate it achieved (completed requests/s); where the curve flattens, the "
             "deployment is saturated.")
    if spec:
        out.append(spec)
    views = []
    for v, ser in lat.items():
        key = {"TTFT p95": "ttft_ms", "TPOT p95": "tpot_ms", "E2E p95": "e2e_ms"}[v]
        limit = _slo_limit(every, key)
        shapes = [threshold(limit, f"SLO {limit:g} ms")] if limit else []
        views.append({"name": v, "panels": [panel(f"{v} vs throughput", ser, axis("output tokens/s"),
                                                  axis(f"{v} (ms)"), shapes=shapes)]})
    spec = chart("latency-vs-throughput", "Latency vs throughput", views,
                 note="Each point is a run (or sweep step); the knee is where latency climbs for little extra "
                      "throughput. The dashed red line is the runs' SLO limit.")
    if spec:
        out.append(spec)
    return out


def timeseries_spec(runs: list[tuple[RunDir, RunAggregates]], colors: Colors | None = None) -> dict[str, Any] | None:
    """One view per run (a menu when many), one panel per signal; flat signals are left out and named."""
    views = []
    for r, agg in runs:
        if not agg.signals:
            continue
        panels = []
        for sig in agg.signals:
            many = len(sig.series) > 1  # several series of one run (sent vs completed, per GPU): their own colours
            ts = [line(s.name, s.t, s.v, PALETTE[i % len(PALETTE)] if many else (colors or Colors())[r.label],
                       dashed=_dashed(r)) for i, s in enumerate(sig.series)]
            panels.append(panel(sig.title, ts, axis("time from the run start (s)", log=False),
                                axis(sig.unit or sig.title),
                                height=300,
                                legend=len(ts) > 1))
        views.append({"name": r.label, "panels": panels})
    return chart("timeseries", "Time series", views,
                 note="Seconds from the run start. Client-side signals are averaged over windows; server and GPU "
                      "signals are the recorded samples (averaged when there are many).")


def cost_chart(costs: list[RunCost], colors: Colors | None = None) -> dict[str, Any] | None:
    priced = [c for c in costs if c.result is not None]
    if not priced:
        return None
    colors = colors or Colors()
    cats = [f"{c.run.label} ({c.run.hardware})" for c in priced]
    cols = [colors[c.run.label] for c in priced]
    views = [{"name": name, "panels": [bar_panel(f"$ per 1M {name}", name, cats, vals, cols,
                                                 axis("run (configuration)"), axis(f"USD per 1M {name}"),
                                                 height=380)]}
             for name, vals in (("output tokens", [c.usd_per_1m_output for c in priced]),
                                ("total tokens", [c.usd_per_1m_total for c in priced]))]
    return chart("cost", "Cost per 1M tokens by configuration", views,
                 note="At each run's throughput and full utilization; lower is better. A sweep is shown by its best "
                      "valid step.")


def break_even_chart(items: list[BreakEven], api_usd_per_1m: float | None,
                     colors: Colors | None = None) -> dict[str, Any] | None:
    grid, curves = break_even_curves(items, api_usd_per_1m)
    if not curves:
        return None
    colors = colors or Colors()
    series = [line(name, list(grid), list(v), "#5f6b76" if name == "per-token API" else colors[name],
                   dashed=name == "per-token API", step=True) for name, v in curves.items()]
    note = ("Monthly cost to serve a monthly volume of output tokens (at each run's input:output mix); steps are "
            "added deployments.")
    if api_usd_per_1m:
        crossings = [f"{i.label}: {fmt_tokens(i.api_break_even_tokens)} tokens/month"
                     for i in items if i.api_break_even_tokens is not None]
        note += f" Break-even with the API at ${api_usd_per_1m:g}/1M: " + "; ".join(crossings) + "."
    else:
        note += " Give --api-price USD_PER_1M to add a per-token API line."
    return chart("break-even", "Break-even: monthly cost vs volume", [
        {"name": "monthly cost", "panels": [panel("monthly cost vs volume", series,
                                                  axis("output tokens per month", log=True),
                                                  axis("USD per month", log=True))]}], note=note)
