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

A step the *client* could not apply (``analysis.verdict.client_limited``) is never the server's
answer: :func:`run_plan` runs it once more, and stops the plan with the reason (``stopped``) when
the retry is client-limited too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge
from infermeter.analysis.sustained import sustained_rate
from infermeter.analysis.verdict import client_limited
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


MeasureStep = Callable[[int, Step], Awaitable[Summary]]


def step_entry(k: int, step: Step, summary: Summary, judge: SloJudge) -> dict[str, Any]:
    """A step's summary.json object plus the plan columns (its entry in ``steps``)."""
    ok, reasons = judge(summary)
    entry = {**summary.to_json(), "step": step.name, "offered_rate": step.offered_rate, "concurrency": step.concurrency,
             "meets_slo": ok, "slo_reasons": reasons, "step_dir": f"steps/{k}"}
    entry.pop("run_dir", None)
    entry["sustained_rps"], entry["sustained_basis"] = sustained_rate(entry)
    return entry


class ClientLimited(Exception):
    """Thrown into a plan's generator when a step stayed client-invalid after its retry: the search
    stops here (a plan may catch it and return what it established so far)."""


class _Driver:
    """Feeds step summaries to a plan. A step whose run says the *client* did not apply the load
    (``analysis.verdict.client_limited``: schedule lag, send rate, cap held, client limits) is not
    the server's answer: it is run once more (the next entry), and when the retry is client-limited
    too the plan is stopped with the reason (``findings["stopped"]``). Such entries have
    ``meets_slo: None`` and ``client_limited`` (the reasons); the plan never sees them. Plan step
    indices in the findings (``capacity_step``, ``capacity.step``) are mapped to entry indices."""

    def __init__(self, plan: LoadPlan, judge: SloJudge) -> None:
        self.gen = plan.steps()
        self.judge = judge
        self.entries: list[dict[str, Any]] = []
        self.accepted: list[int] = []  # entry index of the answer to each step the plan yielded
        self.step: Step = next(self.gen)
        self.retried = False
        self.findings: dict[str, Any] = {}

    def feed(self, summary: Summary) -> Step | None:
        """The next step to run (possibly this one again), or None when the plan is done."""
        k = len(self.entries)
        entry = step_entry(k, self.step, summary, self.judge)
        self.entries.append(entry)
        why = client_limited(summary)
        if why:
            entry["meets_slo"] = None  # not the server's answer
            entry["client_limited"] = why
            if not self.retried:
                self.retried = True
                entry["retried"] = True
                return self.step
            self._stop(k, why)
            return None
        self.retried = False
        self.accepted.append(k)
        try:
            self.step = self.gen.send(entry)
        except StopIteration as done:
            self.findings = self._remap(done.value or {})
            return None
        return self.step

    def _stop(self, k: int, why: list[str]) -> None:
        level = (f"{self.step.offered_rate:.4g} req/s" if self.step.offered_rate is not None
                 else f"concurrency {self.step.concurrency}")
        reason = (f"stopped at step {k} ({self.step.name}, {level}): the client could not apply the load, twice "
                  f"({'; '.join(why)}); the search did not read it as the server's answer")
        found: dict[str, Any] = {}
        try:
            self.gen.throw(ClientLimited(reason))
            self.gen.close()  # the plan went on: it still stops here
        except StopIteration as done:
            found = done.value or {}
        except ClientLimited:
            pass
        found = self._remap(found)
        found["stopped"] = reason
        found["notes"] = [*found.get("notes", []), reason]
        self.findings = found

    def _remap(self, findings: dict[str, Any]) -> dict[str, Any]:
        out = dict(findings)

        def entry_of(i: Any) -> Any:
            return self.accepted[i] if isinstance(i, int) and 0 <= i < len(self.accepted) else i

        if "capacity_step" in out:
            out["capacity_step"] = entry_of(out["capacity_step"])
        if isinstance(out.get("capacity"), dict):
            out["capacity"] = {**out["capacity"], "step": entry_of(out["capacity"].get("step"))}
        return out


async def run_plan(plan: LoadPlan, measure_step: MeasureStep, judge: SloJudge,
                   should_stop: Callable[[], bool] = lambda: False) -> PlanResult:
    """Run every step the plan yields; each entry is the step's summary plus the plan columns
    (client-limited steps are retried once, then the plan stops: :class:`_Driver`)."""
    d = _Driver(plan, judge)
    step: Step | None = d.step
    while step is not None:
        summary = await measure_step(len(d.entries), step)
        step = d.feed(summary)
        if should_stop():
            d.gen.close()
            return PlanResult(d.entries, {}, interrupted=True)
    return PlanResult(d.entries, d.findings)


def replay_plan(plan: LoadPlan, summaries: list[Summary], judge: SloJudge) -> PlanResult:
    """The plan's result from step summaries already on disk (``infermeter summarize`` of a plan run);
    ``interrupted`` when the plan would have run more steps."""
    d = _Driver(plan, judge)
    step: Step | None = d.step
    for summary in summaries:
        step = d.feed(summary)
        if step is None:
            return PlanResult(d.entries, d.findings)
    d.gen.close()
    return PlanResult(d.entries, {}, interrupted=True)


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
        # the sustained capacity (analysis.sustained): the capacity step's sustained rate, in requests/s
        cap["sustained_rps"] = None if step is None else entries[step].get("sustained_rps")
        out["capacity"] = cap
    for key in ("rates", "notes", "stopped"):
        if key in result.findings:
            out[key] = result.findings[key]
    return out
