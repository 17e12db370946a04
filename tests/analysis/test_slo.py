"""The one SLO judge: percentiles over offered work, saturation and unfinished requests never pass."""

import pytest

from infermeter.analysis.results import Summary
from infermeter.analysis.slo import SloJudge, offered_percentile, percentile_key


def dist(count=200, **p):
    return {"count": count, "mean": None, "stdev": None, "min": None, "max": p.pop("max", None),
            **{k: p.get(k) for k in ("p50", "p90", "p95", "p99", "p999")}}


def summary(**kw):
    s = {"scheduled": 200, "completed": 200, "ttft_from_intended_ms": dist(p50=50.0, p90=80.0, p95=90.0, p99=100.0),
         "tpot_ms": dist(p50=15.0, p99=20.0), "e2e_from_intended_ms": dist(p99=900.0)}
    s.update(kw)
    return Summary.from_json(s)


def test_the_chosen_percentile_from_the_intended_send():
    judge = SloJudge(slo={"ttft_ms": 150.0, "tpot_ms": 25.0})
    assert judge(summary()) == (True, [])
    ok, why = judge(summary(ttft_from_intended_ms=dist(p50=10.0, p99=151.0)))
    assert not ok and why == ["ttft_ms p99 151.0 > 150"]
    assert SloJudge(slo={"ttft_ms": 150.0}, percentile=50)(summary(ttft_from_intended_ms=dist(p50=149.0, p99=900.0)))[0]
    assert SloJudge()(summary()) == (None, [])
    with pytest.raises(ValueError, match="99.9"):
        SloJudge(slo={"ttft_ms": 1}, percentile=97)


def test_unfinished_requests_count_as_missing_the_bound():
    # 2 of 200 cancelled: p95 over offered work is the completed p95.96 -> the nearest reported at or
    # above it, p99 (conservative)
    judge = SloJudge(slo={"ttft_ms": 95.0}, percentile=95, max_error_rate=0.05)
    ok, why = judge(summary(completed=198, cancelled=2, unfinished=2))
    assert not ok and why == ["ttft_ms p95 100.0 > 95 (= completed p99, 99.0% completed)"]
    # 2 % unfinished: no p99 over offered work is possible, whatever the completed latencies
    ok, why = SloJudge(slo={"ttft_ms": 1e9}, max_error_rate=0.05)(summary(completed=196, cancelled=4, unfinished=4))
    assert not ok and why == ["ttft_ms p99 over offered work: 98.0% of the scheduled requests completed"]
    # and past max_error_rate they fail on their own
    ok, why = SloJudge(slo={"ttft_ms": 1e9}, percentile=50)(summary(completed=190, cancelled=10, unfinished=10))
    assert why == ["failed or unfinished 5.0% of 200 scheduled > 1.0%"]


def test_saturated_invalid_and_empty_runs_never_meet_it():
    judge = SloJudge(slo={"ttft_ms": 1e9})
    sat = summary(saturated=True, saturation={"saturated": True, "evidence": ["completed 3.3 req/s of 10 offered (33%)"]})
    assert judge(sat) == (False, ["saturated: completed 3.3 req/s of 10 offered (33%)"])
    bad = summary(valid=False, invalid_reasons=["schedule_lag: p99 ..."])
    assert judge(bad) == (False, ["invalid: schedule_lag: p99 ..."])
    none = summary(completed=0, failed=200, ttft_from_intended_ms=dist(count=0))
    assert judge(none)[1][:2] == ["no request completed", "failed or unfinished 100.0% of 200 scheduled > 1.0%"]


def test_a_percentile_on_too_few_samples_cannot_show_the_slo_is_met():
    few = summary(scheduled=40, completed=40, ttft_from_intended_ms=dist(count=40, p50=10.0, p90=12.0, p95=13.0))
    ok, why = SloJudge(slo={"ttft_ms": 500.0})(few)
    assert not ok and why == ["ttft_ms p99 over offered work: p99 needs >= 100 samples, has 40"]
    assert SloJudge(slo={"ttft_ms": 500.0}, percentile=90)(few) == (True, [])


def test_one_token_outputs_have_no_tpot_to_break():
    one = summary(tpot_ms=dist(count=0))
    assert SloJudge(slo={"tpot_ms": 1.0})(one) == (True, [])


def test_offered_percentile_and_percentile_keys():
    d = Summary.from_json({"ttft_ms": dist(p50=1.0, p90=2.0, p95=3.0, p99=4.0, p999=5.0, max=6.0)}).ttft_ms
    assert offered_percentile(d, 50.0, 1.0) == (1.0, "p50")
    assert offered_percentile(d, 90.0, 0.95) == (3.0, "p95")  # level 94.7 -> p95, the next one reported
    assert offered_percentile(d, 99.0, 0.9915) == (5.0, "p999")  # level 99.85
    assert offered_percentile(d, 99.0, 0.9905) == (6.0, "max")  # level 99.95: only the maximum is above it
    assert offered_percentile(d, 99.0, 0.98) == (None, None)  # level 101: impossible
    assert [percentile_key(x) for x in (99, "p99", "99.9", "p999", "p99.9", 50.0)] == ["p99", "p99", "p999", "p999",
                                                                                       "p999", "p50"]
