"""``infermeter study`` as a function: run every cell, price them, soak, and write the study report.

The contract: :func:`run_study` runs the cells configuration by configuration (an engine to
launch is started once for all its profiles), then prices them, runs the optional soak and
writes, under ``out_dir``::

    study.yaml     the resolved study that ran
    study.json     every figure of the report (cells, costs, picks, break-even, findings, soak)
    report.html    self-contained page (tables, charts, findings, methodology)
    report.md      the same tables and findings
    cells.csv      one row per cell
    cells/<configuration>/<profile>/   sweep folders (readable by `infermeter report` and `cost`)
    soak/<configuration>/              soak runs

    result = run_study(load_study_text(text, "study.yaml"), Path("out"), progress=print)
    result.files["html"], [f.text for f in result.findings]

``resume=True`` keeps finished cells whose inputs (model, configuration, load, SLO, workload,
seed) are unchanged and reruns the others; without it ``out_dir`` must not hold a study yet.
Time is passed in (``today``, ``now``) so reports are reproducible in tests.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.study.cells import CellResult, fingerprint, load_cell, run_cell, unavailable_cell
from infermeter.study.config import StudyConfig, dump_study
from infermeter.study.findings import Finding, write_findings
from infermeter.study.pricing import StudyPrices, price_study
from infermeter.study.soak import SoakResult, run_soaks
from infermeter.study.sweep import StepOutcome
from infermeter.study.targets import DoesNotFit, open_target

Progress = Callable[[str], None]


@dataclass
class StudyResult:
    study: StudyConfig
    out_dir: Path
    cells: list[CellResult]
    targets: dict[str, dict[str, Any]]
    prices: StudyPrices
    soaks: list[SoakResult]
    findings: list[Finding]
    wall_s: float
    generated_at: dt.datetime
    files: dict[str, Path] = field(default_factory=dict)

    def cell(self, config: str, profile: str) -> CellResult | None:
        return next((c for c in self.cells if c.config == config and c.profile == profile), None)


def slug(text: str) -> str:
    """A folder name for a configuration label: ``8xa10g:tp4,pp2`` -> ``8xa10g-tp4-pp2``."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "config"


def _check_out(out_dir: Path, resume: bool) -> None:
    if (out_dir / "study.json").exists() and not resume:
        raise ConfigError(f"--out {out_dir}: already holds a study; choose another folder or pass --resume")
    out_dir.mkdir(parents=True, exist_ok=True)


def _step_line(conf: str, profile: str, o: StepOutcome) -> str:
    r = o.rates()
    tps = r["output_tokens_per_s"]
    rps = r["requests_per_s"]
    verdict = "meets SLO" if o.meets_slo else ("misses SLO: " + "; ".join(o.slo_failures) if o.slo_failures else "")
    return (f"    step {o.spec.k} {o.spec.kind:<11} {o.spec.describe():<34} "
            f"{(rps or 0):8.2f} req/s {(tps or 0):9,.0f} out tok/s  {verdict}")


def run_cells(study: StudyConfig, out_dir: Path, *, resume: bool = False,
              progress: Progress | None = None) -> tuple[list[CellResult], dict[str, dict[str, Any]]]:
    """Every cell of the study, configuration by configuration (see the module docstring)."""
    say = progress or (lambda _line: None)
    cells: list[CellResult] = []
    targets: dict[str, dict[str, Any]] = {}
    total = sum(len(study.profiles_for(c)) for c in study.configurations)
    n = 0
    for conf in study.configurations:
        profiles = study.profiles_for(conf)
        todo = []
        for profile in profiles:
            cell_dir = out_dir / "cells" / slug(conf.label) / profile
            done = load_cell(cell_dir, fingerprint(study, conf, profile)) if resume else None
            if done is not None:
                cells.append(done)
                targets[conf.label] = done.target
                n += 1
                say(f"[{n}/{total}] {conf.label} × {profile}: kept from the previous run")
            else:
                todo.append((profile, cell_dir))
        if not todo:
            continue
        try:
            with open_target(study, conf) as target:
                targets[conf.label] = target.describe()
                n = _run_todo(study, conf, target, todo, cells, n, total, say)
        except DoesNotFit as exc:
            why = f"does not fit: {exc}"
            targets[conf.label] = {"kind": "twin", "model": study.model_for(conf), "unavailable": why}
            for profile, cell_dir in todo:
                n += 1
                say(f"[{n}/{total}] {conf.label} × {profile}: {why}")
                cells.append(unavailable_cell(conf, profile, "simulated", why, study.model_for(conf), cell_dir))
    order = {(c.label, p): i for i, c in enumerate(study.configurations) for p in study.profiles}
    cells.sort(key=lambda c: order.get(c.key, 0))
    return cells, targets


def _run_todo(study: StudyConfig, conf: Any, target: Any, todo: list[tuple[str, Path]], cells: list[CellResult],
              n: int, total: int, say: Progress) -> int:
    for profile, cell_dir in todo:
        n += 1
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        say(f"[{n}/{total}] {conf.label} × {profile} ({target.source})")
        t0 = time.perf_counter()
        cell = run_cell(target, study, conf, profile, cell_dir,
                        on_step=lambda o, c=conf.label, p=profile: say(_step_line(c, p, o)))
        cap = cell.capacity
        say(f"    -> saturation {cell.saturation['output_tokens_per_s'] or 0:,.0f} out tok/s; "
            + (f"SLO capacity {cap['requests_per_s']:.2f} req/s" if cap else "no step met the SLO")
            + f" ({time.perf_counter() - t0:.1f} s)")
        cells.append(cell)
    return n


def run_study(study: StudyConfig, out_dir: Path, *, resume: bool = False, progress: Progress | None = None,
              today: dt.date | None = None, now: dt.datetime | None = None) -> StudyResult:
    """Run, price, soak and report (see the module docstring)."""
    from infermeter.study.report import write_study_report
    from infermeter.study.targets import override_flags

    t0 = time.perf_counter()
    for conf in (c for c in study.configurations if c.measured):
        for profile in study.profiles_for(conf):
            override_flags(profile, study.profile_overrides.get(profile))
    out_dir = Path(out_dir)
    _check_out(out_dir, resume)
    (out_dir / "study.yaml").write_text(dump_study(study), encoding="utf-8")
    cells, targets = run_cells(study, out_dir, resume=resume, progress=progress)
    prices = price_study(study, cells, today)
    soaks = run_soaks(study, cells, out_dir / "soak", progress=progress) if study.soak else []
    findings = write_findings(study, cells, prices, soaks)
    result = StudyResult(study, out_dir, cells, targets, prices, soaks, findings, 0.0,
                         now or dt.datetime.now(dt.timezone.utc))
    result.wall_s = time.perf_counter() - t0
    result.files = write_study_report(result)
    return result
