"""Multi-step load plans: a generator above shapes that yields the next step and receives its result.

A *plan* (``SweepPlan``, ``FindMaxPlan``) is a frozen config whose ``steps()``
generator yields a :class:`Step` (a shape and a name), is sent back that
step's summary (with ``meets_slo``), and finally *returns* its findings (for
find-max, the capacity). :func:`run_plan` drives any plan with an injected
``measure_step`` coroutine, so plans stay pure and are tested without a server::

    gen_result = await run_plan(SweepPlan(rates=3), measure_step, judge=SloJudge(slo={"ttft_ms": 500}))
    gen_result.entries[0]["meets_slo"], gen_result.findings

Whether a step meets the SLO is :class:`infermeter.analysis.slo.SloJudge`'s call (the one
judge, shared with the study): judged on the offered work, so a saturated step or one whose
requests did not finish never meets it. ``None`` when there is nothing to judge by.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from infermeter.analysis.slo import SloJudge
from infermeter.load.shapes import BaseShape


@dataclass(frozen=True)
class Step:
    """One step of a plan: a shape to run and a name for it (``synchronous``, ``throughput``, ``rate``...)."""

    shape: BaseShape
    name: str

    @property
    def offered_rate(self) -> float | None:
        return self.shape.mean_rate

    @property
    def concurrency(self) -> int | None:
        return self.shape.streams


StepGen = Generator[Step, dict[str, Any], dict[str, Any]]


class LoadPlan(Protocol):
    """What :func:`run_plan` drives: a frozen plan (``SweepPlan``, ``FindMaxPlan``), so ``kind`` is read-only."""

    @property
    def kind(self) -> str: ...

    def steps(self) -> StepGen: ...

    def describe(self) -> str: ...


@dataclass
class PlanResult:
    entries: list[dict[str, Any]]
    findings: dict[str, Any]
    interrupted: bool = False


MeasureStep = Callable[[int, Step], Awaitable[dict[str, Any]]]


def step_entry(k: int, step: Step, summary: dict[str, Any], judge: SloJudge) -> dict[str, Any]:
    """A step's summary plus the plan columns (its entry in ``steps``)."""
    ok, reasons = judge(summary)
    entry = {**summary, "step": step.name, "offered_rate": step.offered_rate, "concurrency": step.concurrency,
             "meets_slo": ok, "slo_reasons": reasons, "step_dir": f"steps/{k}"}
    entry.pop("run_dir", None)
    return entry


async def run_plan(plan: LoadPlan, measure_step: MeasureStep, judge: SloJudge,
                   should_stop: Callable[[], bool] = lambda: False) -> PlanResult:
    """Run every step the plan yields; each entry is the step's summary plus the plan columns."""
    gen = plan.steps()
    entries: list[dict[str, Any]] = []
    step = next(gen)
    k = 0
    while True:
        entry = step_entry(k, step, await measure_step(k, step), judge)
        entries.append(entry)
        if should_stop():
            gen.close()
            return PlanResult(entries, {}, interrupted=True)
        try:
            step = gen.send(entry)
        except StopIteration as done:
            return PlanResult(entries, done.value or {})
        k += 1


def replay_plan(plan: LoadPlan, summaries: list[dict[str, Any]], judge: SloJudge) -> PlanResult:
    """The plan's result from step summaries already on disk (``infermeter summarize`` of a plan run);
    ``interrupted`` when the plan would have run more steps."""
    gen = plan.steps()
    step = next(gen)
    entries: list[dict[str, Any]] = []
    for k, summary in enumerate(summaries):
        entries.append(step_entry(k, step, summary, judge))
        try:
            step = gen.send(entries[-1])
        except StopIteration as done:
            return PlanResult(entries, done.value or {})
    gen.close()
    return PlanResult(entries, {}, interrupted=True)


def best_entry(entries: list[dict[str, Any]]) -> int:
    """Index of the step whose summary heads the plan: the highest output tokens/s among valid steps
    meeting the SLO (or all valid steps when there is no SLO; or all steps)."""
    def pool(pred: Callable[[dict[str, Any]], bool]) -> list[int]:
        return [i for i, e in enumerate(entries) if pred(e)]

    cands = pool(lambda e: bool(e.get("valid")) and e.get("meets_slo") is True) or pool(
        lambda e: bool(e.get("valid")) and e.get("meets_slo") is None) or list(range(len(entries)))
    return max(cands, key=lambda i: (entries[i].get("output_token_throughput") or 0.0, -i))


def plan_summary(result: PlanResult, judge: SloJudge, plan: LoadPlan) -> dict[str, Any]:
    """Top-level summary.json of a multi-step run (see docs/load.md, "Result layout")."""
    entries = result.entries
    head_i = best_entry(entries)
    if result.findings.get("capacity_step") is not None:
        head_i = int(result.findings["capacity_step"])
    head = {k: v for k, v in entries[head_i].items() if k not in ("slo_reasons",)}
    out = {**head, "load": plan.describe(), "plan": plan.kind, "head_step": head_i, "steps": entries,
           "slo_judge": judge.describe() if judge.slo else None, "interrupted": result.interrupted}
    if "capacity" in result.findings:
        cap = dict(result.findings["capacity"])
        cap["slo"] = judge.describe()
        step = cap.get("step")
        cap["summary"] = None if step is None else {k: v for k, v in entries[step].items() if k != "slo_reasons"}
        out["capacity"] = cap
    for key in ("rates", "notes"):
        if key in result.findings:
            out[key] = result.findings[key]
    return out
