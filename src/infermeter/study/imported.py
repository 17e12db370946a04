"""Study cells made of runs that already exist: a configuration with ``target: {runs: {PROFILE: [PATH, ...]}}``.

    configurations:
      - config: h100-sxm
        name: h100 (vllm bench)
        target: {runs: {chat: [results/vllm-bench-8rps.json, results/native-8rps/]}}

Promise: :class:`ImportedTarget` stands where a live target would (nothing is launched, nothing is sent);
:func:`imported_cell` makes the cell of one profile from the runs given for it, one load step per run:

- an infermeter run directory (its own run, or ``infermeter import``'s) is copied to ``steps/<k>``; a
  sweep directory gives each of its steps;
- another tool's result file (vllm bench serve, GuideLLM, AIPerf, inference-benchmarker) is imported into
  ``steps/<k>`` through :mod:`infermeter.interop` (one step per run the file holds), ``source: imported``.

A step's kind follows its run's load: open loop at a target rate is a ``rate`` step at that rate; closed
loop is a ``saturation`` step (``synchronous`` at concurrency 1), the fastest closed-loop run first so
that it is the cell's saturation point. Each step is judged against the study's SLO and summed up by
:func:`infermeter.study.cells.summarize_cell`, as a measured cell's steps are; the throughput of a step
with per-request records is its steady-window (closed loop) or arrival-rate (open loop) figure, else
its summary's. The cell's source is ``emulated`` when a run was measured against infermeter's emulator,
else ``measured``; the target block names the runs and the tools that wrote them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError, DataError
from infermeter.interop.common import Imported, summarize, write_imported
from infermeter.interop.definitions import tool_of
from infermeter.interop.readers import read_file
from infermeter.records import store
from infermeter.report.rundir import RunDir, load_run_dir
from infermeter.study.cells import _COLUMNS, CellResult, fingerprint, summarize_cell, write_cell
from infermeter.study.config import Configuration, StudyConfig
from infermeter.study.saturation import arrival_throughput, steady_throughput
from infermeter.study.sweep import StepKind, StepOutcome, StepSpec, judge
from infermeter.study.targets import Target


class ImportedTarget:
    """A configuration whose cells are existing runs (``conf.imported``)."""

    source = "imported"

    def __init__(self, study: StudyConfig, conf: Configuration) -> None:
        if conf.imported is None:
            raise ConfigError(f"configuration {conf.label}: no target.runs")
        self.study, self.conf, self.runs = study, conf, conf.imported.runs

    def default_concurrency(self) -> int:
        return 0  # nothing is planned: the runs are the steps

    def describe(self) -> dict[str, Any]:
        return {"kind": "imported", "engine": "existing runs (not measured by this study)",
                "model": self.study.model_for(self.conf), "url": None,
                "runs": {p: [str(x) for x in paths] for p, paths in self.runs.items()}}

    def run_step(self, spec: StepSpec, profile: str, *, out_dir: Path, label: str) -> Summary:
        raise ConfigError(f"configuration {self.conf.label}: its cells are existing runs; nothing is run")


@dataclass
class _Run:
    src: str  # where it came from (a run directory, or a result file and its run)
    summary: Summary
    run: dict[str, Any]
    dir: Path | None = None  # an infermeter run directory, copied
    imp: Imported | None = None  # another tool's run, imported

    def write(self, dest: Path) -> None:
        if self.imp is not None:
            write_imported(self.imp, dest)
        elif self.dir is not None:
            shutil.copytree(self.dir, dest)


def _from_dir(rd: RunDir) -> list[_Run]:
    if rd.steps:
        return [r for s in rd.steps for r in _from_dir(s)]
    return [_Run(str(rd.path), rd.summary, rd.run, dir=rd.path)]


def _from_file(path: Path) -> list[_Run]:
    out = []
    for imp in read_file(path):
        run, _table, summary = summarize(imp)  # for the step's kind; written to the step by _Run.write
        out.append(_Run(str(imp.path), summary, run, imp=imp))
    return out


def collect(paths: tuple[Path, ...]) -> list[_Run]:
    """Every run the given paths hold, in order; DataError naming a path that holds none."""
    runs: list[_Run] = []
    for p in paths:
        p = Path(p)
        runs += _from_dir(load_run_dir(p)) if p.is_dir() else _from_file(p)
    return runs


def _spec(k: int, r: _Run) -> StepSpec:
    load: dict[str, Any] = r.run["load"] if isinstance(r.run.get("load"), dict) else {}
    s = r.summary
    requests = int(s.scheduled or s.completed or 0)
    rate = load.get("target_rate", s.target_rate)
    if load.get("open_loop") and isinstance(rate, (int, float)) and rate > 0:
        return StepSpec(k=k, kind="rate", requests=requests, rate=float(rate))
    conc = load.get("concurrency") or (load.get("limits") or {}).get("max_concurrency")
    kind: StepKind = "synchronous" if conc == 1 else "saturation"
    return StepSpec(k=k, kind=kind, requests=requests, concurrency=int(conc) if isinstance(conc, int) else None)


def _order(runs: list[_Run]) -> list[_Run]:
    """The fastest closed-loop run first (the cell's saturation point), the others in the order given."""
    closed = [r for r in runs if _spec(0, r).kind == "saturation"]
    if not closed:
        return runs
    top = max(closed, key=lambda r: float(r.summary.request_throughput or 0.0))
    return [top] + [r for r in runs if r is not top]


def check_runs(conf: Configuration) -> None:
    """Read every run a configuration's ``target.runs`` names (before any cell runs); ConfigError naming the
    configuration, the profile and the file for one that cannot be read or imported."""
    for profile, paths in (conf.imported.runs if conf.imported is not None else {}).items():
        _collect(conf, profile, paths)


def _collect(conf: Configuration, profile: str, paths: tuple[Path, ...]) -> list[_Run]:
    try:
        return collect(paths)
    except DataError as exc:
        raise ConfigError(f"configuration {conf.label}: target.runs.{profile}: {exc}") from None


def imported_cell(target: Target, study: StudyConfig, conf: Configuration, profile: str, cell_dir: Path,
                  on_step: Callable[[StepOutcome], None] | None = None) -> CellResult:
    """The cell of ``profile`` from the runs ``conf.imported`` gives for it, written to ``cell_dir`` (sweep layout)."""
    paths = conf.imported.runs[profile] if conf.imported is not None else ()
    runs = _order(_collect(conf, profile, paths))
    outcomes: list[StepOutcome] = []
    tools: set[str] = set()
    emulated = False
    for k, r in enumerate(runs):
        step_dir = cell_dir / "steps" / str(k)
        step_dir.parent.mkdir(parents=True, exist_ok=True)
        r.write(step_dir)
        run = store.read_json(step_dir / store.RUN) if (step_dir / store.RUN).is_file() else r.run
        summary = Summary.from_json(store.read_json(step_dir / store.SUMMARY), str(step_dir / store.SUMMARY))
        tools.add(tool_of(run))
        emulated = emulated or bool((run.get("target") or {}).get("emulated"))
        spec = _spec(k, _Run(r.src, summary, run))
        tp = None
        if (step_dir / store.PARQUET).is_file():
            table = pq.read_table(step_dir / store.PARQUET, columns=_COLUMNS)
            if spec.kind == "saturation" and spec.concurrency:
                tp = steady_throughput(table, spec.concurrency)
            elif spec.kind == "rate":
                tp = arrival_throughput(table)
        ok, why = judge(summary, study.slo, tp)
        outcome = StepOutcome(spec, summary, tp, ok, why, str(step_dir))
        outcomes.append(outcome)
        if on_step is not None:
            on_step(outcome)
    info = {**target.describe(), "tools": sorted(tools), "steps_from": [r.src for r in runs]}
    plan = study.load_for(conf)
    cell = summarize_cell(conf, profile, "emulated" if emulated else "measured", cell_dir, outcomes, info,
                          plan, study.slo)
    write_cell(cell, study, f"existing runs: {len(runs)} ({', '.join(sorted(tools))})",
               fingerprint(study, conf, profile))
    return cell
