"""``infermeter report`` as a function: result directories in, ``report.html``, ``report.md`` and ``summary.csv`` out.

The contract: :func:`build_report` loads every run (sweeps expand into their
steps), aggregates each run's records once (column-wise; nothing per request
is kept after its run is done), prices the runs, and writes three files that
show the same tables. It returns their paths::

    >>> files = build_report(["results/a100", "results/h100"], "out/report",
    ...                      ReportOptions(api_usd_per_1m=0.6))
    >>> files.html.name, files.markdown.name, files.csv.name
    ('report.html', 'report.md', 'summary.csv')

Time is passed in (``ReportOptions.now``) so output is reproducible in tests.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter import __version__
from infermeter.errors import UserError
from infermeter.report import charts as ch
from infermeter.report.aggregate import DISTRIBUTION_METRICS, RunAggregates, aggregate_run
from infermeter.report.content import ReportContent, Section
from infermeter.report.figures import Colors
from infermeter.report.html import render_html
from infermeter.report.markdown import render_csv, render_markdown, summary_rows
from infermeter.report.matrix import matrix_cells, matrix_tables, representative
from infermeter.report.pricing import RunCost, break_even, price_runs
from infermeter.report.rundir import RunDir, load_run_dirs
from infermeter.report.tables import (
    cost_table,
    definitions_table,
    gpu_table,
    interval_table,
    latency_tables,
    prices_table,
    runs_table,
    server_table,
    sweep_table,
    throughput_table,
    validity_table,
)


@dataclass(frozen=True)
class ReportOptions:
    title: str | None = None
    price_options: Any | None = None  # infermeter.analysis.prices.PriceOptions
    api_usd_per_1m: float | None = None  # a per-token API price for the break-even chart
    now: dt.datetime | None = None
    today: dt.date | None = None


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    csv: Path


def _headline(runs: list[RunDir], leaves: list[RunDir]) -> list[str]:
    measured = sum(1 for r in leaves if r.source == "measured")
    emulated = sum(1 for r in leaves if r.source == "emulated")
    invalid = [r.label for r in leaves if not r.summary.valid]
    sweeps = sum(1 for r in runs if r.steps)
    line = (f"{len(leaves)} run(s): {measured} measured, " + (f"{emulated} emulated (infermeter's twin behind HTTP), "
                                                              if emulated else "")
            + f"{len(leaves) - measured - emulated} simulated")
    if sweeps:
        line += f"; {sweeps} sweep(s)"
    out = [line + "."]
    out.append(f"{len(invalid)} invalid: {', '.join(invalid)}." if invalid else "Every run passed its validity checks.")
    _, configs, profiles, _ = matrix_cells(runs)
    out.append(f"Configurations: {', '.join(configs)}. Profiles: {', '.join(profiles)}.")
    return out


def _grouped_notes(aggs: list[tuple[RunDir, RunAggregates]]) -> list[str]:
    by_note: dict[str, list[str]] = {}
    for r, a in aggs:
        for n in a.notes:
            by_note.setdefault(n, []).append(r.label)
    return [f"{n}: {', '.join(labels)}" for n, labels in by_note.items()]


def build_content(runs: list[RunDir], aggs: list[tuple[RunDir, RunAggregates]], costs: list[RunCost],
                  price_notes: list[str], options: ReportOptions) -> ReportContent:
    """Sections, tables and chart specs for already loaded, aggregated and priced runs."""
    leaves = [leaf for r in runs for leaf in r.leaves()]
    charts: list[dict[str, Any]] = []

    def add(section: str, spec: dict[str, Any] | None) -> None:
        if spec is not None:
            charts.append({**spec, "section": section})

    colors = Colors(r.label for r in leaves)  # one colour per run in every chart
    for key, name in DISTRIBUTION_METRICS.items():
        add("distributions", ch.distribution_chart(key, name, aggs, colors))
    for spec in ch.load_charts(runs, colors):
        add("load", spec)
    add("timeseries", ch.timeseries_spec(aggs, colors))
    reps = {id(representative(r)) for r in runs}
    rep_costs = [c for c in costs if id(c.run) in reps]
    add("cost", ch.cost_chart(rep_costs, colors))
    add("cost", ch.break_even_chart(break_even(rep_costs, options.api_usd_per_1m), options.api_usd_per_1m, colors))
    has = {c["section"] for c in charts}

    sections = [Section("overview", "Overview", "Each run, what it measured or simulated, and whether its numbers can "
                        "be trusted (validity).", [runs_table(leaves), validity_table(leaves)])]
    matrix = matrix_tables(runs, costs)
    if matrix:
        sections.append(Section("matrix", "Configuration × profile", "One table per metric: rows are configurations, "
                                "columns workload profiles; ★ marks the best valid value per profile.", matrix))
    sections.append(Section("distributions", "Latency distributions", "How latency is spread over requests.",
                            has_charts="distributions" in has))
    sweeps = [sweep_table(r) for r in runs if r.steps]
    if sweeps or "load" in has:
        sections.append(Section("load", "Load curves", "Throughput and latency as the offered load grows.", sweeps,
                                has_charts="load" in has))
    sections.append(Section("timeseries", "Time series", "What happened during each run.",
                            has_charts="timeseries" in has, notes=_grouped_notes(aggs)))
    sections.append(Section("cost", "Cost", "Cost per 1M tokens at the measured throughput, and when self-hosting "
                            "breaks even.", [cost_table(costs), prices_table(costs)], has_charts="cost" in has,
                            notes=price_notes))
    numbers = [throughput_table(leaves), *latency_tables(leaves)]
    numbers += [t for t in (interval_table(leaves), server_table(leaves), gpu_table(leaves)) if t is not None]
    sections.append(Section("numbers", "All numbers", "Every run's summary.json values.", numbers))
    sections.append(Section("definitions", "Metric definitions", None, [definitions_table()]))
    now = options.now or dt.datetime.now(dt.timezone.utc)
    title = options.title or f"infermeter report: {len(leaves)} run(s)"
    return ReportContent(title, now.strftime("%Y-%m-%d %H:%M UTC"), __version__, _headline(runs, leaves), sections, charts)


def build_report(paths: list[str] | list[Path], out_dir: str | Path, options: ReportOptions | None = None) -> ReportFiles:
    """Write the report files into ``out_dir`` (created when missing); see the module docstring."""
    options = options or ReportOptions()
    runs = load_run_dirs(paths)
    leaves = [leaf for r in runs for leaf in r.leaves()]
    aggs = [(leaf, aggregate_run(leaf)) for leaf in leaves]
    costs, price_notes = price_runs(leaves, options.price_options, options.today)
    content = build_content(runs, aggs, costs, price_notes, options)
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    files = ReportFiles(out / "report.html", out / "report.md", out / "summary.csv")
    files.html.write_text(render_html(content), encoding="utf-8")
    files.markdown.write_text(render_markdown(content), encoding="utf-8")
    files.csv.write_text(render_csv(summary_rows(leaves, costs)), encoding="utf-8")
    return files
