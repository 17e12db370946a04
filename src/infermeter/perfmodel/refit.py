"""Refit the shipped performance model from the corpus: one command for every derived data file.

Promise: ``python -m infermeter.perfmodel.refit [CSV]`` (run from the repository's root, the
corpus ``tests/data/published-measurements.csv`` by default) rewrites, in order and each in a
fresh process so that every step loads what the previous one wrote:

1. the ``fitted:`` and ``fitted_engines:`` blocks of ``data/calibration.yaml``
   (``python -m infermeter.perfmodel.fit``), the hand-written parts of the file kept byte for byte;
2. its ``uncertainty:`` block (what ``python -m infermeter.perfmodel.uncertainty`` prints: leave-one-publication-out
   and leave-one-combination-out, the slow step) and
3. ``data/paired-errors.yaml`` (what ``python -m infermeter.perfmodel.paired`` prints), both from one
   leave-one-publication-out pass (``python -m infermeter.perfmodel.refit --derived CSV``, a JSON object on stdout:
   the two modules' commands would each run that pass, which takes most of a quarter of an hour);
4. ``data/blind-scores.yaml`` (``python -m infermeter.perfmodel.blindscore``).

Tests compare each of these against a fresh derivation, so a refit that skips one fails them. The
golden twin summaries (``tests/twin``) are not rewritten here: their test says how. :func:`splice`
is the text surgery, on its own so it can be tested::

    >>> splice("a: 1\\nfitted:\\n  - old\\n\\n# c\\nuncertainty:\\n  x\\n", "fitted:\\n  - new\\n", "fitted:", "# c")
    'a: 1\\nfitted:\\n  - new\\n\\n# c\\nuncertainty:\\n  x\\n'
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from infermeter.errors import DataError
from infermeter.perfmodel.hardware import DATA_DIR

CALIBRATION = DATA_DIR / "calibration.yaml"
PAIRED = DATA_DIR / "paired-errors.yaml"
UNCERTAINTY_COMMENT = "# Prediction intervals"


def splice(text: str, block: str, start: str, end: str | None) -> str:
    """``text`` with the lines from the one that starts with ``start`` up to (not including) the one
    that starts with ``end`` (or to the end of the text) replaced by ``block`` plus one blank line."""
    lines = text.splitlines(keepends=True)
    try:
        i = next(n for n, ln in enumerate(lines) if ln.startswith(start))
    except StopIteration:
        raise DataError(f"{CALIBRATION}: no line starts with {start!r}") from None
    j = len(lines)
    if end is not None:
        try:
            j = next(n for n, ln in enumerate(lines) if n > i and ln.startswith(end))
        except StopIteration:
            raise DataError(f"{CALIBRATION}: no line starts with {end!r} after {start!r}") from None
    body = block if block.endswith("\n") else block + "\n"
    return "".join(lines[:i]) + body + ("\n" if end is not None else "") + "".join(lines[j:])


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, check=True).stdout


def derived(csv: str) -> dict[str, Any]:
    """``{"uncertainty": block, "paired": file text, "summary": figures}`` from one leave-one-publication-out pass over
    ``csv``: the same texts ``python -m infermeter.perfmodel.uncertainty CSV`` and ``python -m
    infermeter.perfmodel.paired CSV`` print, and the pass's median |error| in sample and out of it, overall and by model
    class and engine (what ``plan --validate CSV --holdout source`` would report, without a second pass)."""
    from infermeter.perfmodel import paired, uncertainty
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.validate import validate

    rows = load_rows(csv)
    report = validate(rows, holdout="source")
    return {"uncertainty": uncertainty.block(rows, report, csv), "paired": paired.text(report, csv),
            "summary": summary(report)}


def summary(report: Any) -> dict[str, Any]:
    """Median |error| of a leave-one-publication-out report: ``in`` sample and ``lopo``, overall, ``dense``, ``moe``
    and per engine (4 decimals), with each group's rows."""
    from infermeter.perfmodel.models import get_model

    groups: dict[str, list[Any]] = {"all": list(report.results)}
    for r in report.results:
        groups.setdefault("moe" if get_model(r.row.model).is_moe else "dense", []).append(r)
        groups.setdefault(f"engine:{r.row.engine}", []).append(r)
    return {name: {"rows": len(rs), "in": round(statistics.median(abs(r.error) for r in rs), 4),
                   "lopo": round(statistics.median(abs(r.error_lopo) for r in rs), 4)}
            for name, rs in sorted(groups.items())}


def main(argv: list[str]) -> int:
    derive = argv[:1] == ["--derived"]
    args = argv[1:] if derive else argv
    csv = args[0] if args else "tests/data/published-measurements.csv"
    if not Path(csv).is_file():
        raise DataError(f"{csv}: no such corpus file (run from the repository's root)")
    if derive:
        sys.stdout.write(json.dumps(derived(csv)))
        return 0
    fitted = _run("infermeter.perfmodel.fit", csv)
    CALIBRATION.write_text(splice(CALIBRATION.read_text(), fitted, "fitted:", UNCERTAINTY_COMMENT))
    sys.stderr.write(f"refit: fitted blocks -> {CALIBRATION}\n")
    out = json.loads(_run("infermeter.perfmodel.refit", "--derived", csv))
    for name, fig in out["summary"].items():
        sys.stderr.write(f"refit: {name}: {fig['rows']} rows, median |error| in sample {fig['in']:.2%}, "
                         f"leave-one-publication-out {fig['lopo']:.2%}\n")
    CALIBRATION.write_text(splice(CALIBRATION.read_text(), out["uncertainty"], "uncertainty:", None))
    sys.stderr.write(f"refit: uncertainty block -> {CALIBRATION}\n")
    PAIRED.write_text(out["paired"])
    sys.stderr.write(f"refit: {PAIRED}\n")
    _run("infermeter.perfmodel.blindscore")
    sys.stderr.write("refit: blind scores rewritten\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
