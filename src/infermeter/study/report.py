"""Write the study report: ``report.html`` and ``report.md`` through the report package, plus ``study.json`` and ``cells.csv``.

The contract: :func:`study_content` lays the study out as a
:class:`~infermeter.report.content.ReportContent` — the decision first (a card per profile:
recommended configuration, runner-up, margin and intervals, where it holds, caveats; then the
cost-vs-latency chart and the claims table), the findings ranked by how much they bear on it,
then folded sections: the configuration x profile matrix, rankings, value (cost, prices with
dates), break-even (at most five bands), latency, server state, soak, every cell and step,
evidence, methodology and metric definitions — and the report package renders it
(self-contained HTML, GitHub Markdown with the same cells). ``study.json`` holds every figure as
data::

    files = write_study_report(result)
    files["html"].name, files["markdown"].name, files["json"].name, files["csv"].name
    ('report.html', 'report.md', 'study.json', 'cells.csv')
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from infermeter import __version__
from infermeter.report.content import ReportContent, Section
from infermeter.report.figures import from_series_spec
from infermeter.report.html import render_html
from infermeter.report.markdown import render_csv, render_markdown
from infermeter.report.tables import definitions_table
from infermeter.study import tables as T
from infermeter.study.charts import config_colors, study_charts
from infermeter.study.decisionview import claims_table, decision_cards, decision_table
from infermeter.study.matrix import METRICS, VALUE_METRIC, matrix_table
from infermeter.study.soakview import soak_chart, soak_tables

MATRIX_HEAD = ("sat_out", "sat_rps", "cap_rps", "cap_out", "err")


def _headline(result: Any) -> list[str]:
    s, cells = result.study, result.cells
    measured = sum(1 for c in cells if c.source == "measured")
    emulated = sum(1 for c in cells if c.source == "emulated")
    lines = []
    if result.pending:
        lines.append(f"PARTIAL REPORT: {len(cells)} of {len(cells) + len(result.pending)} cells done; still to run: "
                     f"{', '.join(result.pending)} (this page is rewritten as each cell finishes; `--resume` "
                     "continues a stopped study).")
    lines.append(f"{s.model}: {len(s.configurations)} configuration(s) × {len(s.profiles)} profile(s) = "
                 f"{len(cells) + len(result.pending)} cells, {measured} measured, "
                 + (f"{emulated} emulated, " if emulated else "")
                 + f"{len(cells) - measured - emulated} simulated by infermeter's twin.")
    lines.append(f"SLO: {s.slo.describe()}. Load: {s.load.describe()}.")
    dated = sorted({p.date_text for p in result.prices.prices.values() if not isinstance(p, str)})
    lines.append(f"Prices: {s.pricing.provider or 'cheapest list price per configuration'}"
                 + (f", dated {', '.join(dated)}" if dated else "") + f"; value metric {s.pricing.value_metric}.")
    return lines


def study_content(result: Any) -> ReportContent:
    """The report: the decision (cards, the cost-vs-latency chart, claims), ranked findings, then every table in
    folded sections (see the module docstring)."""
    s, cells, prices = result.study, result.cells, result.prices
    decisions = result.decisions
    configs = [c.label for c in s.configurations]
    profiles = list(s.profiles)
    metrics = [m for m in METRICS if s.slo.limits or not m.needs_slo]
    vkey = VALUE_METRIC[s.pricing.value_metric]

    def mt(keys: tuple[str, ...] | None = None, section: str | None = None) -> list[Any]:
        return [matrix_table(m, configs, profiles, cells, prices, star=m.decision or m.key == vkey) for m in metrics
                if (keys is None or m.key in keys) and (section is None or m.section == section)]

    findings = [f"[F{i}] {f.text}" for i, f in enumerate(result.findings, 1)]
    decision_tables = [decision_table(s, decisions)] + ([claims_table(result.claims)] if result.claims else [])
    sections = [
        Section("decision", "Decision", f"Which configuration to rent for each profile, at {s.pricing.value_metric} "
                f"({'at the highest load meeting the SLO' if s.slo.limits else 'at saturation'}), and how sure that is.",
                decision_tables, has_charts=True, cards=decision_cards(s, decisions, prices)),
        Section("findings", "Findings", "Ranked by how much they bear on the decision; the figures each quotes are "
                "listed under 'Evidence for the findings'.", notes=findings),
        Section("matrix", "Configuration × profile", "Rows are configurations, columns profiles. (sim.) = simulated "
                "(3 significant figures), (meas.) = measured; ★ = best, only on figures the decision uses.",
                mt(MATRIX_HEAD), has_charts=True, collapsed=True),
        Section("rankings", "Rankings per profile", None, T.ranking_tables(s, cells, prices), collapsed=True),
        Section("value", "Best value and cost", f"Best value = lowest {s.pricing.value_metric} at the cost basis.",
                [T.best_value_table(s, prices), *mt((vkey,)),
                 *mt(tuple(k for k in ("usd_1m_req", "usd_1m_out", "usd_1m_total") if k != vkey)),
                 T.prices_table(s, prices, cells), T.price_terms_table(s, prices, cells), T.cost_table(cells, prices)],
                has_charts=True,
                notes=prices.notes, collapsed=True),
        Section("break-even", "Break-even over daily volume", "Cheapest fleet (replicas of one configuration) for "
                "each daily request volume, per profile: at most five bands, then the monthly cost at round volumes.",
                [T.break_even_table(s, prices), *T.volume_tables(s, prices)], has_charts=True, collapsed=True),
        Section("latency", "Latency", None, mt(section="latency"), has_charts=True, collapsed=True),
        Section("server", "KV cache, prefix cache and queueing", None, mt(section="server"), has_charts=True,
                collapsed=True),
    ]
    charts = study_charts(s, cells, prices, decisions)
    if result.soaks:
        sections.append(Section("soak", "Long run (soak)", "A simulated production run per configuration, sized "
                                "by capacity planning, in windows.", soak_tables(result.soaks), has_charts=True,
                                collapsed=True))
        spec = from_series_spec({**(soak_chart(result.soaks) or {}), "section": "soak"}, config_colors(s))
        if spec:
            charts.append(spec)
    sections += [
        Section("cells", "Every cell", "All figures per cell and per load step.",
                [T.throughput_table(cells), T.latency_table(cells), T.server_table(cells), T.cost_table(cells, prices),
                 T.steps_table(cells)], collapsed=True),
        Section("evidence", "Evidence for the findings", None, [T.findings_evidence_table(result.findings)],
                collapsed=True),
        Section("methodology", "Methodology", None, [T.methodology_table(s, cells, __version__, result.wall_s),
                                                     T.kv_table(s, result.targets), T.workloads_table(s, cells)],
                collapsed=True),
        Section("definitions", "Metric definitions", None, [definitions_table()], collapsed=True),
    ]
    has = {c["section"] for c in charts}
    sections = [replace(x, has_charts=x.has_charts and x.key in has) for x in sections]
    return ReportContent(s.describe_title(), result.generated_at.strftime("%Y-%m-%d %H:%M UTC"), __version__,
                         _headline(result), sections, charts)


def study_json(result: Any) -> dict[str, Any]:
    p = result.prices
    return {
        "schema_version": 1, "tool": "infermeter", "kind": "study", "version": __version__,
        "partial": bool(result.pending), "pending": list(result.pending),
        "generated_at": result.generated_at.isoformat(), "wall_s": result.wall_s,
        "study": result.study.model_dump(mode="json"), "targets": result.targets,
        "cells": [c.to_json() for c in result.cells],
        "prices": {k: (v if isinstance(v, str) else v.to_json()) for k, v in p.prices.items()},
        "costs": [{"config": cc.cell.config, "profile": cc.cell.profile, "basis": cc.basis,
                   "comparable": cc.comparable, "note": cc.reason,
                   "cost": cc.result.to_json() if cc.result else None,
                   "at_saturation": cc.at_saturation.to_json() if cc.at_saturation else None}
                  for cc in p.cost.values()],
        "best_value": {prof: {"best": pk.best.cell.config, "value": pk.best_value,
                              "runner_up": pk.runner_up.cell.config if pk.runner_up else None,
                              "runner_up_value": pk.runner_up_value, "margin": pk.margin, "margin_pct": pk.margin_pct,
                              "metric": result.study.pricing.value_metric}
                       for prof, pk in p.picks.items()},
        "break_even": {prof: be.to_json() for prof, be in p.break_even.items()},
        "decisions": {prof: d.to_json() for prof, d in result.decisions.items()},
        "claims": [c.to_json() for c in result.claims],
        "findings": [f.to_json() for f in result.findings],
        "soak": [x.to_json() for x in result.soaks],
        "notes": p.notes,
    }


def cell_rows(result: Any) -> list[dict[str, Any]]:
    rows = []
    for c in result.cells:
        cc = result.prices.cost[c.key]
        row: dict[str, Any] = {"configuration": c.config, "hardware": c.hardware, "profile": c.profile,
                               "source": c.source, "model": c.model, "unavailable": c.unavailable}
        row.update({f"saturation_{k}": c.saturation.get(k) for k in ("requests_per_s", "input_tokens_per_s",
                                                                     "output_tokens_per_s", "concurrency")})
        row.update({f"capacity_{k}": (c.capacity or {}).get(k) for k in ("requests_per_s", "input_tokens_per_s",
                                                                         "output_tokens_per_s", "offered_rate")})
        for at, lat in c.latency.items():
            row.update({f"{at}_{m}_{p}": lat[m].get(p) for m in lat for p in ("p50", "p95", "p99")})
        row.update(c.server)
        row["error_rate_all"] = c.errors.get("error_rate_all")
        res = cc.result
        row.update({"cost_basis": cc.basis, "usd_per_hour": res.usd_per_hour if res else None,
                    "usd_per_1k_output_tokens": res.usd_per_1k_output_tokens if res else None,
                    "usd_per_1m_output_tokens": res.usd_per_1m_output_tokens if res else None,
                    "usd_per_1m_total_tokens": res.usd_per_1m_total_tokens if res else None,
                    "usd_per_1m_requests": res.usd_per_1m_requests if res else None,
                    "price_date": res.price.date_text if res else None, "price_note": cc.reason})
        rows.append(row)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k) for k in keys} for r in rows]


def write_study_report(result: Any) -> dict[str, Path]:
    out = Path(result.out_dir)
    content = study_content(result)
    files = {"html": out / "report.html", "markdown": out / "report.md", "json": out / "study.json",
             "csv": out / "cells.csv"}
    texts = {"html": render_html(content), "markdown": render_markdown(content),
             "json": json.dumps(study_json(result), indent=2, default=str), "csv": render_csv(cell_rows(result))}
    for key, text in texts.items():  # each file replaced whole: a study killed mid-write keeps the last good one
        tmp = files[key].with_name(files[key].name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(files[key])
    return files
