"""The verdict on hand-made runs: saturation, unfinished requests, percentile floors, goodput bounds."""

import numpy as np
import pytest

from infermeter.analysis.accumulator import build_summary, exact_distribution
from infermeter.analysis.verdict import Facts, judge, trend
from infermeter.records.record import RequestRecord, records_to_table

OPEN = {"load": {"open_loop": True, "target_rate": 10.0, "limits": {"grace_s": 30.0}}}


def ok(i, intended, ttft, e2e, n=5, sent_delay=0.0):
    sent = intended + sent_delay
    first = sent + ttft
    times = [first + (e2e - ttft) * k / (n - 1) for k in range(n)] if n > 1 else [first]
    return RequestRecord(request_id=i, intended_at=intended, sent_at=sent, first_token_at=first, ended_at=sent + e2e,
                         chunk_times=times, chunk_tokens=[1] * n, prompt_tokens=10, completion_tokens=n,
                         stream_tokens=n, usage_source="server", finish_reason="length")


def test_exact_percentiles_and_stdev_by_hand():
    d = exact_distribution(np.arange(1.0, 1001.0))  # 1 .. 1000
    # numpy linear rule: p = 1 + (n - 1) q
    assert (d.p50, d.p90, d.p95, d.p99, d.p999) == pytest.approx((500.5, 900.1, 950.05, 990.01, 999.001))
    assert d.stdev == pytest.approx(288.6749902572095)  # population: sqrt((n^2 - 1) / 12)
    few = exact_distribution([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0])
    assert few.p90 == pytest.approx(10.9) and few.p95 is None and few.p99 is None and few.p999 is None
    assert few.missing_reason("p99") == "p99 needs >= 100 samples, has 12"


def test_goodput_with_each_slo_bound():
    recs = [ok(0, 0.0, 0.1, 0.5), ok(1, 1.0, 0.3, 0.5), ok(2, 2.0, 0.1, 2.0), ok(3, 3.0, 0.1, 0.2, n=1)]
    table = records_to_table(recs)
    dur = 4.0  # first intended 0 .. last end 4.0 (request 2)
    by = lambda slo: build_summary(table, run={"slo": slo}).goodput * dur  # noqa: E731 - requests meeting it
    assert by({"ttft_ms": 200}) == pytest.approx(3)  # request 1's 300 ms misses
    assert by({"e2e_ms": 1000}) == pytest.approx(3)  # request 2's 2 s misses
    # TPOT: (e2e - ttft) / (n - 1) = 100 ms, 50 ms, 475 ms; a one-token output has none and passes
    assert by({"tpot_ms": 120}) == pytest.approx(3)
    assert by({"ttft_ms": 200, "e2e_ms": 1000, "tpot_ms": 120}) == pytest.approx(2)


def test_cancelled_requests_count_against_goodput_and_attainment_not_validity():
    recs = [ok(i, i * 0.1, 0.05, 0.1) for i in range(20)]
    recs += [RequestRecord(request_id=20 + i, intended_at=2.0 + i * 0.1, sent_at=2.0 + i * 0.1, ended_at=40.0,
                           outcome="cancelled") for i in range(5)]
    s = build_summary(records_to_table(recs), run={**OPEN, "slo": {"ttft_ms": 500}})
    assert (s.scheduled, s.completed, s.cancelled, s.unfinished) == (25, 20, 5, 5)
    assert s.unfinished_rate == pytest.approx(0.2) and s.slo_attainment == pytest.approx(0.8)
    assert s.error_rate == 0.0 and s.valid  # the client did its job
    assert any(w.startswith("unfinished: 5 of 25 scheduled requests (20%)") and "--grace 30 s" in w for w in s.warnings)
    assert s.duration_s == pytest.approx(1.9 + 0.1)  # the cancelled do not stretch the window


def test_a_growing_queue_is_saturation_and_a_steady_one_is_not():
    # one request at a time, 0.3 s each, offered every 0.1 s: TTFT grows by 0.2 s per request
    grow = [ok(i, i * 0.1, 0.3 * (i + 1) - i * 0.1, 0.3 * (i + 1) - i * 0.1 + 0.01) for i in range(60)]
    s = build_summary(records_to_table(grow), run=OPEN)
    assert s.valid and s.saturated is True
    assert s.saturation.rate_ratio == pytest.approx(1 / 3, rel=0.05) and s.saturation.trend_p < 0.01
    assert s.saturation.latency_end_s > 5 * s.saturation.latency_start_s
    steady = [ok(i, i * 0.1, 0.05 + 0.01 * ((i * 7) % 5), 0.2) for i in range(60)]
    s2 = build_summary(records_to_table(steady), run=OPEN)
    assert s2.saturated is False and s2.saturation.evidence == ()
    closed = build_summary(records_to_table(grow), run={"load": {"open_loop": False}})
    assert closed.saturated is False and closed.saturation.basis.startswith("closed loop")


def test_too_few_requests_are_not_judged_for_saturation():
    s = build_summary(records_to_table([ok(i, i * 0.1, 0.05, 0.1) for i in range(8)]), run=OPEN)
    assert s.saturated is None and s.saturation.basis.startswith("not judged")


def test_trend_statistic():
    up = trend(tuple((float(t), float(t)) for t in range(8)), span_s=8.0)
    assert up["p"] < 0.001 and up["growth"] == pytest.approx(8.0)
    flat = trend(tuple((float(t), 1.0 + (0.1 if t % 2 else -0.1)) for t in range(8)), span_s=8.0)
    assert flat["p"] > 0.2


def test_queue_growth_alone_is_saturation():
    v = judge(Facts(open_loop=True, scheduled=50, completed=50, waiting_start=0.0, waiting_end=40.0))
    assert v.saturation.saturated and "waiting queue grew 0 -> 40" in v.saturation.evidence[0]


def test_latency_that_grows_with_the_prompts_is_not_saturation():
    # a chat whose later turns carry longer prompts: TTFT climbs 50 -> 300 ms over a 60 s run,
    # 0.004 s per second -- far below what a queue outgrowing its server adds
    recs = [ok(i, float(i), 0.05 + 0.25 * i / 59, 0.05 + 0.25 * i / 59 + 0.5) for i in range(60)]
    s = build_summary(records_to_table(recs), run={"load": {"open_loop": True}})
    assert s.saturation.trend_p < 0.01  # the trend is real...
    assert s.saturated is False  # ...but it is the workload, not a queue


def test_long_requests_at_the_edges_of_a_short_run_are_not_a_lost_rate():
    # 200 requests at 20 req/s (10 s) that last 0.5-4 s each: the completions span ~13.5 s, which is 74 % of
    # the offered rate if measured between the extreme completion times; the server kept up with every one
    rng = np.random.default_rng(5)
    e2e = rng.uniform(0.5, 4.0, 200)
    healthy = [ok(i, i / 20, 0.1, float(e2e[i])) for i in range(200)]
    s = build_summary(records_to_table(healthy), run={"load": {"open_loop": True, "target_rate": 20.0}})
    assert s.saturated is False and s.saturation.evidence == ()
    assert s.saturation.rate_ratio == pytest.approx(1.0, abs=0.08)
    # the same requests behind a server that completes one every 0.1 s: half the offered rate
    backlog = [ok(i, i / 20, 0.1 + i * 0.05, 0.1 + i * 0.05 + float(e2e[i]) / 20) for i in range(200)]
    s2 = build_summary(records_to_table(backlog), run={"load": {"open_loop": True, "target_rate": 20.0}})
    assert s2.saturated is True and s2.saturation.rate_ratio == pytest.approx(0.5, abs=0.05)


def test_requests_lost_to_the_clients_fd_limit_make_the_run_invalid():
    clean = judge(Facts(completed=50, failed=3, errors={"connect_error": 3}))
    assert clean.valid
    v = judge(Facts(completed=50, failed=3, errors={"client_fd_limit": 2, "connect_error": 1}))
    assert not v.valid and [f.code for f in v.findings if f.severity == "invalid"] == ["client_fd_limit"]
    assert "2 requests" in v.invalid_reasons[0] and "file descriptors" in v.invalid_reasons[0]
