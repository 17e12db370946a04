"""Fit the calibration table to measurements, with partial pooling.

Promises: :func:`fit` returns a :class:`Calibration` whose fitted values minimise
``sum(log(pred/measured)^2) + lambda * sum(log(value/prior)^2)`` by coordinate descent (a
golden-section search per value, in log space), in two stages:

1. pooled: one efficiency per (family, dtype class, phase) over all engines and TP degrees,
   plus each engine's per-request overhead; priors are the literature entries; lambda 0.1;
2. specific: one efficiency per (family, engine, dtype, phase, tp), shrunk towards the pooled
   value of stage 1 (its prior); lambda 0.3.

Efficiencies stay within [0.05, 0.95] (an MBU above ~0.9 of datasheet bandwidth is not
achievable, research notes section 10), request overheads within [0.05, 50] ms. Only keys the
rows exercise are fitted; every entry names the rows it was fitted on. A key without rows falls
back (see calibration.py) to the pooled entry, then the prior::

    python -m infermeter.perfmodel.fit tests/data/published-measurements.csv

prints the ``fitted:`` and ``fitted_engines:`` blocks of ``data/calibration.yaml``.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import replace

from infermeter.perfmodel.calibration import Calibration, Entry, dtype_class, load_calibration
from infermeter.perfmodel.validate import Row, deployment_for, log_error

LAMBDA_POOLED, LAMBDA_SPECIFIC = 0.1, 0.3
_GOLD = (math.sqrt(5) - 1) / 2
_EFF_BOUNDS = (math.log(0.05), math.log(0.95))
_REQ_BOUNDS = (math.log(0.05), math.log(50.0))

_REQ_TAG = "; request overhead "
Param = tuple  # ("eff", family, engine, dtype, phase, tp) | ("req", engine)


def priors_only(cal: Calibration) -> Calibration:
    """The same table with every fitted value removed (engines back to their prior overheads)."""
    engines = tuple(replace(e, request_overhead_ms=e.request_overhead_prior_ms, request_overhead_prior_ms=None,
                            source=e.source.split(_REQ_TAG)[0])
                    if e.request_overhead_prior_ms is not None else e for e in cal.engines)
    return cal.with_entries(tuple(e for e in cal.entries if e.prior is None), engines)


def _apply(base: Calibration, values: dict[Param, float], priors: dict[Param, float], used: dict[Param, list[str]]) -> Calibration:
    entries = list(base.entries)
    engines = {e.name: e for e in base.engines}
    for p, v in values.items():
        src = f"fit: rows {', '.join(used[p])}"
        if p[0] == "req":
            e = engines[p[1]]
            engines[p[1]] = replace(e, request_overhead_ms=v, request_overhead_prior_ms=priors[p],
                                    source=e.source.split(_REQ_TAG)[0] + _REQ_TAG + src)
        else:
            entries.append(Entry(family=p[1], engine=p[2], dtype=p[3], phase=p[4], tp=p[5], value=v, prior=priors[p], source=src))
    return base.with_entries(tuple(entries), tuple(engines.values()))


def _stage(rows: list[Row], base: Calibration, params_of, lam: float, sweeps: int = 4, tol: float = 0.01) -> Calibration:  # noqa: ANN001
    used: dict[Param, list[str]] = defaultdict(list)
    rows_of: dict[Param, list[Row]] = defaultdict(list)
    for row in rows:
        for p in params_of(row):
            used[p].append(row.id)
            rows_of[p].append(row)
    priors: dict[Param, float] = {}
    for p in used:
        if p[0] == "req":
            priors[p] = base.engine(p[1]).request_overhead_ms
        else:
            priors[p] = base.efficiency(p[1], p[2] if p[2] != "*" else "?", p[3], p[4], p[5] if p[5] != "*" else 1)[0]
    values = dict(priors)

    def objective(p: Param, logv: float) -> float:
        values[p] = math.exp(logv)
        cal = _apply(base, values, priors, used)
        return sum(log_error(r, cal) ** 2 for r in rows_of[p]) + lam * (logv - math.log(priors[p])) ** 2

    for _ in range(sweeps):
        moved = 0.0
        for p in used:
            old = math.log(values[p])
            a, b = _REQ_BOUNDS if p[0] == "req" else _EFF_BOUNDS
            c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
            fc, fd = objective(p, c), objective(p, d)
            while b - a > tol:
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - _GOLD * (b - a)
                    fc = objective(p, c)
                else:
                    a, c, fc = c, d, fd
                    d = a + _GOLD * (b - a)
                    fd = objective(p, d)
            values[p] = math.exp((a + b) / 2)
            moved = max(moved, abs(math.log(values[p]) - old))
        if moved < tol:
            break
    return _apply(base, {p: round(v, 3) for p, v in values.items()}, priors, used)


def fit(rows: list[Row], base: Calibration | None = None) -> Calibration:
    """Stage 1 (pooled + engine request overheads), then stage 2 (specific keys)."""
    base = priors_only(base or load_calibration())
    info = {}
    for row in rows:
        d = deployment_for(row, base)
        info[row.id] = (d.hw.family, d.dtype)

    def pooled(row: Row) -> list[Param]:
        fam, dt = info[row.id]
        return [("req", row.engine)] + [("eff", fam, "*", dtype_class(dt), ph, "*") for ph in ("prefill", "decode")]

    def specific(row: Row) -> list[Param]:
        fam, dt = info[row.id]
        return [("eff", fam, row.engine, dt, ph, row.tp) for ph in ("prefill", "decode")]

    stage1 = _stage(rows, base, pooled, LAMBDA_POOLED)
    return _stage(rows, stage1, specific, LAMBDA_SPECIFIC)


def to_yaml(cal: Calibration) -> str:
    lines = ["fitted:"]
    for e in cal.entries:
        if e.prior is not None:
            lines.append(f"  - {{family: {e.family}, engine: \"{e.engine}\", dtype: {e.dtype}, phase: {e.phase}, tp: \"{e.tp}\", "
                         f"value: {e.value:.3f}, prior: {e.prior:.3f}, source: \"{e.source}\"}}")
    lines.append("fitted_engines:")
    for e in cal.engines:
        if e.request_overhead_prior_ms is not None:
            lines.append(f"  {e.name}: {{request_overhead_ms: {e.request_overhead_ms:.3f}, prior: {e.request_overhead_prior_ms:.3f}, "
                         f"source: \"{e.source.split(_REQ_TAG)[-1]}\"}}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    from infermeter.perfmodel.validate import load_rows

    path = argv[0] if argv else "tests/data/published-measurements.csv"
    sys.stdout.write(to_yaml(fit(load_rows(path))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
