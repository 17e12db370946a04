"""The report's tables, built once from run summaries and costs.

The contract: each builder takes leaf runs (single runs and sweep steps) and
returns a :class:`~infermeter.report.table.Table` whose cells hold the
``summary.json`` values themselves (percentiles in ms, rates per second,
error rate as a fraction shown in %), so a test can read a value back from
``report.md`` and find it in ``summary.json``::

    >>> [t.title for t in run_tables(leaves)]
    ['Runs', 'Throughput', 'Latency: TTFT (ms)', ..., 'Validity', 'Server metrics']

Invalid runs carry ``flag="invalid"`` on their name cell; simulated runs
``flag="simulated"`` on their source cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infermeter.analysis import catalog
from infermeter.analysis.results import PERCENTILE_LABELS, Summary
from infermeter.report.definitions import DEFINITIONS
from infermeter.report.pricing import RunCost
from infermeter.report.rundir import RunDir
from infermeter.report.table import Cell, Table

# rows and columns come from the metric catalog (analysis/catalog.py): a metric it lists for the
# "report" view appears here without a change to this file
LATENCY_METRICS = [(m.key, m.label) for m in catalog.metrics("report", block=None) if m.distribution]
LATENCY_STATS = [(k, PERCENTILE_LABELS.get(k, k)) for k in catalog.SUMMARY_STATS]
SERVER_KEYS = [(m.key, m.label, "pct" if m.unit == "fraction" else "num")
               for m in catalog.metrics("report", block="server_metrics")]
THROUGHPUT = [m for m in catalog.metrics("report", block=None) if not m.distribution and m.unit != "fraction"]
RATES = [m for m in catalog.metrics("report", block=None) if not m.distribution and m.unit == "fraction"]


def run_cell(r: RunDir) -> Cell:
    return Cell.text(r.label, flag=None if r.summary.valid else "invalid")


def source_cell(r: RunDir) -> Cell:
    text = f"emulated ({r.emulated_text})" if r.source == "emulated" else r.source
    return Cell.text(text, flag="simulated" if r.source != "measured" else None)


def verdict_text(s: Summary) -> str:
    if s.valid:
        return "valid"
    reasons = s.invalid_reasons
    return "INVALID" + (": " + "; ".join(str(x) for x in reasons) if reasons else "")


def offered_load(s: Summary) -> float | None:
    """Target rate of an open-loop run (req/s); None for a closed loop, which offers no rate of its own (its
    clients send as fast as the server answers)."""
    return None if s.target_rate is None else float(s.target_rate)


def load_x(s: Summary) -> float | None:
    """Where a run sits on a load axis (req/s): its offered rate when open-loop, else the rate it achieved
    (completed requests/s; a closed loop's send rate can be any number, e.g. every request sent at its start)."""
    v = offered_load(s)
    return v if v is not None else s.request_throughput


def runs_table(leaves: list[RunDir]) -> Table:
    rows = []
    for r in leaves:
        s = r.summary
        rows.append([
            run_cell(r), source_cell(r), Cell.text(r.model), Cell.text(r.hardware), Cell.text(r.profile),
            Cell.text(s.load), Cell.num(s.completed), Cell.num(s.failed),
            Cell.num(s.dropped), Cell.num(s.duration_s),
            Cell.text(verdict_text(s), flag=None if s.valid else "invalid"),
        ])
    cols = ["run", "source", "model", "hardware", "profile", "load", "completed", "failed", "dropped",
            "duration (s)", "verdict"]
    return Table("runs", "Runs", cols, rows)


def throughput_table(leaves: list[RunDir]) -> Table:
    rows = []
    for r in leaves:
        s = r.summary
        rows.append([run_cell(r)] + [Cell.num(m.ref().raw(s)) for m in THROUGHPUT]
                    + [Cell.pct(m.ref().raw(s)) for m in RATES])
    return Table("throughput", "Throughput", ["run"] + [m.label for m in THROUGHPUT + RATES], rows,
                 note="Goodput is empty for runs without an SLO.")


def latency_tables(leaves: list[RunDir]) -> list[Table]:
    out = []
    for key, name in LATENCY_METRICS:
        rows = []
        for r in leaves:
            d = r.summary.distribution(key)  # a figure the run did not have (ttfo_ms...) is empty
            if not d.count:
                continue
            rows.append([run_cell(r)] + [Cell.num(d[k]) for k, _ in LATENCY_STATS])
        if rows:
            out.append(Table(f"latency_{key}", f"Latency: {name} (ms)", ["run"] + [c for _, c in LATENCY_STATS], rows))
    return out


def validity_table(leaves: list[RunDir]) -> Table:
    rows = []
    for r in leaves:
        s = r.summary
        lag = s.schedule_lag_ms.p99
        notes = [str(x) for x in s.warnings] + [str(a.get("message") or a) for a in s.alerts]
        tokens = s.token_count_source
        if s.usage_mismatches:
            tokens = f"{tokens} ({s.usage_mismatches} usage mismatches)"
        if s.usage_implausible:
            tokens = f"{tokens} ({s.usage_implausible} implausible usage set aside)"
        rows.append([
            run_cell(r), Cell.text(verdict_text(s), flag=None if s.valid else "invalid"),
            Cell.num(lag), Cell.text(tokens), Cell.text("; ".join(notes)),
        ])
    return Table("validity", "Validity", ["run", "verdict", "schedule lag p99 (ms)", "token counts", "warnings and alerts"],
                 rows, note="An invalid run's numbers describe what happened, not what the server can do.")


def server_table(leaves: list[RunDir]) -> Table | None:
    rows = []
    for r in leaves:
        sm = r.summary.server_metrics
        if sm is None or all(sm.get(k) is None for k, _, _ in SERVER_KEYS):
            continue  # no server metrics, or none the server exposed
        cells = [Cell.pct(sm.get(k)) if kind == "pct" else Cell.num(sm.get(k)) for k, _, kind in SERVER_KEYS]
        rows.append([run_cell(r)] + cells)
    if not rows:
        return None
    return Table("server", "Server metrics", ["run"] + [c for _, c, _ in SERVER_KEYS], rows,
                 note="– means the server did not expose the signal (never zero).")


def gpu_table(leaves: list[RunDir]) -> Table | None:
    blocks: list[tuple[RunDir, dict[str, Any]]] = [(r, r.summary.gpu) for r in leaves if r.summary.gpu is not None]
    keys: list[str] = []
    for _, g in blocks:
        keys.extend(k for k, v in g.items() if k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool))
    if not blocks or not keys:
        return None
    rows = [[run_cell(r)] + [Cell.num(g.get(k)) for k in keys] for r, g in blocks]
    return Table("gpu", "GPU telemetry", ["run"] + [k.replace("_", " ") for k in keys], rows)


BANDED = [(r.metric.key, r.title if r.stat else r.metric.label) for r in catalog.banded()]


def interval_table(leaves: list[RunDir]) -> Table | None:
    """Simulated runs' predicted figures with their 80% prediction intervals (summary ``prediction_intervals``)."""
    rows = []
    for r in leaves:
        pi = r.summary.prediction_intervals or {}
        if not pi:
            continue
        row = [run_cell(r)]
        basis = ""
        for key, _ in BANDED:
            iv = pi.get(key) or {}
            row += [Cell.num(iv.get("value")), Cell.num(iv.get("lo")), Cell.num(iv.get("hi"))]
            basis = basis or str(iv.get("basis") or "")
        rows.append([*row, Cell.text(basis)])
    if not rows:
        return None
    cols = ["run"] + [f"{name} {part}" for _, name in BANDED for part in ("", "low", "high")] + ["basis"]
    cols = [c.replace("  ", " ").strip() for c in cols]
    return Table("intervals", "Predicted figures: 80% prediction intervals", cols, rows,
                 note="simulated: the band is where 80% of measurements fell around the model's prediction "
                      "out of sample (docs/performance-model.md); a saturated run's TTFT has none")


def run_tables(leaves: list[RunDir]) -> list[Table]:
    tables = [runs_table(leaves), throughput_table(leaves), *latency_tables(leaves), validity_table(leaves)]
    tables.extend(t for t in (interval_table(leaves), server_table(leaves), gpu_table(leaves)) if t is not None)
    return tables


def sweep_table(sweep: RunDir) -> Table:
    meets = {}
    for entry in sweep.summary.get("steps") or []:  # a plan's own section (load/steps.plan_summary)
        if isinstance(entry, dict) and entry.get("step_dir"):
            meets[Path(str(entry["step_dir"])).name] = entry.get("meets_slo")
    rows = []
    for st in sweep.steps:
        s = st.summary
        m = meets.get(st.name)
        rows.append([
            Cell.text(st.name), Cell.num(offered_load(s)), Cell.num(s.achieved_rate),
            Cell.num(s.request_throughput), Cell.num(s.output_token_throughput),
            Cell.num(s.ttft_ms.p95), Cell.num(s.tpot_ms.p95),
            Cell.num(s.e2e_ms.p95), Cell.pct(s.error_rate),
            Cell.text("–" if m is None else ("yes" if m else "no"), flag=None if m is not False else "invalid"),
            Cell.text(verdict_text(s), flag=None if s.valid else "invalid"),
        ])
    cols = ["step", "offered load (req/s)", "achieved (req/s)", "req/s", "output tok/s", "TTFT p95 (ms)",
            "TPOT p95 (ms)", "E2E p95 (ms)", "error rate", "meets SLO", "verdict"]
    note = None
    cap = sweep.summary.get("capacity")
    if isinstance(cap, dict) and cap.get("dimension"):
        dim = str(cap["dimension"])
        value = cap.get(dim)
        slo = ", ".join(f"{k} ≤ {v:g}" for k, v in (sweep.summary.slo or {}).items()) or "the SLO"
        if value is None:
            note = f"Capacity: no step met {slo} ({cap.get('note', '')})."
        else:
            unit = "req/s" if dim == "rate" else "concurrent requests"
            br = cap.get("bracket") or [value, None]
            note = (f"Capacity under {slo}: {value:g} {unit} (step {cap.get('step')}); the SLO broke at "
                    f"{br[1]:g} {unit}." if br[1] is not None else f"Capacity under {slo}: at least {value:g} {unit} "
                    f"(step {cap.get('step')}); {cap.get('note', '')}.")
    return Table(f"sweep_{sweep.label}", f"Sweep: {sweep.label}", cols, rows, note=note, section="sweeps")


def cost_table(costs: list[RunCost]) -> Table:
    rows = []
    for c in costs:
        s = c.run.summary
        rows.append([
            run_cell(c.run), Cell.text(c.run.hardware), source_cell(c.run), Cell.num(s.output_token_throughput),
            Cell.usd(c.usd_per_hour), Cell.usd(c.usd_per_1m_output), Cell.usd(c.usd_per_1m_total),
            Cell.text(c.reason or (f"{c.result.price.provider} {c.result.price.instance}" if c.result else None)),
        ])
    cols = ["run", "configuration", "source", "output tok/s", "$/hour", "$/1M output tokens", "$/1M total tokens", "price"]
    return Table("cost", "Cost per 1M tokens", cols, rows, section="cost")


def prices_table(costs: list[RunCost]) -> Table:
    seen: dict[str, Any] = {}
    for c in costs:
        if c.result is not None:
            seen.setdefault(c.result.price.config, c.result.price)
    rows = [[
        Cell.text(p.config), Cell.usd(p.usd_per_hour), Cell.usd(p.usd_per_gpu_hour), Cell.text(p.provider),
        Cell.text(p.instance), Cell.text(p.billing), Cell.text(p.source), Cell.text(p.date_text),
        Cell.text("; ".join(p.notes)),
    ] for p in seen.values()]
    cols = ["configuration", "$/hour", "$/GPU-hour", "provider", "instance", "billing", "source", "date", "notes"]
    return Table("prices", "Prices used", cols, rows, section="cost",
                 note=None if rows else "No run could be priced (see the reasons in the cost table).")


def definitions_table() -> Table:
    return Table("definitions", "Metric definitions", ["term", "definition"],
                 [[Cell.text(t), Cell.text(d)] for t, d in DEFINITIONS], section="definitions")
