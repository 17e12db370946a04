"""Multi-step runs on a server: every step a full run in ``steps/<k>/``, one summary on top.

``measure_plan`` drives a plan (``load.sweep``, ``load.search``) with
``load.steps.run_plan``; each step is an ordinary run of a derived
``RunConfig`` (:func:`step_config`: the plan's shape as flags, its own
warmup and stop condition, ``out = DIR/steps/<k>``), so each step directory
replays on its own. The top-level ``summary.json`` holds the head step's keys
(find-max: the capacity step; sweep: the best step meeting the SLO) plus
``steps`` and, for find-max, ``capacity`` (layout in docs/load.md)::

    m = Measurement(RunConfig(url=url, load="find-max", slo={"ttft_ms": 500}, requests=200))
    res = asyncio.run(m.run())
    res.summary["capacity"]["rate"], len(res.summary["steps"])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge
from infermeter.client.session import make_session
from infermeter.errors import DataError, UserError
from infermeter.load.shapes import ConstantConcurrency
from infermeter.load.steps import Step, plan_summary, replay_plan, run_plan
from infermeter.measure.config import THROUGHPUT_CONCURRENCY, RunConfig, build_plan
from infermeter.measure.header import check_fd_limit, check_samples, default_label, default_out_dir, discover_model
from infermeter.measure.run import Measurement, RunResult
from infermeter.records import store
from infermeter.records.outputs import claim_run_dir
from infermeter.records.header import RunHeader


def step_config(cfg: RunConfig, step: Step, k: int, run_dir: Path, label: str) -> RunConfig:
    """The RunConfig of step ``k``: the step's shape itself, everything else from the plan's config.

    Each step sends its own prompt text (salt = the plan's + k), so a step never finds the previous
    steps' prompts in the server's prefix cache; ``--prompt-salt 0`` sends the seed's own text every time."""
    salt = cfg.prompt_salt + k if cfg.prompt_salt else cfg.prompt_salt
    return cfg.model_copy(update={"load": None, "rate": None, "concurrency": None, "ramp_up_strategy": None,
                                  "shape": step.shape, "out": str(run_dir / "steps" / str(k)), "history": False,
                                  "label": f"{label} step {k} ({step.name}, {step_load(step)})",
                                  "prompt_salt": salt})


def step_load(step: Step) -> str:
    """``concurrency 4`` / ``2.5 req/s``: the step's level for its label."""
    if step.concurrency is not None:
        return f"concurrency {step.concurrency}"
    return f"{step.offered_rate:.3g} req/s" if step.offered_rate is not None else step.shape.describe()


async def measure_plan(m: Measurement, url: str, embedded: bool) -> RunResult:
    cfg, plan = m.cfg, m.plan
    assert plan is not None
    async with make_session(connect_timeout_s=cfg.connect_timeout_s) as session:
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        model = (await discover_model(session, url, headers, wanted=cfg.model))[0]
    if not model:
        raise UserError(f"{url}/v1/models gave no model id; pass --model")
    label = cfg.label or default_label(model, url, embedded, plan, m.workload.describe())
    run_dir = Path(cfg.out) if cfg.out else default_out_dir(label)
    # one plan per --out, never two merged (Measurement.run frees it)
    run_dir = m._claims.enter_context(claim_run_dir(run_dir, fresh=not cfg.out))
    # known before any step runs: enough requests for the SLO percentile and for the throughput step
    # (--strict refuses here; the steps say their own warnings, the plan says the SLO's)
    throughput = ConstantConcurrency(concurrency=cfg.concurrency or THROUGHPUT_CONCURRENCY) if cfg.load == "sweep" else None
    plan_notices: list[str] = []
    check_samples(cfg, throughput, plan_notices, lambda w: m.notify(w) if "--slo-percentile" in w else None)
    if throughput is not None:  # the sweep's throughput step is its most streams: refused now, not at that step
        check_fd_limit(cfg, throughput, [], lambda w: None)
    run_dir.mkdir(parents=True, exist_ok=True)
    judge = plan_judge(cfg)
    header: dict[str, Any] = {"source": "emulated" if embedded else "measured",
                              "label": label, "model": model,
                              **({"target": {"url": url, "launch": m.launch}} if m.launch else {}),
                              "seed": cfg.seed, "slo": cfg.slo, "config": cfg.public(), "load": _plan_load(plan, None)}
    if plan_notices:
        header["notices"] = plan_notices
    header = RunHeader.given(**header)
    store.write_json(run_dir / store.RUN, header)  # a killed plan can be summarized from its steps
    calibration: dict[str, Any] = {}

    async def measure_step(k: int, step: Step) -> Summary:
        child = Measurement(step_config(cfg, step, k, run_dir, label), notify=m.notify, launch=m.launch)
        child.in_plan = True
        m._active = child
        if m.stopped:
            child.stop()
        m.notify(f"step {k} ({step.name}): {step.shape.describe()}")
        res = await child.run_on(url, embedded, calibration=calibration.get("value"))
        if res.run.get("calibration"):
            calibration["value"] = res.run["calibration"]
        return res.summary

    result = await run_plan(plan, measure_step, judge, should_stop=lambda: m.stopped)
    first = store.read_json(run_dir / "steps" / "0" / store.RUN)
    run = {k: v for k, v in first.items() if k not in ("runtime", "server_metrics", "calibration", "notices")}
    run.update({**{k: v for k, v in header.items() if k != "target"},  # the first step's target block is complete
                "load": _plan_load(plan, len(result.entries)), "started_at": first.get("started_at"),
                "source": first.get("source", header["source"])})
    if calibration.get("value"):
        run["calibration"] = calibration["value"]
    summary = _write(run_dir, run, result, judge, plan)
    if cfg.history:
        m._index(run_dir)
    return RunResult(run_dir=run_dir, summary=Summary.from_json(summary), summary_json=summary, run=run)


def plan_judge(cfg: RunConfig) -> SloJudge:
    return SloJudge(slo=dict(cfg.slo), percentile=cfg.slo_percentile, max_error_rate=cfg.max_error_rate)


def _plan_load(plan: Any, steps: int | None) -> dict[str, Any]:
    return {**plan.model_dump(mode="json"), "describe": plan.describe(), "open_loop": None, "steps": steps}


def _write(run_dir: Path, run: dict[str, Any], result: Any, judge: SloJudge, plan: Any) -> dict[str, Any]:
    summary = plan_summary(result, judge, plan)
    summary.update({"label": run.get("label"), "source": run.get("source", "measured"), "model": run.get("model"),
                    "run_dir": str(run_dir)})
    # An alert that fired in any step fires for the plan (exit code 3), named with its step.
    fired = []
    for k, entry in enumerate(summary.get("steps") or []):
        for a in (entry.get("alerts") or []) if isinstance(entry, dict) else []:
            fired.append({**a, "step": k, "message": f"step {k}: {a.get('message') or a.get('alert')}"})
    summary["alerts"] = fired
    store.write_json(run_dir / store.RUN, run)
    store.write_json(run_dir / store.SUMMARY, summary)
    return summary


def summarize_plan(run_dir: Path, summarize_step: Any) -> dict[str, Any]:
    """Rebuild a sweep / find-max summary from its steps on disk (also of a killed run: then ``interrupted``)."""
    run = store.read_json(run_dir / store.RUN)
    conf = {k: v for k, v in (run.get("config") or {}).items() if k != "api_key"}
    cfg = RunConfig(**conf)
    plan = build_plan(cfg)
    if plan is None:
        raise DataError(f"{run_dir}: has steps/ but run.json's config is not a sweep or find-max")
    ks = sorted(int(p.name) for p in (run_dir / "steps").iterdir() if p.name.isdigit() and any(
        (p / f).exists() for f in (store.SUMMARY, store.JOURNAL, store.PARQUET, "workers", "parts")))
    result = replay_plan(plan, [Summary.from_json(summarize_step(run_dir / "steps" / str(k))) for k in ks],
                         plan_judge(cfg))
    run["load"] = _plan_load(plan, len(result.entries))
    return _write(run_dir, run, result, plan_judge(cfg), plan)
