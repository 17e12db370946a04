"""How the shipped model did on published measurements no fit has seen (the blind set), by model class.

Promise: :func:`summarize` turns ``plan --validate FILE --holdout none --json`` rows (``error``,
``inside``) and each row's model into per-class figures (``moe``: models with more than one expert;
``dense``): rows, median |error| and how many fell inside their stated 80 % interval.
``data/blind-scores.yaml`` holds those figures for ``tests/data/published-measurements-blind2.csv``
(61 rows from 9 publications, never fitted), regenerated with :func:`write` and checked against a
fresh scoring by the tests, so what ``plan`` prints about unseen MoE plans is computed from that
set, never a sentence written by hand. After a refit, regenerate it from the repository's root with
``python -m infermeter.perfmodel.blindscore``::

    >>> summarize([{"error": 0.5, "inside": False}, {"error": -0.1, "inside": True}], [True, False])["moe"]
    {'rows': 1, 'median_abs_error': 0.5, 'max_abs_error': 0.5, 'inside': 0}
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from infermeter.perfmodel.hardware import DATA_DIR

SCORES = DATA_DIR / "blind-scores.yaml"


def summarize(rows: Sequence[dict[str, Any]], moe: Sequence[bool]) -> dict[str, dict[str, Any]]:
    """Per class (``moe``, ``dense``): rows, median and max |error| (4 decimals), rows inside their interval."""
    out: dict[str, dict[str, Any]] = {}
    for name, want in (("moe", True), ("dense", False)):
        sel = [r for r, m in zip(rows, moe) if m is want]
        errs = [abs(float(r["error"])) for r in sel]
        out[name] = {"rows": len(sel),
                     "median_abs_error": round(statistics.median(errs), 4) if errs else None,
                     "max_abs_error": round(max(errs), 4) if errs else None,
                     "inside": sum(1 for r in sel if r.get("inside"))}
    return out


def moe_flags(rows: Sequence[dict[str, Any]], csv_path: Path | str) -> list[bool]:
    """For each validated row (its ``id``), whether the model the CSV names for it has more than one expert."""
    import csv

    from infermeter.perfmodel.models import get_model

    with open(csv_path, newline="") as fh:
        models = {r["id"]: r["model"] for r in csv.DictReader(fh)}
    return [get_model(models[r["id"]]).experts > 1 for r in rows]


def load() -> dict[str, Any] | None:
    """The shipped blind-set figures (None when the file is absent or unreadable)."""
    try:
        data = yaml.safe_load(Path(SCORES).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def write(path: Path, source: str, command: str, scores: dict[str, dict[str, Any]]) -> None:
    """Write the figures with where they come from (``source``: the blind file; ``command``: how to rescore)."""
    text = ("# How the shipped model did on published rows no fit has seen (perfmodel/blindscore.py).\n"
            "# Regenerated from the blind file with the command below; tests/perfmodel/test_blindscore.py\n"
            "# rescores it and fails when these figures are stale.\n")
    Path(path).write_text(text + yaml.safe_dump({"source": source, "command": command, "scores": scores},
                                                sort_keys=False))


def main() -> None:
    """Rescore the blind file with the installed ``infermeter`` and rewrite :data:`SCORES` (run from the repository)."""
    import json
    import subprocess
    import sys

    source = "tests/data/published-measurements-blind2.csv"
    args = ["plan", "--validate", source, "--holdout", "none", "--json"]
    script = Path(sys.executable).with_name("infermeter")
    out = subprocess.run([str(script), *args], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)["rows"]
    write(SCORES, source, "infermeter " + " ".join(args), summarize(rows, moe_flags(rows, source)))


if __name__ == "__main__":
    main()
