"""Steady-state SLO capacity: steps sized by duration, the step-doubling convergence check, the bracket as data."""

from __future__ import annotations

from typing import Any, Callable

from infermeter.analysis.results import Summary
from infermeter.study.config import LoadPlan, Slo
from infermeter.study.saturation import ARRIVAL, Steady
from infermeter.study.sweep import StepOutcome, min_completions, plan_steps, search_result

SAT_RPS = 10.0
E2E_S = 2.0


def _json(e2e_s: float = E2E_S) -> dict[str, Any]:
    return {"valid": True, "invalid_reasons": [], "completed": 100, "error_rate": 0.0,
            "e2e_ms": {"count": 100, "mean": e2e_s * 1000.0}}


def _summary(e2e_s: float = E2E_S) -> Summary:
    return Summary.from_json(_json(e2e_s))


def _rates(rps: float, method: str = "steady window") -> Steady:
    return Steady(rps, rps * 100, rps * 10, rps * 110, 0.0, 10.0, method)


def run(plan: LoadPlan, slo: Slo, meets: Callable[[float, int], bool], sat_meets: bool = False,
        sync_meets: bool = True) -> list[StepOutcome]:
    """Drive the planner against a server that meets the SLO at ``rate`` with steps of ``requests`` when
    ``meets(rate, requests)``."""
    gen = plan_steps(plan, slo, default_concurrency=64)
    spec = next(gen)
    outs: list[StepOutcome] = []
    while True:
        if spec.kind == "saturation":
            o = StepOutcome(spec, _summary(), _rates(SAT_RPS), meets_slo=sat_meets)
        elif spec.kind == "rate":
            o = StepOutcome(spec, _summary(), _rates(spec.rate or 0.0, ARRIVAL),
                            meets_slo=meets(spec.rate or 0.0, spec.requests))
        else:
            o = StepOutcome(spec, Summary.from_json({**_json(), "request_throughput": 0.5}), None, meets_slo=sync_meets)
        outs.append(o)
        try:
            spec = gen.send(o)
        except StopIteration:
            return outs


SLO = Slo(ttft_ms=500, percentile="p95")


def test_completions_needed_for_the_percentile() -> None:
    assert min_completions(Slo(percentile="p95")) == 400
    assert min_completions(Slo(percentile="p99")) == 2000
    assert min_completions(Slo(percentile="p50")) == 40


def test_open_loop_steps_are_sized_by_duration_with_a_floor_for_the_percentile() -> None:
    plan = LoadPlan(rate_fractions=(0.3, 0.9), refine=0, step_e2e=40)
    outs = run(plan, SLO, lambda r, n: r <= 5.0)
    rate = [o.spec for o in outs if o.spec.kind == "rate" and o.spec.stage == 0]
    # 0.3 x 10 req/s x 40 E2E of 2 s = 240 < 400 (the p95 floor); 9 req/s x 80 s = 720
    assert [s.requests for s in rate] == [400, 720]
    fixed = run(LoadPlan(rate_fractions=(0.3, 0.9), refine=0, requests=50), SLO, lambda r, n: r <= 5.0)
    # fixed counts stay fixed; the convergence check doubles them (0.3 x 10 req/s passed: checked at 100)
    assert [(o.spec.requests, o.spec.stage) for o in fixed if o.spec.kind == "rate"] == [(50, 0), (50, 0), (100, 1)]
    off = run(LoadPlan(rate_fractions=(0.3, 0.9), refine=0, requests=50, converge=False), SLO, lambda r, n: r <= 5.0)
    assert [o.spec.requests for o in off if o.spec.kind == "rate"] == [50, 50]


def transient(c_inf: float, a: float) -> Callable[[float, int], bool]:
    """Short steps end before the queue builds: the apparent capacity falls with the step length."""
    return lambda rate, n: rate <= c_inf * (1 + a / n)


def test_a_capacity_that_moves_when_steps_double_is_lengthened_and_re_searched() -> None:
    plan = LoadPlan(rate_fractions=(0.3, 0.6, 0.9), step_e2e=5, tolerance=0.05, precision=0.03, max_doublings=4)
    outs = run(plan, SLO, transient(5.0, 200.0))
    res = search_result(outs, plan, SLO)
    first = res["stages"][0]["capacity_rps"]
    assert len(res["stages"]) >= 2 and first > res["value"]  # it moved down and was re-searched
    assert "moved" in res["note"] and res["converged"] is True and res["moved"] <= 0.05 + 1e-9
    assert res["status"] == "bracketed" and res["low"] < res["high"] <= res["low"] * 1.03 + 1e-9
    # what it settled on is what steps of that length give (the server's answer at that length)
    n = res["step_requests"]
    assert transient(5.0, 200.0)(res["low"], n) and not transient(5.0, 200.0)(res["high"], n)
    # a capacity that does not depend on the step length is checked once and holds
    steady = run(plan, SLO, lambda r, n: r <= 5.0)
    r2 = search_result(steady, plan, SLO)
    assert r2["converged"] is True and len(r2["stages"]) == 2 and r2["stages"][1]["steps"] == 1 and r2["moved"] == 0.0


def test_a_capacity_still_moving_after_the_last_doubling_is_not_converged() -> None:
    plan = LoadPlan(rate_fractions=(0.3, 0.6, 0.9), step_e2e=5, max_doublings=1)
    outs = run(plan, SLO, lambda r, n: r <= 7.0 * (400 / n) ** 0.5)  # halves... every 4x the length
    res = search_result(outs, plan, SLO)
    assert res["converged"] is False and "beyond the 5% tolerance" in res["note"]


def test_the_bracket_status_says_what_the_search_established() -> None:
    plan = LoadPlan(rate_fractions=(0.3, 0.6, 0.9), requests=100)
    assert search_result(run(plan, SLO, lambda r, n: True, sat_meets=True), plan, SLO)["status"] == "lower_bound"
    outs = run(plan, SLO, lambda r, n: False)
    none = search_result(outs, plan, SLO)
    lowest = min(o.spec.rate for o in outs if o.spec.kind == "rate")
    assert lowest < 3.0  # it searched below the lowest fraction
    assert none["status"] == "upper_bound" and none["value"] is None and none["high"] == lowest
    assert "only the one-at-a-time step met it" in none["note"]
    mid = search_result(run(plan, SLO, lambda r, n: r <= 5.0), plan, SLO)
    assert mid["status"] == "bracketed" and mid["converged"] is True and mid["tolerance"] == 0.05
    assert mid["low"] <= 5.0 < mid["high"]
    # fixed 100-request steps at ~5 req/s of 2 s requests last ~20 E2E times, fewer than step_e2e: it says so
    assert abs(mid["step_e2e_times"] - mid["step_requests"] / mid["low"] / E2E_S) < 1e-9
    assert mid["step_e2e_times"] < 40 and "fewer than step_e2e" in mid["note"]
    off = plan.model_copy(update={"converge": False})
    unchecked = search_result(run(off, SLO, lambda r, n: r <= 5.0), off, SLO)
    assert unchecked["converged"] is None and unchecked["tolerance"] is None and len(unchecked["stages"]) == 1


LAG = {"code": "schedule_lag", "severity": "invalid", "message": "p99 schedule lag 50.0 ms > 10 ms (the client fell behind)"}


class LaggingTarget:
    """A fake endpoint whose client lags at the given (step, try) pairs; it never writes requests."""

    source = "measured"

    def __init__(self, lag: set[tuple[int, int]]) -> None:
        self.lag, self.tries = lag, {}

    def default_concurrency(self) -> int:
        return 4

    def describe(self) -> dict[str, Any]:
        return {"kind": "endpoint"}

    def run_step(self, spec: Any, profile: str, *, out_dir: Any, label: str) -> Summary:
        n = self.tries[spec.k] = self.tries.get(spec.k, 0) + 1
        out_dir.mkdir(parents=True)
        lagged = (spec.k, n) in self.lag
        return Summary.from_json({**_json(), "request_throughput": 1.0, "output_token_throughput": 10.0,
                "valid": not lagged, "findings": [LAG] if lagged else [],
                "invalid_reasons": [f"schedule_lag: {LAG['message']}"] if lagged else [],
                "ttft_from_intended_ms": {"count": 100, "p95": 50.0}})


def test_a_client_limited_study_step_is_retried_then_stops_the_cell(tmp_path: Any) -> None:
    from infermeter.study.cells import run_cell
    from infermeter.study.config import load_study_text

    study = load_study_text("model: llama-3.1-8b\nconfigurations: [h100-sxm]\nprofiles: [chat]\n"
                            "slo: {ttft_ms: 500}\n", "s.yaml")
    target = LaggingTarget({(0, 1), (1, 1), (1, 2)})  # step 0 lags once; step 1 (saturation) twice
    cell = run_cell(target, study, study.configurations[0], "chat", tmp_path / "cell")
    assert target.tries == {0: 2, 1: 2}  # nothing ran after the second lagging try
    assert (tmp_path / "cell" / "steps" / "0-client-limited").is_dir() and len(cell.steps) == 1
    assert cell.steps[0]["valid"] and "the search stopped at step 1" in cell.notes[0]
    assert "schedule_lag" in cell.capacity_search["stopped"]
    # the first step lagging twice leaves a row that says why, not a crash
    row = run_cell(LaggingTarget({(0, 1), (0, 2)}), study, study.configurations[0], "chat", tmp_path / "cell2")
    assert row.unavailable and "schedule_lag" in row.unavailable
