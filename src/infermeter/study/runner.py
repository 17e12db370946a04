"""``infermeter study`` as a function: run every cell, price them, decide, soak, and write the study report.

The contract: :func:`run_study` runs the cells configuration by configuration (an engine to
launch is started once for all its profiles; a configuration that does not fit its model becomes
"does not fit" rows; one with ``target: {runs: ...}`` takes its cells from those runs, nothing run), then prices them, decides per profile, checks the study's claims, runs the
optional soak and writes, under ``out_dir``::

    study.yaml     the resolved study that ran
    study.json     every figure of the report (cells, costs, decisions, claims, break-even, findings, soak)
    report.html    self-contained page: the decision first, then findings and folded tables
    report.md      the same cards, tables and findings
    cells.csv      one row per cell
    cells/<configuration>/<profile>/   sweep folders (readable by `infermeter report` and `cost`)
    soak/<configuration>/              soak runs

    result = run_study(load_study_text(text, "study.yaml"), Path("out"), progress=print)
    result.files["html"], result.decisions["chat"].best.cell.config

The report files are rewritten after every cell (``partial``: the cells still to run are
named at the top), each file replaced whole (written aside, then renamed), so a study killed
at any point leaves a valid partial report. ``resume=True`` keeps finished cells whose inputs
(model, configuration, load, SLO, workload, seed) are unchanged and reruns the others; without
it ``out_dir`` must not hold a study yet. ``events`` receives :class:`Event` s (cell started,
step done, cell done) for a progress display; ``progress`` receives the same as text lines.
Time is passed in (``today``, ``now``) so reports are reproducible in tests.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.records.outputs import output_dir
from infermeter.study.cells import CellResult, fingerprint, load_cell, run_cell, unavailable_cell
from infermeter.study.claims import ClaimCheck, check_claims
from infermeter.study.config import Configuration, StudyConfig, dump_study
from infermeter.study.decision import Decision, decide
from infermeter.study.findings import Finding, write_findings
from infermeter.study.imported import ImportedTarget, check_runs, imported_cell
from infermeter.study.pricing import StudyPrices, price_study
from infermeter.study.soak import SoakResult, run_soaks
from infermeter.study.sweep import StepOutcome
from infermeter.study.targets import DoesNotFit, open_target

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Event:
    """What the runner is doing: ``kind`` = "cell" (a cell starts), "step" (a step finished), "done" (a cell
    finished: ``done`` of ``total``), "soak" (the soak starts)."""

    kind: str
    done: int
    total: int
    text: str


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
    decisions: dict[str, Decision] = field(default_factory=dict)
    claims: list[ClaimCheck] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # cells not run yet ("config × profile"): a partial report

    def cell(self, config: str, profile: str) -> CellResult | None:
        return next((c for c in self.cells if c.config == config and c.profile == profile), None)


def slug(text: str) -> str:
    """A folder name for a configuration label: ``8xa10g:tp4,pp2`` -> ``8xa10g-tp4-pp2``."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "config"


def _check_out(out_dir: Path, resume: bool) -> None:
    if (out_dir / "study.json").exists() and not resume:
        raise ConfigError(f"--out {out_dir}: already holds a study; choose another folder or pass --resume")
    output_dir(out_dir)  # made and proved writable before any cell runs


def step_line(o: StepOutcome) -> str:
    """One load step as a progress line: target and realized rate, throughput, the SLO verdict."""
    r = o.rates()
    verdict = "meets SLO" if o.meets_slo else ("misses SLO: " + "; ".join(o.slo_failures) if o.slo_failures else "")
    realized = f" (realized {o.offered_rate:.4g})" if o.spec.kind == "rate" and o.offered_rate else ""
    return (f"    step {o.spec.k} {o.spec.kind:<11} {o.spec.describe() + realized:<52} "
            f"{(r['requests_per_s'] or 0):8.3g} req/s {(r['output_tokens_per_s'] or 0):9,.0f} out tok/s  {verdict}")


class _Cells:
    """The study's cells as they finish, in study order, with the callbacks of :func:`run_cells`."""

    def __init__(self, study: StudyConfig, say: Progress, events: Callable[[Event], None] | None,
                 on_cell: Callable[[list[CellResult], dict[str, dict[str, Any]], list[str]], None] | None) -> None:
        self.study, self.say, self.events, self.on_cell = study, say, events, on_cell
        self.todo = [(c.label, p) for c in study.configurations for p in study.profiles_for(c)]
        self.cells: list[CellResult] = []
        self.targets: dict[str, dict[str, Any]] = {}

    @property
    def total(self) -> int:
        return len(self.todo) + len(self.cells)

    def event(self, kind: str, text: str) -> None:
        self.say(text)
        if self.events is not None:
            self.events(Event(kind, len(self.cells), self.total, text))

    def add(self, cell: CellResult, text: str) -> None:
        self.todo.remove(cell.key)
        self.cells.append(cell)
        order = {(c.label, p): i for i, c in enumerate(self.study.configurations) for p in self.study.profiles}
        self.cells.sort(key=lambda c: order.get(c.key, 0))
        if self.on_cell is not None:  # the partial report first: a study stopped right after keeps it
            self.on_cell(self.cells, self.targets, [f"{a} × {b}" for a, b in self.todo])
        self.event("done", text)


def run_cells(study: StudyConfig, out_dir: Path, *, resume: bool = False, progress: Progress | None = None,
              events: Callable[[Event], None] | None = None,
              on_cell: Callable[[list[CellResult], dict[str, dict[str, Any]], list[str]], None] | None = None,
              ) -> tuple[list[CellResult], dict[str, dict[str, Any]]]:
    """Every cell of the study, configuration by configuration (see the module docstring); ``on_cell(cells,
    targets, pending)`` after each."""
    acc = _Cells(study, progress or (lambda _line: None), events, on_cell)
    for conf in study.configurations:
        todo = []
        for profile in study.profiles_for(conf):
            cell_dir = out_dir / "cells" / slug(conf.label) / profile
            done = load_cell(cell_dir, fingerprint(study, conf, profile)) if resume else None
            if done is not None:
                acc.targets[conf.label] = done.target
                acc.add(done, f"[{len(acc.cells) + 1}/{acc.total}] {conf.label} × {profile}: kept from the previous run")
            else:
                todo.append((profile, cell_dir))
        if todo:
            _run_configuration(study, conf, todo, acc)
    return acc.cells, acc.targets


def _run_configuration(study: StudyConfig, conf: Configuration, todo: list[tuple[str, Path]], acc: _Cells) -> None:
    try:
        opened = (open_target(study, conf, log_dir=todo[0][1].parent.parent / "logs") if conf.imported is None
                  else nullcontext(ImportedTarget(study, conf)))
        with opened as target:
            acc.targets[conf.label] = target.describe()
            for profile, cell_dir in todo:
                if cell_dir.exists():
                    shutil.rmtree(cell_dir)
                acc.event("cell", f"[{len(acc.cells) + 1}/{acc.total}] {conf.label} × {profile} ({target.source})")
                t0 = time.perf_counter()
                on_step = lambda o: acc.event("step", step_line(o))  # noqa: E731
                cell = (imported_cell(target, study, conf, profile, cell_dir, on_step=on_step)  # existing runs: no steps run
                        if isinstance(target, ImportedTarget) else run_cell(target, study, conf, profile, cell_dir, on_step=on_step))
                cap = cell.capacity
                acc.add(cell, f"    -> saturation {cell.saturation['output_tokens_per_s'] or 0:,.0f} out tok/s; "
                        + (f"SLO capacity {cap['requests_per_s']:.3g} req/s" if cap else "no step met the SLO")
                        + f" ({time.perf_counter() - t0:.1f} s)")
    except DoesNotFit as exc:
        why = f"does not fit: {exc}"
        acc.targets[conf.label] = {"kind": "twin", "model": study.model_for(conf), "unavailable": why}
        for profile, cell_dir in todo:
            if (conf.label, profile) in acc.todo:
                acc.add(unavailable_cell(conf, profile, "simulated", why, study.model_for(conf), cell_dir),
                        f"[{len(acc.cells) + 1}/{acc.total}] {conf.label} × {profile}: {why}")


def summarize(study: StudyConfig, out_dir: Path, cells: list[CellResult], targets: dict[str, dict[str, Any]],
              soaks: list[SoakResult], today: dt.date | None, now: dt.datetime | None, wall_s: float,
              pending: list[str] | None = None) -> StudyResult:
    """Price, decide, check claims and write the findings for the cells so far (no running)."""
    prices = price_study(study, cells, today)
    decisions = decide(study, cells, prices, soaks)
    findings = write_findings(study, cells, prices, soaks, decisions)
    return StudyResult(study, out_dir, cells, targets, prices, soaks, findings, wall_s,
                       now or dt.datetime.now(dt.timezone.utc), decisions=decisions,
                       claims=check_claims(study, cells), pending=list(pending or []))


def run_study(study: StudyConfig, out_dir: Path, *, resume: bool = False, progress: Progress | None = None,
              events: Callable[[Event], None] | None = None, today: dt.date | None = None,
              now: dt.datetime | None = None) -> StudyResult:
    """Run, price, decide, soak and report (see the module docstring)."""
    from infermeter.study.report import write_study_report
    from infermeter.study.targets import override_flags

    t0 = time.perf_counter()
    for conf in (c for c in study.configurations if c.measured):
        if conf.imported is not None:
            check_runs(conf)  # every existing run read before anything runs
            continue
        for profile in study.profiles_for(conf):
            override_flags(profile, study.profile_overrides.get(profile))
    out_dir = Path(out_dir)
    _check_out(out_dir, resume)
    (out_dir / "study.yaml").write_text(dump_study(study), encoding="utf-8")

    def partial(cells: list[CellResult], targets: dict[str, dict[str, Any]], pending: list[str]) -> None:
        if pending:  # the last cell's report is the full one, written below
            write_study_report(summarize(study, out_dir, list(cells), dict(targets), [], today, now,
                                         time.perf_counter() - t0, pending))

    cells, targets = run_cells(study, out_dir, resume=resume, progress=progress, events=events, on_cell=partial)
    soaks: list[SoakResult] = []
    if study.soak:
        if events is not None:
            events(Event("soak", len(cells), len(cells), "soak"))
        soaks = run_soaks(study, [c for c in cells if not c.unavailable], out_dir / "soak", progress=progress)
    result = summarize(study, out_dir, cells, targets, soaks, today, now, 0.0)
    result.wall_s = time.perf_counter() - t0
    result.files = write_study_report(result)
    return result
