"""The load steps of one study cell, planned one at a time from the results so far.

:func:`plan_steps` is a generator: it yields the next :class:`StepSpec`, receives the
:class:`StepOutcome` of running it, and decides the next step (so the same plan drives the twin
and a measured endpoint)::

    gen = plan_steps(plan, slo, default_concurrency=256)
    spec = next(gen)
    while True:
        outcome = run(spec)                  # simulate or measure, then judge
        try:
            spec = gen.send(outcome)
        except StopIteration:
            break

A ``sweep`` runs: one request at a time (``synchronous``), a closed loop at the saturation
concurrency (``saturation``: its throughput is the steady-window figure of
:mod:`infermeter.study.saturation`), open-loop rates at ``rate_fractions`` of the saturation
request rate (``rate``), then ``refine`` bisection steps between the highest fraction meeting
the SLO and the lowest missing it, until that bracket is narrower than ``precision`` (relative to
the rate meeting the SLO; :func:`knee_bracket` reports it for the capacity). Open-loop steps
realize their label: with ``exact_rate`` each step's schedule is scaled to its exact target mean
(:class:`~infermeter.load.shapes.ConstantArrivalRate` ``exact_over``), so the offered rate is the
planned one. A synchronous step that fails only for too few samples (a p95 needs 20) does not
stop the search. Whether a step meets the SLO is the one judge's call
(:class:`infermeter.analysis.slo.SloJudge`, shared with ``run --load sweep``): judged on the
offered work, so a saturated step, or one whose requests did not finish, never meets it; with no
latency limits a step "meets" the SLO when the run is sound (valid, not saturated, errors within
``max_error_rate``). :func:`capacity_step` is the step meeting the SLO with the highest request
throughput: "the highest load meeting the SLO".
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge
from infermeter.study.config import FIXED_RATE_REQUESTS, LoadPlan, Slo
from infermeter.study.saturation import Steady

StepKind = Literal["synchronous", "saturation", "rate"]


@dataclass(frozen=True)
class StepSpec:
    k: int
    kind: StepKind
    requests: int
    warmup: int = 0
    concurrency: int | None = None
    rate: float | None = None
    fraction: float | None = None  # rate as a share of the saturation request rate
    stage: int = 0  # open-loop steps: how many times the step length was doubled (the convergence check)

    def describe(self) -> str:
        if self.kind == "rate":
            frac = f" ({self.fraction:.3g} x saturation)" if self.fraction is not None else ""
            longer = f", {self.requests} requests, length x{2 ** self.stage}" if self.stage else ""
            return f"{self.rate:.4g} req/s{frac}{longer}"
        return f"concurrency {self.concurrency}" + (" (one at a time)" if self.kind == "synchronous" else "")


@dataclass(frozen=True)
class StepOutcome:
    spec: StepSpec
    summary: Summary
    throughput: Steady | None = None  # steady window (saturation) or arrival rate (open loop)
    meets_slo: bool = False
    slo_failures: tuple[str, ...] = ()
    run_dir: str | None = None

    @property
    def inconclusive(self) -> bool:
        """Missed the SLO only because a percentile had too few samples (not a limit broken)."""
        return bool(self.slo_failures) and all(too_few_samples(w) for w in self.slo_failures)

    def rates(self) -> dict[str, float | None]:
        """Throughput of the step: its steady-window or arrival-rate figure, else the run summary."""
        if self.throughput is not None:
            s = self.throughput
            return {"requests_per_s": s.requests_per_s, "input_tokens_per_s": s.input_tokens_per_s,
                    "output_tokens_per_s": s.output_tokens_per_s, "total_tokens_per_s": s.total_tokens_per_s}
        m = self.summary
        return {"requests_per_s": m.request_throughput, "input_tokens_per_s": m.input_token_throughput,
                "output_tokens_per_s": m.output_token_throughput, "total_tokens_per_s": m.total_token_throughput}

    @property
    def offered_rate(self) -> float | None:
        """Open loop: the schedule's realized rate (req/s) when known, else the planned one."""
        if self.spec.kind != "rate":
            return None
        realized = self.throughput.schedule_rate_per_s if self.throughput is not None else None
        return realized if realized is not None else self.spec.rate

    def to_json(self) -> dict[str, Any]:
        """The step's entry in the cell's ``summary.json`` ``steps`` list (sweep layout)."""
        r = self.rates()
        s = self.summary
        return {
            "k": self.spec.k, "dir": f"steps/{self.spec.k}", "step_dir": f"steps/{self.spec.k}", "step": self.spec.kind,
            "kind": self.spec.kind, "describe": self.spec.describe(),
            "concurrency": self.spec.concurrency, "offered_rate": self.offered_rate, "target_rate": self.spec.rate,
            "fraction": self.spec.fraction,
            "requests": self.spec.requests, "stage": self.spec.stage, "meets_slo": self.meets_slo, "slo_failures": list(self.slo_failures),
            "slo_reasons": list(self.slo_failures),
            "request_throughput": r["requests_per_s"], "input_token_throughput": r["input_tokens_per_s"],
            "output_token_throughput": r["output_tokens_per_s"], "total_token_throughput": r["total_tokens_per_s"],
            "throughput_method": self.throughput.method if self.throughput else "whole run",
            "sustained_rps": r["requests_per_s"],  # analysis.sustained: the same figure, named once
            "sustained_basis": self.throughput.method if self.throughput else "whole run",
            "goodput": s.goodput, "error_rate": s.error_rate, "valid": s.valid,
            "invalid_reasons": list(s.invalid_reasons), "saturated": s.saturated,
            "unfinished": s.unfinished,
            "schedule_rate": self.throughput.schedule_rate_per_s if self.throughput else None,
            "send_rate": self.throughput.send_rate_per_s if self.throughput else None,
            **{f"{k}_p{p}": s.distribution(k)[f"p{p}"] for k in ("ttft_ms", "tpot_ms", "e2e_ms") for p in (50, 95, 99)},
        }


def too_few_samples(reason: str) -> bool:
    """Whether an SLO failure reason says a percentile had too few samples (nothing was broken)."""
    return "needs >=" in reason or reason.endswith("no samples")


def judge(summary: Summary, slo: Slo, throughput: Steady | None = None) -> tuple[bool, tuple[str, ...]]:
    """(meets the SLO, why not) for one step's summary; see the module docstring."""
    j = SloJudge(slo=slo.limits, percentile=slo.percentile, max_error_rate=slo.max_error_rate)
    ok, why = j(summary) if slo.limits else (None, j.health(summary))
    return (not why) if ok is None else bool(ok), tuple(why)


def min_completions(slo: Slo) -> int:
    """Completions a step needs for its SLO percentile p to rest on 20 requests beyond it: ``ceil(20 / (1 - p))``
    (p95: 400, p99: 2,000)."""
    p = float(slo.percentile.removeprefix("p")) / 100.0
    return math.ceil(20.0 / (1.0 - p) - 1e-9)


class _Sizer:
    """Requests of an open-loop step (see the module docstring, "Steady state")."""

    def __init__(self, plan: LoadPlan, slo: Slo) -> None:
        self.plan, self.floor = plan, min_completions(slo)
        self.e2e_s = 0.0

    def see(self, o: StepOutcome) -> None:
        """E2E basis: the longest mean E2E (from the send) of the synchronous step and the steps meeting the SLO."""
        if o.spec.kind == "synchronous" or (o.spec.kind == "rate" and o.meets_slo):
            mean = o.summary.e2e_ms.mean
            if mean is not None and math.isfinite(mean):
                self.e2e_s = max(self.e2e_s, float(mean) / 1000.0)

    def requests(self, rate: float, stage: int) -> int:
        p = self.plan
        if p.requests is not None:
            base = p.requests
        else:
            base = max(self.floor, math.ceil(rate * p.step_e2e * self.e2e_s), p.warmup + 2)
        return int(min(base * 2 ** stage, max(p.max_step_requests, p.requests or 0)))


def plan_steps(plan: LoadPlan, slo: Slo, default_concurrency: int) -> Generator[StepSpec, StepOutcome, None]:
    """Yield step specs; receive each outcome (see the module docstring)."""
    k = 0
    if plan.kind == "rate":
        yield StepSpec(k, "rate", plan.requests or FIXED_RATE_REQUESTS, plan.warmup, rate=plan.rate)
        return
    conc = plan.concurrency or default_concurrency
    sat_requests = plan.saturation_requests or 3 * conc
    if plan.kind == "concurrency":
        yield StepSpec(k, "saturation", sat_requests, plan.warmup, concurrency=conc)
        return
    size = _Sizer(plan, slo)
    sync = yield StepSpec(k, "synchronous", plan.sync_requests, 0, concurrency=1)
    size.see(sync)
    k += 1
    sat = yield StepSpec(k, "saturation", sat_requests, plan.warmup, concurrency=conc)
    k += 1
    top = sat.rates()["requests_per_s"] or 0.0
    if not top > 0:
        return
    passed: dict[float, bool] = {}

    def step(f: float, stage: int) -> StepSpec:
        return StepSpec(k, "rate", size.requests(f * top, stage), plan.warmup, rate=f * top, fraction=f, stage=stage)

    for f in plan.rate_fractions:
        out = yield step(f, 0)
        size.see(out)
        k += 1
        passed[f] = out.meets_slo
    if not slo.limits:
        return  # nothing to search for
    if not sync.meets_slo and not sync.inconclusive and not any(passed.values()):
        return  # the SLO fails even one request at a time: no load meets it
    sat_meets = sat.meets_slo
    for _ in range(plan.refine):
        lo, hi = _bracket(passed, sat_meets)
        if hi is None or (lo > 0 and hi / lo - 1 <= plan.precision) or hi - lo < 1e-4:
            break
        mid = (lo + hi) / 2
        out = yield step(mid, 0)
        size.see(out)
        k += 1
        passed[mid] = out.meets_slo
    if not plan.converges:
        return
    # The convergence check: the capacity must hold when the steps are twice as long. A load that
    # missed the SLO with shorter steps is taken to miss it with longer ones (queues only grow).
    for stage in range(1, plan.max_doublings + 1):
        lo, hi = _bracket(passed, sat_meets)
        if not lo > 0 or size.requests(lo * top, stage) <= size.requests(lo * top, stage - 1):
            return  # nothing met the SLO to check, or the steps are at max_step_requests already
        out = yield step(lo, stage)
        size.see(out)
        k += 1
        if out.meets_slo:
            return  # holds at twice the length: converged
        # it moved: search below it with the longer steps, down by tolerance x 1, 2, 4 ... then bisect
        failed = {f: False for f, ok in passed.items() if not ok and f >= lo}
        now: dict[float, bool] = {**failed, lo: False}
        probe = lo * (1 - plan.tolerance)
        step_down = plan.tolerance
        while probe > 0.02:
            out = yield step(probe, stage)
            size.see(out)
            k += 1
            now[probe] = out.meets_slo
            if out.meets_slo:
                break
            step_down *= 2
            probe = lo * (1 - step_down)
        if not any(now.values()):
            return  # no load met the SLO with the longer steps
        for _ in range(plan.refine):
            a, b = _bracket(now, False)
            if b is None or b / a - 1 <= plan.precision or b - a < 1e-4:
                break
            mid = (a + b) / 2
            out = yield step(mid, stage)
            size.see(out)
            k += 1
            now[mid] = out.meets_slo
        new_lo = max(f for f, ok in now.items() if ok)
        passed = now
        if (lo - new_lo) / lo <= plan.tolerance:
            return  # moved, but within the tolerance: converged at this length


def _bracket(passed: dict[float, bool], saturation_meets: bool) -> tuple[float, float | None]:
    """(highest fraction meeting the SLO or 0, lowest fraction above it missing the SLO or None)."""
    lo = max((f for f, ok in passed.items() if ok), default=0.0)
    above = [f for f, ok in passed.items() if not ok and f > lo]
    if above:
        return lo, min(above)
    return lo, (None if saturation_meets else 1.0)


def _final_stage(outcomes: Sequence[StepOutcome]) -> int:
    return max((o.spec.stage for o in outcomes if o.spec.kind == "rate"), default=0)


def capacity_step(outcomes: Sequence[StepOutcome]) -> StepOutcome | None:
    """The step meeting the SLO with the highest request throughput (ties: the earlier step). Open-loop
    steps count only at the longest step length tried (a shorter step's pass was checked and superseded)."""
    last = _final_stage(outcomes)
    ok = [o for o in outcomes if o.meets_slo and (o.rates()["requests_per_s"] or 0) > 0
          and (o.spec.kind != "rate" or o.spec.stage == last)]
    if not ok:
        return None
    return max(ok, key=lambda o: (o.rates()["requests_per_s"] or 0.0, -o.spec.k))


def knee_bracket(outcomes: Sequence[StepOutcome]) -> tuple[float, float | None] | None:
    """(requests/s of the capacity step, lowest offered requests/s above it that missed the SLO) — the
    SLO edge lies between them; None without a capacity step. The upper end is None when nothing
    above the capacity step missed (the closed-loop saturation step met the SLO). A load that missed
    with shorter steps counts as missing with longer ones."""
    cap = capacity_step(outcomes)
    if cap is None:
        return None
    lo = cap.offered_rate or cap.rates()["requests_per_s"] or 0.0
    missed = [o.offered_rate if o.spec.kind == "rate" else o.rates()["requests_per_s"]
              for o in outcomes if not o.meets_slo and o.spec.kind in ("rate", "saturation")]
    above = [x for x in missed if x is not None and x > lo]
    return lo, (min(above) if above else None)


def search_result(outcomes: Sequence[StepOutcome], plan: LoadPlan, slo: Slo) -> dict[str, Any]:
    """What the SLO-capacity search established, as data (the cell's ``capacity_search``, and the same keys
    in its ``capacity`` block):

    - ``value``: the capacity in requests/s (the capacity step's sustained rate), None when no step met it;
    - ``status``: ``bracketed`` (a load meeting the SLO and a higher one missing it, ``low``/``high`` within
      ``precision``), ``lower_bound`` (the highest load tried met the SLO: the capacity is at least ``low``),
      ``upper_bound`` (no open-loop load tried met it: the capacity is below ``high``; ``low`` is the
      one-at-a-time step's rate when that met it), or ``none`` (no SLO to search for);
    - ``low``, ``high`` (offered requests/s), ``precision`` (``high / low - 1``);
    - ``step_requests``: requests of the capacity step, ``step_e2e_times``: how many E2E times it lasted
      (a note when fewer than ``step_e2e``); ``converged``: the capacity moved at most
      ``tolerance`` when the step length doubled (None when not checked); ``stages``: the capacity found
      at each step length; ``note``: what the search says about itself.
    """
    last = _final_stage(outcomes)
    cap = capacity_step(outcomes)
    bracket = knee_bracket(outcomes)
    lo, hi = bracket if bracket else (None, None)
    rate_steps = [o for o in outcomes if o.spec.kind == "rate"]
    stages: list[dict[str, Any]] = []
    for stage in range(last + 1):
        at = [o for o in rate_steps if o.spec.stage == stage]
        best = max((o for o in at if o.meets_slo), key=lambda o: o.spec.rate or 0.0, default=None)
        stages.append({"stage": stage, "step_requests": max((o.spec.requests for o in at), default=None),
                       "capacity_rps": best.spec.rate if best else None, "steps": len(at)})
    notes: list[str] = []
    if not slo.limits:
        status = "none"
    elif cap is None or cap.spec.kind == "synchronous":
        status = "upper_bound"
        failed = [o.offered_rate for o in rate_steps if not o.meets_slo and o.spec.stage == last and o.offered_rate]
        hi = min(failed) if failed else None
        lo = cap.rates()["requests_per_s"] if cap is not None else None
        notes.append("no open-loop load tried met the SLO" + (f"; the lowest, {hi:.4g} req/s, missed it" if hi else "")
                     + ("; only the one-at-a-time step met it" if cap is not None else ""))
    elif hi is None:
        status = "lower_bound"
        notes.append("the highest load tried met the SLO: the capacity is at least this")
    else:
        status = "bracketed"
    converged: bool | None = None
    moved: float | None = None
    if plan.converges and slo.limits and status != "upper_bound" and cap is not None:
        prev = stages[-2]["capacity_rps"] if last >= 1 else None
        cur = stages[-1]["capacity_rps"]
        if last == 0:
            converged = False
            notes.append("not checked with longer steps (already at max_step_requests)"
                         if cap.spec.kind == "rate" and cap.spec.requests >= plan.max_step_requests
                         else "not checked with longer steps")
        elif prev and cur:
            moved = 1 - cur / prev
            converged = moved <= plan.tolerance + 1e-9
            if moved > 1e-9:
                notes.append(f"the capacity moved {moved:.1%} when the steps doubled to {stages[-1]['step_requests']:,} "
                             f"requests" + ("" if converged else f" (beyond the {plan.tolerance:.0%} tolerance)"))
            if last > 1:
                notes.append(f"steps lengthened {last} times (x{2 ** last})"
                             + (" before the capacity held" if converged else ""))
        else:
            converged = False
    e2e_times = None
    if cap is not None and cap.spec.kind == "rate" and cap.spec.rate:
        size = _Sizer(plan, slo)
        for o in outcomes:
            size.see(o)
        if size.e2e_s > 0:
            e2e_times = cap.spec.requests / cap.spec.rate / size.e2e_s
            if e2e_times < plan.step_e2e:
                notes.append(f"its steps last {e2e_times:.0f} E2E times (fewer than step_e2e {plan.step_e2e:g}): "
                             "the queue may not have reached steady state; leave requests unset to size steps by duration")
    return {"value": cap.rates()["requests_per_s"] if cap is not None and status != "upper_bound" else None,
            "status": status, "low": lo, "high": hi,
            "precision": (hi / lo - 1) if lo and hi else None,
            "step_requests": cap.spec.requests if cap is not None else None, "step_e2e_times": e2e_times,
            "converged": converged, "tolerance": plan.tolerance if plan.converges else None, "moved": moved,
            "stages": stages, "note": "; ".join(notes) or None}


def saturation_step(outcomes: Sequence[StepOutcome]) -> StepOutcome | None:
    """The closed-loop saturation step, else (fixed-rate plans) the step with the highest throughput."""
    for o in outcomes:
        if o.spec.kind == "saturation":
            return o
    return max(outcomes, key=lambda o: o.rates()["requests_per_s"] or 0.0, default=None)

