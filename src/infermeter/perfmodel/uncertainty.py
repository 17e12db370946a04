"""Prediction intervals for predicted figures, from the model's out-of-sample errors.

Promises: :func:`regime_of` classifies a predicted figure of a deployment into a :class:`Regime`
(metric group, what bounds it, how it is calibrated); :func:`interval` returns an 80% interval
``(low, high, basis)`` for a predicted value in a regime, from a table of log errors
``log(measured / predicted)`` that :func:`table_from_report` derives from leave-one-publication-out
validation. The shipped table is the ``uncertainty:`` block of ``data/calibration.yaml``
(``python -m infermeter.perfmodel.uncertainty`` prints it)::

    >>> from infermeter.perfmodel import build_deployment
    >>> d = build_deployment("llama-3.1-8b", "h100-sxm")
    >>> reg = regime_of(d, "tpot_ms", 1000, 200, 1)
    >>> lo, hi, basis = interval("tpot_ms", 7.0, reg)
    >>> lo < 7.0 < hi and "80%" in basis
    True

Regimes: the metric group (``ttft``: TTFT and prompt rates; ``tpot``: TPOT and per-user decode
rates; ``throughput``), the bound (``prefill`` or ``decode``: TTFT is prefill-bound, TPOT
decode-bound, a throughput by which part of a request's time dominates) and the calibration
(``deployment``: a per-deployment calibration file; ``calibrated``: fitted entries for this
family, engine and TP degree; ``pooled``: fitted on the family or memory class, another TP
degree, or other engines; ``literature``: priors only, e.g. a hardware family no measurement
covers). For a figure that uses both efficiencies the weaker calibration counts.

Interval: the regime's cell of ``n`` out-of-sample log errors with mean ``m`` and standard
deviation ``s``, both shrunk towards the next coarser cell of at least 8 rows with weight 4 (small
cells borrow from it), gives the 80% interval ``m +- t(0.9, df) s sqrt(1 + 1/n)`` of
``log(measured/predicted)`` (a Student-t predictive interval, ``df = n - 1`` plus 4 when shrunk).
The cells are (group, bound, calibration), then (group, any bound, calibration), then
(calibration), then all rows; one with fewer than 3 rows is skipped. Reciprocal metrics (tokens/s
of one user, prompt tokens/s) flip the interval of their group.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment

COVERAGE = 0.8
MIN_CELL = 3  # a cell with fewer rows is skipped
MIN_N = 8  # a cell with fewer rows borrows mean and spread from the next coarser cell that has this many
SHRINK = 4.0
# metric -> (group, orientation): orientation -1 for rates that are the reciprocal of the group's latency
METRIC_GROUPS: dict[str, tuple[str, int]] = {
    "ttft_ms": ("ttft", 1), "prefill_tokens_per_s": ("ttft", -1),
    "tpot_ms": ("tpot", 1), "decode_tokens_per_s": ("tpot", -1), "per_user_output_tokens_per_s": ("tpot", -1),
    "output_tokens_per_s": ("throughput", 1), "saturation_output_tokens_per_s": ("throughput", 1),
}
CALIBRATIONS = ("literature", "pooled", "calibrated", "deployment")  # weakest first
_T90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372, 12: 1.356,
        15: 1.341, 20: 1.325, 25: 1.316, 30: 1.310, 40: 1.303, 60: 1.296, 120: 1.289}


def t90(df: int) -> float:
    """One-sided 0.90 quantile of Student's t with ``df`` degrees of freedom (table, normal beyond 120)."""
    if df >= 120:
        return 1.2816
    return _T90[max(k for k in _T90 if k <= max(df, 1))]


@dataclass(frozen=True, slots=True)
class Regime:
    group: str  # ttft | tpot | throughput
    bound: str  # prefill | decode
    calibration: str  # deployment | calibrated | pooled | literature

    @property
    def label(self) -> str:
        return f"{self.group}/{self.bound}/{self.calibration}"


def _status(d: Deployment, which: int) -> str:
    e = d.calibration_entries[which] if len(d.calibration_entries) > which else None
    if e is None or not e.fitted:
        return "deployment" if e is not None and e.origin else "literature"
    if e.origin:
        return "deployment"
    eng = d.engine_defaults.name if d.engine_defaults else d.engine
    return "calibrated" if (e.family == d.hw.family and e.engine == eng and e.tp == d.config.tp) else "pooled"


def _throughput_bound(d: Deployment, input_tokens: int, output_tokens: int, batch: int) -> str:
    """``prefill`` when a request's prompt costs more step time than its share of the decode steps."""
    from infermeter.perfmodel.serving import engine_of

    n = max(1, math.ceil(batch / max(d.config.replicas * d.pipeline_depth, 1)))
    ctx = input_tokens + output_tokens / 2
    t_prefill = d.prefill_time(input_tokens, engine_of(d).max_batched_tokens)
    t_decode = output_tokens * d.step_time(n, int(n * ctx), n) / n
    return "prefill" if t_prefill > t_decode else "decode"


def regime_of(d: Deployment, metric: str, input_tokens: int, output_tokens: int, batch: int) -> Regime:
    """The regime of ``metric`` predicted for ``d`` at ``input_tokens``/``output_tokens`` with ``batch`` sequences in flight."""
    if metric not in METRIC_GROUPS:
        raise ConfigError(f"no prediction interval for metric {metric!r}; known: {', '.join(METRIC_GROUPS)}")
    group = METRIC_GROUPS[metric][0]
    if group == "ttft":
        return Regime(group, "prefill", _status(d, 0))
    if group == "tpot":
        return Regime(group, "decode", _status(d, 1))
    weakest = min((_status(d, 0), _status(d, 1)), key=CALIBRATIONS.index)
    return Regime(group, _throughput_bound(d, input_tokens, output_tokens, batch), weakest)


@dataclass(frozen=True, slots=True)
class Cell:
    key: tuple[str, str, str]  # (group, bound, calibration); "*" = any
    n: int
    mean: float  # of log(measured/predicted) in the group's orientation
    sd: float


@dataclass(frozen=True, slots=True)
class IntervalTable:
    cells: tuple[Cell, ...]
    source: str = ""
    rows: int = 0
    publications: int = 0

    def _get(self, key: tuple[str, str, str]) -> Cell | None:
        return next((c for c in self.cells if c.key == key), None)

    def chain(self, regime: Regime) -> list[Cell]:
        """The cells from ``regime``'s own to all rows (missing levels skipped)."""
        keys = [(regime.group, regime.bound, regime.calibration), (regime.group, "*", regime.calibration),
                ("*", "*", regime.calibration), ("*", "*", "*")]
        return [c for k in keys if (c := self._get(k)) is not None]

    def multipliers(self, regime: Regime) -> tuple[float, float, str]:
        """(low, high) bounds of measured/predicted in the group's orientation, and the cell used."""
        chain = self.chain(regime)
        if regime.calibration == "deployment" and not any(c.key[2] == "deployment" for c in chain):
            chain = self.chain(Regime(regime.group, regime.bound, "calibrated"))  # no residuals given: as calibrated rows
        usable = [c for c in chain if c.n >= MIN_CELL]
        if not usable:
            raise ConfigError("the uncertainty table has no cells")
        cell = usable[0]
        parent = next((c for c in usable[1:] if c.n >= MIN_N), None)
        mean, var, df = cell.mean, cell.sd ** 2, cell.n - 1
        if parent is not None:
            mean = (cell.n * cell.mean + SHRINK * parent.mean) / (cell.n + SHRINK)
            var = (cell.n * cell.sd ** 2 + SHRINK * parent.sd ** 2) / (cell.n + SHRINK)
            df = cell.n - 1 + int(SHRINK)
        h = t90(df) * math.sqrt(var) * math.sqrt(1 + 1 / max(cell.n, 1))
        return math.exp(mean - h), math.exp(mean + h), "/".join(cell.key) + f" (n={cell.n})"

    @classmethod
    def from_records(cls, records: list[tuple[Regime, float]], *, source: str = "", publications: int = 0) -> IntervalTable:
        """Cells at every level from (regime, log error in the group's orientation) records."""
        groups: dict[tuple[str, str, str], list[float]] = {}
        for reg, e in records:
            for key in dict.fromkeys(((reg.group, reg.bound, reg.calibration), (reg.group, "*", reg.calibration),
                                      ("*", "*", reg.calibration), ("*", "*", "*"))):
                groups.setdefault(key, []).append(e)
        cells = tuple(Cell(key=k, n=len(v), mean=statistics.fmean(v), sd=statistics.stdev(v) if len(v) > 1 else abs(v[0]))
                      for k, v in sorted(groups.items()))
        return cls(cells=cells, source=source, rows=len(records), publications=publications)

    @classmethod
    def from_yaml(cls, data: dict[str, Any], origin: str) -> IntervalTable:
        try:
            cells = tuple(Cell(key=(str(c["group"]), str(c["bound"]), str(c["calibration"])), n=int(c["n"]),
                               mean=float(c["log_bias"]), sd=float(c["log_sd"])) for c in data["cells"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: uncertainty: bad cell ({exc}); each needs group, bound, calibration, n, log_bias, log_sd") from None
        return cls(cells=cells, source=str(data.get("source", "")), rows=int(data.get("rows", 0)), publications=int(data.get("publications", 0)))

    def to_yaml(self, coverage_check: tuple[float, int] | None = None) -> str:
        lines = ["uncertainty:", f"  coverage: {COVERAGE}", f"  rows: {self.rows}", f"  publications: {self.publications}",
                 f"  source: \"{self.source}\""]
        if coverage_check:
            lines.append(f"  nested_coverage: {{inside: {coverage_check[0]:.3f}, rows: {coverage_check[1]}}}")
        lines.append("  cells:")
        for c in self.cells:
            lines.append(f"    - {{group: \"{c.key[0]}\", bound: \"{c.key[1]}\", calibration: \"{c.key[2]}\", n: {c.n}, "
                         f"log_bias: {c.mean:.4f}, log_sd: {c.sd:.4f}}}")
        return "\n".join(lines) + "\n"


def table_of(cal: Any = None) -> IntervalTable:  # noqa: ANN401 - a Calibration
    """The interval table of a calibration (the shipped one by default), with its residuals as ``deployment`` cells."""
    from infermeter.perfmodel.calibration import load_calibration

    cal = cal or load_calibration()
    if not cal.uncertainty:
        raise ConfigError("the calibration has no uncertainty: block (python -m infermeter.perfmodel.uncertainty prints one)")
    table = IntervalTable.from_yaml(cal.uncertainty, cal.origin or "calibration.yaml")
    if cal.residuals:
        extra = IntervalTable.from_records([(Regime(METRIC_GROUPS[m][0] if m in METRIC_GROUPS else m, "*", "deployment"),
                                             METRIC_GROUPS.get(m, (m, 1))[1] * e) for m, es in cal.residuals.items() for e in es])
        table = IntervalTable(cells=tuple(c for c in extra.cells if c.key[2] == "deployment" and c.key[1] == "*") + table.cells,
                              source=table.source, rows=table.rows, publications=table.publications)
    return table


def interval(metric: str, value: float, regime: Regime, table: IntervalTable | None = None) -> tuple[float, float, str]:
    """The 80% interval of a predicted ``value`` of ``metric`` in ``regime``: (low, high, basis)."""
    if metric not in METRIC_GROUPS:
        raise ConfigError(f"no prediction interval for metric {metric!r}; known: {', '.join(METRIC_GROUPS)}")
    table = table or table_of()
    m_lo, m_hi, used = table.multipliers(regime)
    if METRIC_GROUPS[metric][1] < 0:
        m_lo, m_hi = 1 / m_hi, 1 / m_lo
    basis = (f"{COVERAGE:.0%} interval from out-of-sample (leave-one-publication-out) errors, regime {regime.label}, "
             f"cell {used}")
    return value * m_lo, value * m_hi, basis


def records_of(report: Any) -> list[tuple[Regime, float, str, Any]]:  # noqa: ANN401 - a validate.Report
    """(regime under the row's leave-one-publication-out fit, log error in the group's orientation, publication, row)."""
    from infermeter.perfmodel.corpus import publication
    from infermeter.perfmodel.serving import saturation
    from infermeter.perfmodel.validate import deployment_for

    out = []
    for r in report.results:
        if r.predicted_lopo is None:
            continue
        row = r.row
        pub = publication(row)
        d = deployment_for(row, report.refits[pub])
        batch = saturation(d, row.input_tokens, row.output_tokens)[1] if row.scenario == "saturated" else (row.concurrency or 1)
        reg = regime_of(d, row.metric, row.input_tokens, row.output_tokens, batch)
        out.append((reg, METRIC_GROUPS[row.metric][1] * math.log(row.value / r.predicted_lopo), pub, r))
    return out


def table_from_report(report: Any, source: str = "") -> IntervalTable:  # noqa: ANN401
    recs = records_of(report)
    return IntervalTable.from_records([(g, e) for g, e, _, _ in recs], source=source, publications=len({p for _, _, p, _ in recs}))


def nested_coverage(report: Any) -> tuple[float, int, list[tuple[Any, float, float, bool]]]:  # noqa: ANN401
    """Share of rows inside the interval built without their own publication (errors and fit both out of sample)."""
    recs = records_of(report)
    checks = []
    for reg, e, pub, r in recs:
        table = IntervalTable.from_records([(g, x) for g, x, p, _ in recs if p != pub])
        lo, hi, _ = interval(r.row.metric, r.predicted_lopo, reg, table)
        checks.append((r, lo, hi, lo <= r.row.value <= hi))
    inside = sum(c[3] for c in checks)
    return inside / len(checks), len(checks), checks


def main(argv: list[str]) -> int:
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.validate import validate

    path = argv[0] if argv else "tests/data/published-measurements.csv"
    report = validate(load_rows(path), holdout="source")
    frac, n, _ = nested_coverage(report)
    table = table_from_report(report, source=f"leave-one-publication-out errors of {path}; python -m infermeter.perfmodel.uncertainty {path}")
    sys.stdout.write(table.to_yaml((frac, n)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
