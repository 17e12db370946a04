"""How the shipped model did on published measurements no fit has seen (the blind set), by model class.

Promise: :func:`summarize` turns ``plan --validate FILE --holdout none --json`` rows (``error``,
``inside``, ``interval_basis``) and each row's model into per-class figures (``moe``: models with more
than one expert; ``dense``): rows, median and max |error|, how many fell inside their stated 80 %
interval, and the same for the class's rows whose interval was the ``unseen`` band (``unseen``).
``data/blind-scores.yaml`` holds those figures for :data:`BLIND_FILE`, regenerated with
:func:`main` and checked against a fresh scoring by the tests, so what ``plan`` prints about unseen
plans is computed from that set, never a sentence written by hand. After a refit, regenerate it from
the repository's root with ``python -m infermeter.perfmodel.blindscore``.

The protocol (docs/performance-model.md, "blind sets"): a blind set is collected by someone who sees
no prediction, from publications in no other file; it is scored once by the model of the day and the
figures are kept; only then may its rows join the corpus, and the next set takes its place here::

    >>> rows = [{"error": 0.5, "inside": False, "interval_basis": "unseen"}, {"error": -0.1, "inside": True}]
    >>> summarize(rows, [True, False])["moe"]
    {'rows': 1, 'median_abs_error': 0.5, 'max_abs_error': 0.5, 'inside': 0, 'unseen': {'rows': 1, 'median_abs_error': 0.5, 'max_abs_error': 0.5, 'inside': 0}}
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from infermeter.perfmodel.hardware import DATA_DIR

SCORES = DATA_DIR / "blind-scores.yaml"
BLIND_FILE = "tests/data/published-measurements-blind15.csv"  # the set now in use, relative to the repository's root


def _error_figures(errs: Sequence[float]) -> dict[str, Any]:
    """Rows, median and max of absolute errors ``errs`` (4 decimals; None without rows)."""
    return {"rows": len(errs),
            "median_abs_error": round(statistics.median(errs), 4) if errs else None,
            "max_abs_error": round(max(errs), 4) if errs else None}


def _figures(sel: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {**_error_figures([abs(float(r["error"])) for r in sel]), "inside": sum(1 for r in sel if r.get("inside"))}


def summarize(rows: Sequence[dict[str, Any]], moe: Sequence[bool]) -> dict[str, dict[str, Any]]:
    """Per class (``moe``, ``dense``): rows, median and max |error| (4 decimals), rows inside their interval,
    and under ``unseen`` the same for the class's rows whose interval basis was the ``unseen`` band."""
    out: dict[str, dict[str, Any]] = {}
    for name, want in (("moe", True), ("dense", False)):
        sel = [r for r, m in zip(rows, moe) if m is want]
        out[name] = {**_figures(sel), "unseen": _figures([r for r in sel if _basis(r) == "unseen"])}
    return out


def _basis(row: dict[str, Any]) -> str:
    b = row.get("interval_basis")
    return str(b.get("basis", "")) if isinstance(b, dict) else str(b or "")


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


def in_spread(ids: Iterable[str]) -> bool:
    """Whether any of the row ``ids`` is in the blind history the intervals' fresh-publication spread is fitted on
    (``perfmodel.freshpub``): then how many of those rows fell inside their brackets is no longer a blind figure."""
    from infermeter.perfmodel import freshpub

    return not {r.id for r in freshpub.load()}.isdisjoint(ids)


def blind_time(ids: Iterable[str]) -> dict[str, Any] | None:
    """How the model of the day did on the rows ``ids`` when they were scored blind, from their records in the blind
    history (``perfmodel.freshpub``): ``{scored_at: [commits], scores: {class: {rows, median_abs_error,
    max_abs_error}}}`` (|error| = |predicted / published - 1|, as ``plan --validate`` has it), or None when the history
    holds none of them. The shipped model may since have changed for what the set showed; these figures have not."""
    from infermeter.perfmodel import freshpub

    wanted = set(ids)
    recs = [r for r in freshpub.load() if r.id in wanted]
    if not recs:
        return None
    scores = {cls: _error_figures([abs(r.predicted / r.measured - 1) for r in recs if r.model_class == cls])
              for cls in ("moe", "dense")}
    return {"scored_at": sorted({r.scored_at for r in recs}), "scores": scores}


def write(path: Path, source: str, command: str, scores: dict[str, dict[str, Any]], spread_saw_it: bool = False,
          blind: dict[str, Any] | None = None) -> None:
    """Write the figures with where they come from (``source``: the blind file; ``command``: how to rescore;
    ``spread_saw_it``: :func:`in_spread`; ``blind``: :func:`blind_time`)."""
    text = ("# How the shipped model did on published rows no fit has seen (perfmodel/blindscore.py).\n"
            "# Regenerated from the blind file with the command below; tests/perfmodel/test_blindscore.py\n"
            "# rescores it and fails when these figures are stale.\n")
    Path(path).write_text(text + yaml.safe_dump({"source": source, "command": command, "spread_saw_it": spread_saw_it,
                                                 "scores": scores, "blind_time": blind}, sort_keys=False))


def main() -> None:
    """Rescore the blind file with the installed ``infermeter`` and rewrite :data:`SCORES` (run from the repository)."""
    import json
    import subprocess
    import sys

    source = BLIND_FILE
    args = ["plan", "--validate", source, "--holdout", "none", "--json"]
    script = Path(sys.executable).with_name("infermeter")
    out = subprocess.run([str(script), *args], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)["rows"]
    ids = [r["id"] for r in rows]
    write(SCORES, source, "infermeter " + " ".join(args), summarize(rows, moe_flags(rows, source)), in_spread(ids),
          blind_time(ids))


if __name__ == "__main__":
    main()
