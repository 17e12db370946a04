"""Print how often the stated 80% prediction intervals hold, in and out of sample (issue 29).

    PYTHONPATH=src python benchmarks/interval_coverage.py [tests/data/published-measurements.csv]

Three checks, each by interval basis (calibrated / pooled / unseen):
- in sample: shipped calibration and shipped table around the in-sample prediction;
- leave-one-publication-out (nested): fit and error table both without the row's publication;
- leave-one-combination-out (the emulated "publication never seen"): fit without every row of the
  row's (hardware family, engine, precision class), table without those rows and its publication.
Takes a few minutes (one fit per publication and per combination).
"""

from __future__ import annotations

import sys
from collections import defaultdict

from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.uncertainty import loco_coverage, loco_records, nested_coverage, records_of
from infermeter.perfmodel.validate import validate


def _line(name: str, oks: list[tuple[str, bool]]) -> str:
    by: dict[str, list[bool]] = defaultdict(list)
    for basis, ok in oks:
        by[basis].append(ok)
    parts = ", ".join(f"{b} {sum(v)}/{len(v)}" for b, v in sorted(by.items()))
    total = sum(ok for _, ok in oks)
    return f"{name}: {total}/{len(oks)} = {total / len(oks):.1%} inside ({parts})"


def main(path: str) -> None:
    rows = load_rows(path)
    report = validate(rows, holdout="source")
    loco = loco_records(rows)
    recs = {r.row.id: g for g, _, _, r in records_of(report)}
    _, _, checks = nested_coverage(report, loco)
    print(_line("leave-one-publication-out, nested", [(recs[r.row.id].calibration, ok) for r, _, _, ok in checks]))
    _, _, lchecks = loco_coverage(report, loco)
    print(_line("leave-one-combination-out", [(rec[0].calibration, ok) for rec, _, _, ok in lchecks]))
    errs = sorted(abs(rec[4] / rec[3].value - 1) for rec in loco)
    print(f"leave-one-combination-out |error|: median {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/published-measurements.csv")
