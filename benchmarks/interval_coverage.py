"""Print how often the stated 80% prediction intervals hold out of sample, by model class and basis (issue 29).

    PYTHONPATH=src python benchmarks/interval_coverage.py [tests/data/published-measurements.csv]

Two checks, each by model class (dense / moe, MLA included) and interval basis (calibrated / pooled / unseen):
- leave-one-publication-out (nested): fit and error table both without the row's publication;
- leave-one-combination-out (the emulated "publication never seen"): fit without every row of the
  row's (hardware family, engine, precision class), table without those rows and its publication.
Takes a few minutes (one fit per publication and per combination).
"""

from __future__ import annotations

import sys

from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.uncertainty import Check, coverage_by, loco_coverage, loco_records, nested_coverage
from infermeter.perfmodel.validate import validate


def _line(name: str, checks: list[Check]) -> str:
    split = coverage_by(checks)
    total = sum(c[3] for c in checks)
    parts = "; ".join(f"{k} {round(v['inside'] * v['rows'])}/{v['rows']} = {v['inside']:.1%}" for k, v in split["by_class_basis"].items())
    classes = ", ".join(f"{k} {v['inside']:.1%} of {v['rows']}" for k, v in split["by_class"].items())
    return f"{name}: {total}/{len(checks)} = {total / len(checks):.1%} inside ({classes})\n    {parts}"


def main(path: str) -> None:
    rows = load_rows(path)
    report = validate(rows, holdout="source")
    loco = loco_records(rows)
    print(_line("leave-one-publication-out, nested", nested_coverage(report, loco)[2]))
    print(_line("leave-one-combination-out", loco_coverage(report, loco)[2]))
    errs = sorted(abs(rec[4] / rec[3].value - 1) for rec in loco)
    print(f"leave-one-combination-out |error|: median {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/published-measurements.csv")
