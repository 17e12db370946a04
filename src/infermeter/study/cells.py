"""One study cell (configuration x profile): run its load steps, then sum it up as :class:`CellResult`.

:func:`run_cell` drives :func:`infermeter.study.sweep.plan_steps` against a target and writes the
sweep layout other commands read (``infermeter report``, ``infermeter cost``)::

    cells/h100-sxm/chat/
        run.json        study cell header (source, model, hardware, profile, load plan, SLO)
        summary.json    {"steps": [...], "capacity": {...}, "study_cell": {...}}
        steps/<k>/      a full run directory per step

    cell = run_cell(target, study, conf, "chat", Path("out/cells/h100-sxm/chat"))
    cell.saturation["output_tokens_per_s"], cell.capacity, cell.server["kv_cache_usage_max"]

What a cell reports (all from its steps, nothing assumed):
``saturation`` (steady-window throughput of the closed-loop step), ``capacity`` (the load step meeting
the SLO with the highest throughput; None when none did: the one-at-a-time step is not a load, it
ran the stream's first requests alone), TTFT / TPOT / E2E percentiles at
saturation, at capacity and one request at a time (``unloaded``), the server's KV-cache usage,
prefix-cache hit rate, waiting and running requests and preemptions at saturation (None when the
target did not expose them), and errors over all steps.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from infermeter.analysis.results import Summary
from infermeter.analysis.verdict import client_limited
from infermeter.records import store
from infermeter.records.header import RunHeader
from infermeter.study.config import Configuration, LoadPlan, Slo, StudyConfig
from infermeter.study.saturation import arrival_throughput, steady_throughput
from infermeter.study.sweep import (StepOutcome, capacity_step, judge, knee_bracket, plan_steps, saturation_step,
                                    search_result)
from infermeter.study.targets import Target

LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms")
SERVER_KEYS = ("kv_cache_usage_mean", "kv_cache_usage_max", "prefix_cache_hit_rate", "num_requests_waiting_mean",
               "num_requests_waiting_max", "num_requests_running_max", "num_preemptions")
_COLUMNS = ["phase", "intended_at", "sent_at", "first_token_at", "ended_at", "outcome", "completion_tokens",
            "stream_tokens", "prompt_tokens"]


@dataclass(frozen=True)
class CellResult:
    """Everything the study knows about one cell, JSON-able (``to_json`` / ``from_json``)."""

    config: str  # the configuration's label (its name)
    hardware: str  # the hardware configuration, e.g. 4xa100-80gb:tp4
    profile: str
    source: str  # measured | emulated (an endpoint that reported itself as infermeter's twin) | simulated
    model: str | None
    run_dir: str
    steps: list[dict[str, Any]]
    saturation: dict[str, Any]
    capacity: dict[str, Any] | None
    latency: dict[str, dict[str, dict[str, float | None]]]  # at -> metric -> stat
    server: dict[str, float | None]
    errors: dict[str, Any]
    tokens: dict[str, float | None]
    target: dict[str, Any] = field(default_factory=dict)
    unavailable: str | None = None  # why the cell has no figures (e.g. "does not fit: ..."); then all blocks are empty
    # what the SLO-capacity search established (study.sweep.search_result): value, status, low, high, ...
    capacity_search: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the cell's run says about itself (a search stopped ...)

    @property
    def saturation_valid(self) -> bool:
        """Whether the saturation step's run was judged valid (cells written before the field count as valid):
        an invalid one is shown flagged, never ranked, priced or named a leader, and checks no claim."""
        return (self.saturation or {}).get("valid", True) is not False

    @property
    def key(self) -> tuple[str, str]:
        return (self.config, self.profile)

    def rate(self, at: str, what: str = "output_tokens_per_s") -> float | None:
        block = self.saturation if at == "saturation" else self.capacity
        return None if block is None else block.get(what)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellResult:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def unavailable_cell(conf: Configuration, profile: str, source: str, why: str, model: str | None,
                     run_dir: Path) -> CellResult:
    """A cell that could not run (the configuration does not fit the model): a row with the reason."""
    return CellResult(config=conf.label, hardware=conf.config, profile=profile, source=source, model=model,
                      run_dir=str(run_dir), steps=[], saturation={}, capacity=None, latency={}, server={},
                      errors={}, tokens={}, unavailable=why)


def _pcts(summary: Summary) -> dict[str, dict[str, float | None]]:
    return {k: {p: summary.distribution(k)[p] for p in ("p50", "p90", "p95", "p99")} for k in LATENCIES}


def _rates_block(o: StepOutcome) -> dict[str, Any]:
    return {**o.rates(), "step": o.spec.k, "describe": o.spec.describe(), "kind": o.spec.kind,
            "concurrency": o.spec.concurrency, "offered_rate": o.offered_rate, "fraction": o.spec.fraction,
            "method": o.throughput.method if o.throughput else "whole run",
            "window_s": o.throughput.window_s if o.throughput else o.summary.duration_s,
            # the step's own run verdict: a throughput from a run judged invalid (e.g. the client fell behind) is
            # shown flagged and never ranked (study/tables.py)
            "valid": o.summary.valid, "invalid_reasons": list(o.summary.invalid_reasons or [])}


def _capacity_block(cap: StepOutcome, outcomes: list[StepOutcome], search: dict[str, Any]) -> dict[str, Any]:
    """The capacity step's rates, with the bracket the SLO edge lies in and its relative width (``knee_*``,
    kept for readers of earlier studies) and what the search established (``search_result``'s keys:
    value, status, low, high, step_requests, converged, tolerance ...)."""
    block = _rates_block(cap)
    bracket = knee_bracket(outcomes)
    lo, hi = bracket if bracket else (None, None)
    block.update(knee_low_rps=lo, knee_high_rps=hi,
                 knee_precision=(hi / lo - 1) if lo and hi else None)
    # value: the SLO capacity the search established (None for an upper bound: only the one-at-a-time step met
    # the SLO, so requests_per_s here is that step's rate, not a capacity under load)
    block.update(search)
    return block


def summarize_cell(conf: Configuration, profile: str, source: str, run_dir: Path, outcomes: list[StepOutcome],
                   target: dict[str, Any], plan: LoadPlan | None = None, slo: Slo | None = None,
                   notes: list[str] | None = None) -> CellResult:
    """The :class:`CellResult` of finished steps (see the module docstring)."""
    sat = saturation_step(outcomes)
    loads = [o for o in outcomes if o.spec.kind != "synchronous"]  # one at a time ran other requests (first turns)
    cap = capacity_step(loads)
    search = search_result(outcomes, plan or LoadPlan(), slo or Slo())
    if notes:
        search["stopped"] = "; ".join(notes)
        search["converged"] = False if search.get("converged") is not None else None
    sync = next((o for o in outcomes if o.spec.kind == "synchronous"), None)
    assert sat is not None, "a cell has at least one step"
    latency = {"saturation": _pcts(sat.summary)}
    if cap is not None:
        latency["capacity"] = _pcts(cap.summary)
    if sync is not None:
        latency["unloaded"] = _pcts(sync.summary)
    sm: dict[str, Any] = sat.summary.server_metrics or {}
    by_class: dict[str, int] = {}
    completed = failed = 0
    for o in outcomes:
        completed += o.summary.completed
        failed += o.summary.failed
        for cls, n in o.summary.errors.items():
            by_class[cls] = by_class.get(cls, 0) + int(n)
    errors = {"error_rate_saturation": sat.summary.error_rate,
              "error_rate_all": failed / (completed + failed) if completed + failed else None,
              "completed": completed, "failed": failed, "by_class": by_class}
    return CellResult(
        config=conf.label, hardware=conf.config, profile=profile, source=source,
        model=sat.summary.model, run_dir=str(run_dir), steps=[o.to_json() for o in outcomes],
        saturation=_rates_block(sat), capacity=_capacity_block(cap, loads, search) if cap is not None else None,
        latency=latency, server={k: sm.get(k) for k in SERVER_KEYS}, errors=errors,
        tokens={"mean_input": sat.summary.mean_input_tokens, "mean_output": sat.summary.mean_output_tokens},
        target=target, capacity_search=search, notes=list(notes or []))


def run_cell(target: Target, study: StudyConfig, conf: Configuration, profile: str, cell_dir: Path,
             on_step: Callable[[StepOutcome], None] | None = None) -> CellResult:
    """Run every step of one cell into ``cell_dir`` and write its summary (see the module docstring)."""
    plan = study.load_for(conf)
    gen = plan_steps(plan, study.slo, target.default_concurrency())
    outcomes: list[StepOutcome] = []
    notes: list[str] = []
    spec = next(gen)
    while True:
        step_dir = cell_dir / "steps" / str(spec.k)
        label = f"{conf.label} · {profile} · step {spec.k}"
        summary = target.run_step(spec, profile, out_dir=step_dir, label=label)
        if client_limited(summary):  # the client, not the server: run it once more, aside
            first = step_dir.with_name(f"{spec.k}-client-limited")
            if first.exists():
                shutil.rmtree(first)
            step_dir.rename(first)
            summary = target.run_step(spec, profile, out_dir=step_dir, label=label + " (retried)")
            limited = client_limited(summary)
            if limited:
                notes.append(f"the search stopped at step {spec.k} ({spec.describe()}): the client could not apply "
                             f"the load, twice ({'; '.join(limited)}); not read as the server's answer")
                gen.close()
                break
        tp = None
        if spec.kind == "saturation" and spec.concurrency:
            tp = steady_throughput(pq.read_table(step_dir / store.PARQUET, columns=_COLUMNS), spec.concurrency)
        elif spec.kind == "rate":
            tp = arrival_throughput(pq.read_table(step_dir / store.PARQUET, columns=_COLUMNS))
        ok, why = judge(summary, study.slo, tp)
        outcome = StepOutcome(spec, summary, tp, ok, why, str(step_dir))
        outcomes.append(outcome)
        if on_step is not None:
            on_step(outcome)
        try:
            spec = gen.send(outcome)
        except StopIteration:
            break
    info = target.describe()
    first = cell_dir / "steps" / "0" / store.RUN
    source = target.source
    if target.source == "measured" and first.is_file():
        info["emulated"] = (store.read_json(first).get("target") or {}).get("emulated")
        if info["emulated"]:
            source = "emulated"  # infermeter's own twin behind an endpoint: not a measurement of hardware
    if not outcomes:  # the client could not apply even the first step: a row that says so
        return unavailable_cell(conf, profile, target.source, notes[0] if notes else "no step ran",
                                study.model_for(conf), cell_dir)
    cell = summarize_cell(conf, profile, source, cell_dir, outcomes, info, plan, study.slo, notes)
    write_cell(cell, study, plan.describe(), fingerprint(study, conf, profile))
    return cell


def fingerprint(study: StudyConfig, conf: Configuration, profile: str) -> str:
    """What a cell's numbers depend on (model, configuration, load, SLO, workload, seed), hashed."""
    import hashlib

    parts = {"model": study.model_for(conf),
             "conf": conf.model_dump(mode="json", exclude={"name", "price_per_hour", "price_source", "price_date", "note",
                                                           "provider", "instance", "commitment"}),
             "profile": profile, "overrides": study.profile_overrides.get(profile), "load": study.load_for(conf).model_dump(),
             "slo": study.slo.model_dump(), "sim": study.sim_for(conf).model_dump(), "seed": study.seed}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_cell(cell: CellResult, study: StudyConfig, load_text: str, key: str = "") -> None:
    """``run.json`` and ``summary.json`` of the cell folder (sweep layout)."""
    from infermeter import __version__
    from infermeter.analysis.results import SCHEMA_VERSION

    head = {"version": __version__, "source": cell.source,
            "label": f"{cell.config} · {cell.profile}", "model": cell.model, "hardware": cell.hardware,
            "profile": cell.profile, "seed": study.seed, "slo": study.slo.limits or None,
            "load": {"describe": load_text, "kind": "study-sweep"}, "target": cell.target}
    basis = cell.capacity or cell.saturation
    summary: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "source": cell.source, "label": head["label"], "model": cell.model,
               "hardware": cell.hardware, "profile": cell.profile, "kind": "sweep", "plan": "study-sweep",
               "load": load_text, "head_step": basis.get("step"),
               "request_throughput": basis.get("requests_per_s"), "input_token_throughput": basis.get("input_tokens_per_s"),
               "output_token_throughput": basis.get("output_tokens_per_s"),
               "total_token_throughput": basis.get("total_tokens_per_s"), "steps": cell.steps,
               "capacity": cell.capacity, "capacity_search": cell.capacity_search, "notes": cell.notes,
               "saturation_point": cell.saturation, "slo": study.slo.limits or None,
               "slo_judge": study.slo.model_dump(),
               "valid": all(s.get("valid", True) for s in cell.steps), "study_cell": cell.to_json(),
               "study_fingerprint": key}
    path = Path(cell.run_dir)
    store.write_json(path / store.RUN, RunHeader.given(**head))
    store.write_json(path / store.SUMMARY, summary)


def load_cell(cell_dir: Path, key: str) -> CellResult | None:
    """A finished cell written by :func:`write_cell` with fingerprint ``key`` (else None)."""
    p = Path(cell_dir) / store.SUMMARY
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("study_fingerprint") != key:
        return None
    block = data.get("study_cell")
    return CellResult.from_json(block) if isinstance(block, dict) else None

