"""Multi-step plans: the SLO judge, the sweep and find-max generators, and the driver's result layout."""

import asyncio

import pytest

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge
from infermeter.load.search import FindMaxPlan, _drive
from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency
from infermeter.load.steps import Step, best_entry, plan_summary, run_plan
from infermeter.load.sweep import SweepPlan, rates_between


def dist(p99=None, p50=None):
    return {"count": 200, "p50": p50, "p90": None, "p95": None, "p99": p99, "p999": None}


def summary(**kw):
    s = {"valid": True, "invalid_reasons": [], "error_rate": 0.0, "scheduled": 200, "completed": 200,
         "ttft_from_intended_ms": dist(100.0),
         "tpot_ms": dist(20.0), "e2e_from_intended_ms": dist(900.0), "itl_ms": dist(19.0),
         "request_throughput": 1.0, "output_token_throughput": 10.0}
    s.update(kw)
    return Summary.from_json(s)


def test_sweep_rates_sit_strictly_between_the_two_measured_rates():
    assert rates_between(2.0, 10.0, 3) == [4.0, 6.0, 8.0]
    gen = SweepPlan(rates=3, arrival="poisson", throughput_concurrency=64).steps()
    first = next(gen)
    assert first.shape == ConstantConcurrency(concurrency=1) and first.name == "synchronous"
    top = gen.send({"request_throughput": 2.0})
    assert top.shape == ConstantConcurrency(concurrency=64)
    rates = [gen.send({"request_throughput": 10.0}).shape]
    rates += [gen.send({}).shape for _ in range(2)]
    assert rates == [ConstantArrivalRate(rate_per_s=r, arrival="poisson") for r in (4.0, 6.0, 8.0)]
    with pytest.raises(StopIteration) as end:
        gen.send({})
    assert end.value.value == {"rates": [4.0, 6.0, 8.0]}


def test_sweep_without_headroom_ends_with_a_note():
    gen = SweepPlan(rates=3).steps()
    next(gen)
    gen.send({"request_throughput": 5.0})
    with pytest.raises(StopIteration) as end:
        gen.send({"request_throughput": 5.0})
    assert end.value.value["rates"] == [] and "not above synchronous" in end.value.value["notes"][0]


def values(steps):
    return [s.concurrency if s.concurrency is not None and s.name != "synchronous" else s.offered_rate for s in steps]


def test_find_max_on_concurrency_brackets_then_bisects_to_one_stream():
    steps = _drive(FindMaxPlan(dimension="concurrency").steps(), lambda c: c <= 11)
    assert values(steps) == [1, 2, 4, 8, 16, 12, 10, 11]


def test_find_max_on_rate_stops_at_the_resolution():
    plan = FindMaxPlan(dimension="rate", start=10.0, resolution=0.05, max_steps=30)
    steps = _drive(plan.steps(), lambda r: r <= 37.0)
    rates = values(steps)
    assert rates[:4] == [10.0, 20.0, 40.0, 30.0]
    good = max(r for r in rates if r <= 37.0)
    bad = min(r for r in rates if r > 37.0)
    assert bad - good <= 0.05 * good and good <= 37.0 < bad


def test_find_max_halves_when_the_start_already_breaks_and_respects_the_cap():
    assert values(_drive(FindMaxPlan(dimension="rate", start=16.0).steps(), lambda r: r <= 5.0))[:4] == [16.0, 8.0, 4.0, 6.0]
    capped = _drive(FindMaxPlan(dimension="concurrency", max_value=6).steps(), lambda c: True)
    assert values(capped) == [1, 2, 4, 6]


def test_find_max_rate_without_start_measures_one_stream_first():
    steps = _drive(FindMaxPlan(dimension="rate", max_steps=3).steps(), lambda r: True)
    assert steps[0].name == "synchronous" and steps[0].shape == ConstantConcurrency(concurrency=1)
    assert values(steps)[1:] == [1.0, 2.0]  # _drive's synchronous step reports 1 req/s


def fake_measure(meets_at_most):
    async def measure(k, step):
        x = step.concurrency
        return summary(request_throughput=float(x), output_token_throughput=10.0 * x,
                       ttft_from_intended_ms=dist(50.0 if x <= meets_at_most else 500.0))
    return measure


def test_run_plan_result_layout_with_capacity():
    plan = FindMaxPlan(dimension="concurrency", max_steps=8)
    judge = SloJudge(slo={"ttft_ms": 100.0})
    result = asyncio.run(run_plan(plan, fake_measure(5), judge))
    s = plan_summary(result, judge, plan)
    assert [e["concurrency"] for e in s["steps"]] == [1, 2, 4, 8, 6, 5]
    assert [e["meets_slo"] for e in s["steps"]] == [True, True, True, False, False, True]
    assert [e["step_dir"] for e in s["steps"]] == [f"steps/{k}" for k in range(6)]
    cap = s["capacity"]
    assert cap["concurrency"] == 5 and cap["bracket"] == [5, 6] and cap["converged"] and cap["step"] == 5
    assert cap["slo"] == {"limits": {"ttft_ms": 100.0}, "percentile": 99.0, "max_error_rate": 0.01}
    assert cap["summary"]["request_throughput"] == 5.0
    # the top level carries the capacity step's own keys
    assert s["head_step"] == 5 and s["request_throughput"] == 5.0 and s["plan"] == "find-max"


def test_run_plan_stops_when_asked():
    stop = {"now": False}

    async def measure(k, step):
        stop["now"] = k == 1
        return summary()

    result = asyncio.run(run_plan(SweepPlan(rates=4), measure, SloJudge(), should_stop=lambda: stop["now"]))
    assert result.interrupted and len(result.entries) == 2


def test_best_entry_prefers_valid_steps_meeting_the_slo():
    entries = [{"valid": True, "meets_slo": True, "output_token_throughput": 5.0},
               {"valid": True, "meets_slo": False, "output_token_throughput": 50.0},
               {"valid": False, "meets_slo": True, "output_token_throughput": 40.0},
               {"valid": True, "meets_slo": True, "output_token_throughput": 9.0}]
    assert best_entry(entries) == 3
    assert best_entry([{"valid": True, "meets_slo": None, "output_token_throughput": t} for t in (3.0, 7.0, 5.0)]) == 1


def test_step_reports_its_plan_columns():
    assert Step(ConstantArrivalRate(rate_per_s=3.5), "rate").offered_rate == 3.5
    assert Step(ConstantArrivalRate(rate_per_s=3.5), "rate").concurrency is None
    assert Step(ConstantConcurrency(concurrency=7), "x").concurrency == 7
