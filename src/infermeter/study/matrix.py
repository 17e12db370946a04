"""The study's configuration x profile tables: one metric each, every value labelled measured or simulated.

The contract: :data:`METRICS` declares each matrix metric once — its table key, title, where
its value comes from and how it is shown — and both the report tables (:func:`matrix_table`) and
the findings (:func:`ref`) read values through it, so a number quoted in a finding is the very
cell shown in the table::

    >>> METRIC["sat_out"].title
    'Output tokens/s at saturation'
    >>> configs = [c.label for c in study.configurations]
    >>> t = matrix_table(METRIC["sat_out"], configs, list(study.profiles), cells, prices)
    >>> t.rows[0][0].display, t.rows[0][1].display   # row h200, column chat: 4,187 tok/s, simulated: 3 s.f.
    ('h200', '4,190 (sim.)')

Rows are configurations (study order), columns profiles; ``(sim.)`` / ``(meas.)`` after a value says
whether it was simulated by the twin or measured on an endpoint; simulated values have 3 significant
figures. ★ (``best=True``) marks the best value per profile among comparable cells (those serving
the study's model), only in tables of figures the decision uses (SLO capacity, the value metric).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infermeter.report.table import MISSING, Cell, Table, fmt_num, fmt_pct, fmt_usd, mark_best
from infermeter.study.cells import CellResult
from infermeter.study.pricing import CellCost, StudyPrices

TAG = {"simulated": "sim.", "measured": "meas.", "emulated": "emul."}
SIG = 3  # significant figures of simulated (and emulated) values


def fmt_sig(v: float | None, digits: int = SIG) -> str:
    """``v`` to ``digits`` significant figures, thousands separated: 4414.2 -> '4,410', 0.04371 -> '0.0437'."""
    if v is None or not math.isfinite(v):
        return MISSING
    if v == 0:
        return "0"
    r = float(f"{v:.{digits}g}")
    if abs(r) >= 10 ** (digits - 1):
        return f"{r:,.0f}"
    return f"{r:.{digits}g}" if abs(r) >= 1e-4 else f"{r:.{digits}g}"


def fmt_sig_usd(v: float | None) -> str:
    return MISSING if v is None else "$" + fmt_sig(v)


def fmt_sig_pct(v: float | None) -> str:
    return MISSING if v is None else fmt_sig(v * 100) + "%"


Fmt = Callable[[float | None], str]
SIG_FMT: dict[Fmt, Fmt] = {fmt_num: fmt_sig, fmt_usd: fmt_sig_usd, fmt_pct: fmt_sig_pct}


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    section: str
    higher_is_better: bool
    value: Callable[[CellResult, CellCost | None], float | None]
    fmt: Fmt
    needs_slo: bool = False
    decision: bool = False  # the decision uses it: ★ marks its best value


def _lat(at: str, metric: str, stat: str) -> Callable[[CellResult, CellCost | None], float | None]:
    return lambda c, _cc: ((c.latency.get(at) or {}).get(metric) or {}).get(stat)


def _sat(what: str) -> Callable[[CellResult, CellCost | None], float | None]:
    return lambda c, _cc: c.saturation.get(what)


def _cap(what: str) -> Callable[[CellResult, CellCost | None], float | None]:
    return lambda c, _cc: (c.capacity or {}).get(what)


def _srv(what: str) -> Callable[[CellResult, CellCost | None], float | None]:
    return lambda c, _cc: c.server.get(what)


def _cost(attr: str) -> Callable[[CellResult, CellCost | None], float | None]:
    return lambda c, cc: None if cc is None or cc.result is None else getattr(cc.result, attr)


def _int(v: float | None) -> str:
    return MISSING if v is None else f"{v:,.0f}"


_ms = fmt_num  # latencies (ms): the usual format, 3 significant figures when simulated


METRICS: list[Metric] = [
    Metric("sat_out", "Output tokens/s at saturation", "matrix", True, _sat("output_tokens_per_s"), fmt_num),
    Metric("sat_rps", "Requests/s at saturation", "matrix", True, _sat("requests_per_s"), fmt_num),
    Metric("cap_rps", "Requests/s at the highest load meeting the SLO", "matrix", True, _cap("requests_per_s"),
           fmt_num, needs_slo=True, decision=True),
    Metric("cap_out", "Output tokens/s at the highest load meeting the SLO", "matrix", True,
           _cap("output_tokens_per_s"), fmt_num, needs_slo=True),
    Metric("usd_1m_req", "$ per 1M requests (at the cost basis)", "matrix", False, _cost("usd_per_1m_requests"),
           fmt_usd),
    Metric("usd_1m_out", "$ per 1M output tokens (at the cost basis)", "matrix", False,
           _cost("usd_per_1m_output_tokens"), fmt_usd),
    Metric("usd_1m_total", "$ per 1M total tokens (at the cost basis)", "matrix", False,
           _cost("usd_per_1m_total_tokens"), fmt_usd),
    Metric("err", "Error rate (all steps)", "matrix", False, lambda c, _cc: c.errors.get("error_rate_all"), fmt_pct),
    Metric("unl_ttft_p50", "TTFT p50 one request at a time (ms)", "latency", False, _lat("unloaded", "ttft_ms", "p50"), _ms),
    Metric("unl_tpot_p50", "TPOT p50 one request at a time (ms)", "latency", False, _lat("unloaded", "tpot_ms", "p50"), _ms),
    Metric("unl_e2e_p99", "E2E p99 one request at a time (ms)", "latency", False, _lat("unloaded", "e2e_ms", "p99"), _ms),
    Metric("cap_ttft_p95", "TTFT p95 at the highest load meeting the SLO (ms)", "latency", False,
           _lat("capacity", "ttft_ms", "p95"), _ms, needs_slo=True),
    Metric("cap_tpot_p95", "TPOT p95 at the highest load meeting the SLO (ms)", "latency", False,
           _lat("capacity", "tpot_ms", "p95"), _ms, needs_slo=True),
    Metric("sat_ttft_p95", "TTFT p95 at saturation (ms)", "latency", False, _lat("saturation", "ttft_ms", "p95"), _ms),
    Metric("sat_tpot_p95", "TPOT p95 at saturation (ms)", "latency", False, _lat("saturation", "tpot_ms", "p95"), _ms),
    Metric("sat_e2e_p99", "E2E p99 at saturation (ms)", "latency", False, _lat("saturation", "e2e_ms", "p99"), _ms),
    Metric("kv_max", "KV-cache usage, max at saturation", "server", False, _srv("kv_cache_usage_max"), fmt_pct),
    Metric("kv_mean", "KV-cache usage, mean at saturation", "server", False, _srv("kv_cache_usage_mean"), fmt_pct),
    Metric("prefix", "Prefix-cache hit rate at saturation", "server", True, _srv("prefix_cache_hit_rate"), fmt_pct),
    Metric("waiting_max", "Waiting requests, max at saturation", "server", False, _srv("num_requests_waiting_max"), _int),
    Metric("running_max", "Running requests, max at saturation", "server", True, _srv("num_requests_running_max"), _int),
    Metric("preempt", "Preemptions at saturation", "server", False, _srv("num_preemptions"), _int),
]
METRIC = {m.key: m for m in METRICS}
VALUE_METRIC = {"usd_per_1m_requests": "usd_1m_req", "usd_per_1m_output_tokens": "usd_1m_out",
                "usd_per_1m_total_tokens": "usd_1m_total"}


def table_key(metric: str) -> str:
    return f"m_{metric}"


def shown_value(metric: Metric, cell: CellResult, v: float | None) -> str:
    """A value as the report prints it: 3 significant figures unless measured (then the usual format)."""
    fmt = metric.fmt if cell.source == "measured" else SIG_FMT.get(metric.fmt, metric.fmt)
    return fmt(v)


def display(metric: Metric, cell: CellResult, cc: CellCost | None) -> tuple[float | None, str]:
    """The value and the text shown for ``cell`` in ``metric``'s table."""
    if cell.unavailable:
        return None, cell.unavailable.split(":", 1)[0]
    v = metric.value(cell, cc)
    text = shown_value(metric, cell, v)
    if v is None:
        return None, text
    return v, f"{text} ({TAG.get(cell.source, cell.source)})"


@dataclass(frozen=True)
class Ref:
    """A figure a finding quotes: table key, row (configuration), column (profile), value and its text."""

    table: str
    row: str
    column: str
    value: Any
    display: str

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "row": self.row, "column": self.column, "value": self.value,
                "display": self.display}


def ref(metric: str, cell: CellResult, prices: StudyPrices) -> Ref:
    m = METRIC[metric]
    v, text = display(m, cell, prices.cost.get(cell.key))
    return Ref(table_key(metric), cell.config, cell.profile, v, text)


def value(metric: str, cell: CellResult, prices: StudyPrices) -> float | None:
    return METRIC[metric].value(cell, prices.cost.get(cell.key))


def matrix_table(metric: Metric, configs: list[str], profiles: list[str], cells: list[CellResult],
                 prices: StudyPrices, star: bool | None = None) -> Table:
    """One metric as a configuration x profile table (see the module docstring); ★ on the best value when the
    decision uses the metric (``star``, default ``metric.decision``: SLO capacity; the report adds the value
    metric)."""
    star = metric.decision if star is None else star
    by_key = {c.key: c for c in cells}
    grid: list[list[Cell]] = []
    eligible: list[list[bool]] = []
    for name in configs:
        row, ok = [Cell.text(name)], [False]
        for prof in profiles:
            c = by_key.get((name, prof))
            if c is None:
                row.append(Cell.text(None))
                ok.append(False)
                continue
            cc = prices.cost.get(c.key)
            v, text = display(metric, c, cc)
            row.append(Cell(text, v, flag="simulated" if c.source == "simulated" else None))
            ok.append(bool(cc and cc.comparable))
        grid.append(row)
        eligible.append(ok)
    if star:
        for j in range(1, len(profiles) + 1):
            mark_best(grid, j, metric.higher_is_better, [e[j] for e in eligible])
    note = ("(sim.) = simulated by the twin (3 significant figures), (meas.) = measured on an endpoint, (emul.) = an "
            "emulated endpoint" + ("; ★ = best among configurations serving the study's model (a figure the decision "
                                   "uses)." if star else "."))
    return Table(table_key(metric.key), metric.title, ["configuration", *profiles], grid, note=note,
                 section=metric.section)
