"""A step the client could not apply is never the server's answer; ``cap_held`` only when the cap bound."""

import asyncio
import time

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge
from infermeter.analysis.verdict import Facts, client_limited, judge
from infermeter.load.runner import Limits, Runner
from infermeter.load.search import FindMaxPlan
from infermeter.load.shapes import ConstantArrivalRate
from infermeter.load.steps import plan_summary, replay_plan, run_plan
from infermeter.load.sweep import SweepPlan
from infermeter.records.record import RequestRecord


def dist(p99):
    return {"count": 200, "p50": p99, "p90": p99, "p95": p99, "p99": p99, "p999": None}


LAG = {"code": "schedule_lag", "severity": "invalid", "message": "p99 schedule lag 80.0 ms > 10 ms (the client fell behind)"}


def summary(x, meets, lagged=False):
    return Summary.from_json({"valid": not lagged, "invalid_reasons": [f"{LAG['code']}: {LAG['message']}"] if lagged else [],
            "findings": [LAG] if lagged else [], "error_rate": 0.0, "scheduled": 200, "completed": 200,
            "ttft_from_intended_ms": dist(50.0 if meets else 500.0), "tpot_ms": dist(10.0),
            "e2e_from_intended_ms": dist(900.0), "itl_ms": dist(9.0),
            "request_throughput": float(x), "output_token_throughput": 10.0 * x})


def server(capacity, lag_at):
    """A fake server meeting the SLO up to ``capacity``; the client lags at the calls in ``lag_at``."""
    calls = []

    async def measure(k, step):
        x = step.concurrency if step.offered_rate is None else step.offered_rate
        calls.append(x)
        return summary(x, x <= capacity, lagged=len(calls) - 1 in lag_at)
    return measure, calls


JUDGE = SloJudge(slo={"ttft_ms": 100.0})


def test_client_limited_reads_client_codes_only():
    assert client_limited(summary(1, True, lagged=True)) == [f"schedule_lag: {LAG['message']}"]
    assert client_limited(summary(1, False)) == []
    assert client_limited(Summary(invalid_reasons=["no_completed: nothing", "cap_held: held 3"])) == ["cap_held: held 3"]


def test_a_lagged_step_is_retried_and_the_search_is_unchanged():
    plan = FindMaxPlan(dimension="concurrency", max_steps=8)
    clean, _ = server(5, lag_at=set())
    lagged, calls = server(5, lag_at={3})  # the first try at concurrency 8 lagged
    a = plan_summary(asyncio.run(run_plan(plan, clean, JUDGE)), JUDGE, plan)
    b = plan_summary(asyncio.run(run_plan(plan, lagged, JUDGE)), JUDGE, plan)
    assert calls == [1, 2, 4, 8, 8, 6, 5]
    assert b["capacity"]["concurrency"] == a["capacity"]["concurrency"] == 5
    assert b["capacity"]["bracket"] == a["capacity"]["bracket"] == [5, 6]
    # the capacity step index points at the entry that measured it
    assert b["steps"][b["capacity"]["step"]]["concurrency"] == 5 and b["capacity"]["step"] == 6
    assert b["steps"][3]["meets_slo"] is None and b["steps"][3]["retried"] and b["steps"][3]["client_limited"]
    assert "stopped" not in b


def test_a_step_lagging_twice_stops_the_search_with_the_reason():
    plan = FindMaxPlan(dimension="concurrency", max_steps=8)
    measure, calls = server(100, lag_at={3, 4})  # concurrency 8 lagged twice
    s = plan_summary(asyncio.run(run_plan(plan, measure, JUDGE)), JUDGE, plan)
    assert calls == [1, 2, 4, 8, 8]  # no lower load was tried after the client failed
    cap = s["capacity"]
    assert cap["concurrency"] == 4 and cap["bracket"] == [4, None] and cap["converged"] is False
    assert "schedule_lag" in cap["stopped"] and "step 4" in s["stopped"]
    assert not any(e["meets_slo"] is False for e in s["steps"])  # nothing was read as an SLO miss


def test_replay_applies_the_same_retry():
    plan = FindMaxPlan(dimension="concurrency", max_steps=8)
    sums = [summary(1, True), summary(2, True), summary(4, True), summary(8, True, lagged=True),
            summary(8, False), summary(6, False), summary(5, True)]
    r = replay_plan(plan, sums, JUDGE)
    assert not r.interrupted and r.findings["capacity"]["concurrency"] == 5 and r.findings["capacity"]["step"] == 6


def test_a_sweep_stops_with_the_reason():
    plan = SweepPlan(rates=3)
    measure, calls = server(100, lag_at={2, 3})
    r = asyncio.run(run_plan(plan, measure, JUDGE))
    assert len(calls) == 4 and "schedule_lag" in r.findings["stopped"]


# -- cap_held: only when the cap bound ------------------------------------------------------------

def run_open_loop(send, cap, n=40, rate=400.0):
    recs: list[RequestRecord] = []
    runner = Runner(send=send, specs=iter(range(n)), shape=ConstantArrivalRate(rate_per_s=rate, arrival="constant"),
                    limits=Limits(requests=n, max_concurrency=cap), clock=time.perf_counter, on_record=recs.append)
    stats = asyncio.run(runner.run())
    return stats, recs


def test_a_lagging_client_below_the_cap_is_not_cap_held():
    async def send(spec, rec):  # blocks the loop: the client, not the cap, falls behind
        rec.sent_at = time.perf_counter()
        time.sleep(0.02)
        rec.outcome = "ok"

    stats, recs = run_open_loop(send, cap=256)
    lag = max(r.sent_at - r.intended_at for r in recs)
    assert lag > 0.05  # the client did fall behind
    assert stats.max_in_flight < 256 and stats.cap_held == 0


def test_a_binding_cap_is_cap_held():
    async def send(spec, rec):
        rec.sent_at = time.perf_counter()
        await asyncio.sleep(0.05)
        rec.outcome = "ok"

    stats, _ = run_open_loop(send, cap=2)
    assert stats.max_in_flight == 2 and stats.cap_held > 0


def test_cap_held_makes_the_run_invalid_for_the_client():
    v = judge(Facts(open_loop=True, scheduled=10, completed=10, cap_held=3))
    codes = [f.code for f in v.findings if f.severity == "invalid"]
    assert codes == ["cap_held"] and client_limited(Summary(findings=v.findings))
