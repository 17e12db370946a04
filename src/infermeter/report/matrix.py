"""The configuration × profile matrix: one small table per metric, best value per profile marked.

The contract: :func:`matrix_tables` places each run in the cell of its
configuration (``model @ hardware``, or just the hardware when every run
serves the same model) and its workload profile, and makes one table per
metric in :data:`MATRIX_METRICS` with configurations as rows and profiles as
columns. In each profile column the best value among *valid* runs is marked
(``best=True``; ★ in Markdown, highlighted in HTML)::

    >>> [t.title for t in matrix_tables(runs, costs)]
    ['Output tokens/s', 'TTFT p95 (ms)', 'TPOT p95 (ms)', 'Error rate', '$ per 1M output tokens']

Which run fills a cell: a sweep contributes its valid step with the highest
output tokens/s (all steps when none is valid); when several runs share a
cell, the most recently started one is shown and the table says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infermeter.report.pricing import RunCost
from infermeter.report.rundir import RunDir
from infermeter.report.table import Cell, Table, mark_best

NO_PROFILE = "(no profile)"


@dataclass(frozen=True)
class MatrixMetric:
    key: str
    title: str
    higher_is_better: bool
    value: Callable[[RunDir, RunCost | None], float | None]
    cell: Callable[[float | None], Cell]
    steady: bool = False  # a latency percentile: a saturated run's describes no steady state, so it is never best


def _p95(key: str) -> Callable[[RunDir, RunCost | None], float | None]:
    return lambda r, c: r.summary.distribution(key).p95


MATRIX_METRICS = [
    MatrixMetric("throughput", "Output tokens/s", True, lambda r, c: r.summary.output_token_throughput, Cell.num),
    MatrixMetric("ttft_p95", "TTFT p95 (ms)", False, _p95("ttft_ms"), Cell.num, steady=True),
    MatrixMetric("tpot_p95", "TPOT p95 (ms)", False, _p95("tpot_ms"), Cell.num, steady=True),
    MatrixMetric("error_rate", "Error rate", False, lambda r, c: r.summary.error_rate, Cell.pct),
    MatrixMetric("usd_per_1m", "$ per 1M output tokens", False, lambda r, c: c.usd_per_1m_output if c else None, Cell.usd),
]


def representative(run: RunDir) -> RunDir:
    """The run itself, or for a sweep its best valid step (see the module docstring)."""
    if not run.steps:
        return run
    valid = [s for s in run.steps if s.summary.valid] or list(run.steps)
    return max(valid, key=lambda s: s.summary.output_token_throughput or 0.0)


def _config_name(r: RunDir, one_model: bool) -> str:
    return (r.hardware or "unknown hardware") if one_model else r.configuration


def matrix_cells(runs: list[RunDir]) -> tuple[dict[tuple[str, str], RunDir], list[str], list[str], int]:
    """(configuration, profile) -> run, row names, column names, and how many runs were shadowed."""
    reps = [representative(r) for r in runs]
    one_model = len({r.model for r in reps}) <= 1
    cells: dict[tuple[str, str], RunDir] = {}
    shadowed = 0
    for r in reps:
        key = (_config_name(r, one_model), r.profile or NO_PROFILE)
        old = cells.get(key)
        if old is not None:
            shadowed += 1
            if (old.started_at or "") > (r.started_at or ""):
                continue
        cells[key] = r
    rows = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells})
    return cells, rows, cols, shadowed


def matrix_tables(runs: list[RunDir], costs: list[RunCost]) -> list[Table]:
    """One table per metric; empty when the runs span a single configuration and a single profile."""
    cells, row_names, col_names, shadowed = matrix_cells(runs)
    if len(row_names) < 2 and len(col_names) < 2:
        return []
    cost_of: dict[int, RunCost] = {id(c.run): c for c in costs}
    note = ("★ marks the best valid value in each profile column (ties as printed: all of them; none when all print "
            "the same; a saturated run's latency percentiles never); invalid runs are marked "
            "(invalid) and never best; (sim.) marks simulated runs, (emul.) runs against infermeter's emulator.")
    if shadowed:
        note += f" {shadowed} run(s) shared a cell with a later run and are not shown here."
    tables: list[Table] = []
    for m in MATRIX_METRICS:
        grid: list[list[Cell]] = []
        valid: list[list[bool]] = []
        for name in row_names:
            row = [Cell.text(name)]
            ok_row = [False]
            for prof in col_names:
                r = cells.get((name, prof))
                if r is None:
                    row.append(Cell.text(None))
                    ok_row.append(False)
                    continue
                is_valid = r.summary.valid
                c = m.cell(m.value(r, cost_of.get(id(r))))
                simulated = r.source != "measured"
                tag = {"emulated": " (emul.)", "measured": ""}.get(r.source, " (sim.)")
                suffix = (" (invalid)" if not is_valid else "") + tag
                flag = "invalid" if not is_valid else ("simulated" if simulated else None)
                row.append(Cell(c.display + suffix, c.value, flag=flag))
                ok_row.append(is_valid and not (m.steady and bool(r.summary.saturated)))
            grid.append(row)
            valid.append(ok_row)
        for j in range(1, len(col_names) + 1):
            mark_best(grid, j, m.higher_is_better, [v[j] for v in valid])
        tables.append(Table(f"matrix_{m.key}", m.title, ["configuration", *col_names], grid,
                            note=None if tables else note, section="matrix"))
    return tables

