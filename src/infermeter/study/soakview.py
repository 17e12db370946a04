"""The soak section of the study report: fleet summary, windows per configuration, alerts, and the charts.

The contract: tables show the figures of :class:`~infermeter.study.soak.SoakResult` as computed
(nothing is recomputed here); a window row is named by :func:`~infermeter.study.soak.window_label`
and a configuration's window table by :func:`~infermeter.study.soak.windows_key`, the names the
soak finding points at. Every soak figure is simulated, and says so::

    >>> [t.key for t in soak_tables(soaks)]
    ['soak_fleets', 'soak_h100_sxm', 'soak_alerts']
    >>> soak_chart(soaks)["views"][0]["name"]
    'requests/s'
"""

from __future__ import annotations

from typing import Any

from infermeter.report.figures import num as _r
from infermeter.report.table import Cell, Table
from infermeter.study.soak import SoakResult, window_label, windows_key

SIM = "simulated"


def _p(block: dict[str, Any] | None, stat: str) -> float | None:
    return (block or {}).get(stat)


def fleets_table(soaks: list[SoakResult]) -> Table:
    rows = []
    for s in soaks:
        b, m = s.budget, s.summary
        rows.append([Cell.text(s.config), Cell.text(s.hardware), Cell.num(s.replicas), Cell.text(s.replicas_basis),
                     Cell.text(s.router),
                     Cell.text(SIM, flag=SIM), Cell.num(b["requests"]), Cell.num(m.get("request_throughput"), flag=SIM),
                     Cell.num(m.get("output_token_throughput"), flag=SIM), Cell.num(_p(m.get("ttft_ms"), "p99"), flag=SIM),
                     Cell.num(_p(m.get("e2e_ms"), "p99"), flag=SIM), Cell.num(b["failed"], flag=SIM),
                     Cell.num(b["slo_misses"], flag=SIM), Cell.pct(b["consumed"], SIM),
                     Cell.text(f"{b['exhausted_at_s'] / 3600:.3g} h" if b["exhausted_at_s"] is not None else "no"),
                     Cell.num(len(s.alerts))])
    cols = ["configuration", "fleet", "replicas", "why", "router", "source", "requests", "req/s", "out tok/s",
            "TTFT p99 (ms)",
            "E2E p99 (ms)", "failed", "SLO misses", "error budget used", "budget exhausted at", "alerts"]
    return Table("soak_fleets", "Soak: one simulated production run per configuration", cols, rows, section="soak")


def windows_table(s: SoakResult) -> Table:
    rows = []
    for w in s.windows:
        errs = ", ".join(f"{k}: {n}" for k, n in w["errors"].items()) or "none"
        rows.append([Cell.text(window_label(w)), Cell.num(w["sent"]), Cell.num(w["request_throughput"], flag=SIM),
                     Cell.num(w["output_token_throughput"], flag=SIM), Cell.num(_p(w["ttft_ms"], "p50"), flag=SIM),
                     Cell.num(_p(w["ttft_ms"], "p95"), flag=SIM),
                     Cell.num(_p(w["ttft_ms"], "p99"), flag=SIM), Cell.num(_p(w["tpot_ms"], "p99"), flag=SIM),
                     Cell.num(_p(w["e2e_ms"], "p99"), flag=SIM), Cell.text(errs), Cell.num(w["slo_misses"]),
                     Cell.num(w["burn_rate"])])
    cols = ["window", "sent", "req/s", "out tok/s", "TTFT p50 (ms)", "TTFT p95 (ms)", "TTFT p99 (ms)", "TPOT p99 (ms)",
            "E2E p99 (ms)",
            "errors by class", "SLO misses", "burn rate"]
    return Table(windows_key(s.config), f"Soak windows: {s.config} ({s.hardware}, simulated)", cols, rows,
                 section="soak", note="Requests belong to the window they were sent in; burn rate = share of bad "
                                      "requests / (1 - objective); a percentile resting on too few requests "
                                      "(p95 20, p99 100) shows as –.")


def alerts_table(soaks: list[SoakResult]) -> Table:
    rows = [[Cell.text(s.config), Cell.text(a["alert"]), Cell.text(a["scope"]), Cell.num(a["value"]),
             Cell.text(a["message"])] for s in soaks for a in s.alerts]
    return Table("soak_alerts", "Soak alerts", ["configuration", "rule", "scope", "worst value", "message"], rows,
                 section="soak", note="Consecutive windows where a rule fires are one entry." if rows else
                 "No alert fired.")


def soak_tables(soaks: list[SoakResult]) -> list[Table]:
    return [fleets_table(soaks), *[windows_table(s) for s in soaks], alerts_table(soaks)]


def soak_chart(soaks: list[SoakResult]) -> dict[str, Any] | None:
    if not soaks:
        return None
    views: dict[str, list[dict[str, Any]]] = {"requests/s": [], "output tokens/s": [], "TTFT p99 (ms)": [],
                                              "E2E p99 (ms)": [], "errors": []}
    classes = sorted({k for s in soaks for w in s.windows for k in w["errors"]})
    for s in soaks:
        mid = [(w["start_s"] + w["end_s"]) / 2 / 3600 for w in s.windows]

        def series(ys: list[Any], name: str = s.config) -> dict[str, Any]:
            return {"name": name, "points": [[_r(x), _r(y)] for x, y in zip(mid, ys)], "dashed": True, "markers": True}

        views["requests/s"].append(series([w["request_throughput"] for w in s.windows]))
        views["output tokens/s"].append(series([w["output_token_throughput"] for w in s.windows]))
        views["TTFT p99 (ms)"].append(series([_p(w["ttft_ms"], "p99") for w in s.windows]))
        views["E2E p99 (ms)"].append(series([_p(w["e2e_ms"], "p99") for w in s.windows]))
        for cls in classes or ["none"]:
            views["errors"].append(series([w["errors"].get(cls, 0) for w in s.windows], f"{s.config}: {cls}"))
    return {"id": "soak", "title": "Soak over time (simulated)", "section": "soak",
            "note": "One point per window (hours from the start); every series is simulated (dashed).",
            "views": [{"name": name, "type": "line", "x": {"label": "hours", "log": False},
                       "y": {"label": name, "log": False}, "series": ser} for name, ser in views.items()]}
