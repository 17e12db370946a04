"""Metric math on hand-computed records."""

import pytest

from infermeter.analysis.accumulator import build_summary
from infermeter.analysis.metrics import inter_token_latencies, request_metrics
from infermeter.client.openai import allocate_tokens
from infermeter.records.record import RequestRecord, records_to_table


def rec(i, intended, sent, chunks, toks, ended, n_out=None, outcome="ok", err=None, n_in=10, usage="server"):
    return RequestRecord(request_id=i, intended_at=intended, sent_at=sent, first_byte_at=sent,
                         first_token_at=chunks[0] if chunks else None, ended_at=ended, chunk_times=chunks,
                         chunk_tokens=toks, outcome=outcome, error_class=err,
                         completion_tokens=sum(toks) if n_out is None else n_out, prompt_tokens=n_in,
                         stream_tokens=len(chunks), usage_source=usage)


RECS = [
    # sent 10 ms late; first token 100 ms after send; 4 tokens, chunks at .1 .2 .3 (2 tokens) .. ends .35
    rec(0, 0.00, 0.01, [0.11, 0.21, 0.31], [1, 1, 2], 0.35),
    rec(1, 0.50, 0.50, [0.70, 0.80], [1, 1], 0.80),
    rec(2, 1.00, 1.00, [], [], 1.20, n_out=0, outcome="error", err="http_5xx"),
]


def test_per_request_metrics():
    m = request_metrics(records_to_table(RECS[:2]))
    assert m.ttft.tolist() == pytest.approx([0.10, 0.20])
    assert m.ttft_intended.tolist() == pytest.approx([0.11, 0.20])
    assert m.e2e.tolist() == pytest.approx([0.34, 0.30])
    # TPOT = (E2E - TTFT)/(n-1): (0.34-0.10)/3 and (0.30-0.20)/1
    assert m.tpot.tolist() == pytest.approx([0.08, 0.10])
    assert m.schedule_lag.tolist() == pytest.approx([0.01, 0.0])
    assert m.out_tps.tolist() == pytest.approx([4 / 0.34, 2 / 0.30])


def test_itl_pools_gaps_and_splits_multi_token_chunks():
    itl = sorted(inter_token_latencies(records_to_table(RECS)).tolist())
    # request 0: gap .1 (1 tok), gap .1 split over 2 tokens -> .05, .05 ; request 1: gap .1
    assert itl == pytest.approx([0.05, 0.05, 0.1, 0.1])


def test_summary_counts_throughput_and_errors():
    s = build_summary(records_to_table(RECS), run={"slo": {"ttft_ms": 150}}).to_json()
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["errors"] == {"http_5xx": 1}
    assert s["duration_s"] == pytest.approx(1.2)  # first intended 0.0 .. last end 1.2
    assert s["request_throughput"] == pytest.approx(2 / 1.2)
    assert s["output_token_throughput"] == pytest.approx(6 / 1.2)
    assert s["input_token_throughput"] == pytest.approx(20 / 1.2)
    assert s["ttft_ms"]["p50"] == pytest.approx(150.0)
    assert s["goodput"] == pytest.approx(1 / 1.2)  # only request 0 (110 ms from intended) meets 150 ms
    # request 0 reported 4 tokens by usage but 3 chunks: a disagreement
    assert s["usage_mismatches"] == 1
    assert s["token_count_source"] == "server"


def test_open_loop_lag_makes_run_invalid():
    recs = [rec(i, i * 0.1, i * 0.1 + (0.05 if i == 5 else 0.0), [i * 0.1 + 0.2], [1], i * 0.1 + 0.3) for i in range(20)]
    s = build_summary(records_to_table(recs), run={"load": {"open_loop": True, "target_rate": 10.0}}).to_json()
    assert not s["valid"]
    # 20 sends: no p99 exists, so the reason names the max (one 50 ms send) for what it is
    assert "schedule_lag: max schedule lag 50.0 ms > 10 ms" in "".join(s["invalid_reasons"])
    assert "fewer than 100 sends" in "".join(s["invalid_reasons"])
    ok = build_summary(records_to_table(recs), run={"load": {"open_loop": False}}).to_json()
    assert ok["valid"]


def test_warmup_rows_do_not_count():
    recs = [rec(0, 0, 0, [0.1], [1], 0.2), rec(1, 0.2, 0.2, [0.3], [1], 0.4)]
    recs[0].phase = "warmup"
    s = build_summary(records_to_table(recs)).to_json()
    assert s["completed"] == 1 and s["duration_s"] == pytest.approx(0.2)


@pytest.mark.parametrize("lens,total,expected", [
    ([4, 4], 2, [1, 1]), ([1, 9], 6, [1, 5]), ([5, 5, 5], 9, [3, 3, 3]),
    # a loaded server coalesced 3 tokens of 4 characters into one chunk among 57 single tokens: exact
    ([4] * 20 + [12] + [4] * 37, 60, [1] * 20 + [3] + [1] * 37),
    ([8, 4, 12, 4], 7, [2, 1, 3, 1]),
    ([0, 10], 5, [1, 4]),  # a chunk with no text still carried a token
])
def test_allocate_tokens(lens, total, expected):
    assert allocate_tokens(lens, total) == expected


def test_rate_check_uses_the_schedule_not_the_mean_rate():
    # A sparse Poisson-like schedule that happens to run slower than its 10 req/s mean:
    # the client kept to it exactly, so the run is valid; a client that sends late is not.
    intended = [0.0, 0.2, 0.35, 0.6, 0.9, 1.2, 1.3, 1.6, 1.9, 2.2]
    on_time = [rec(i, t, t, [t + 0.05], [1], t + 0.1) for i, t in enumerate(intended)]
    s = build_summary(records_to_table(on_time), run={"load": {"open_loop": True, "target_rate": 10.0}}).to_json()
    assert s["valid"], s["invalid_reasons"]
    assert s["target_rate"] == 10.0 and s["scheduled_rate"] == pytest.approx(9 / 2.2)
    late = [rec(i, t, t * 1.3, [t * 1.3 + 0.05], [1], t * 1.3 + 0.1) for i, t in enumerate(intended)]
    s2 = build_summary(records_to_table(late), run={"load": {"open_loop": True, "target_rate": 10.0}}).to_json()
    assert any(r.startswith("achieved_rate") for r in s2["invalid_reasons"])


def test_eos_token_counted_by_usage_is_not_a_mismatch():
    a = rec(0, 0, 0, [0.1, 0.2], [1, 1], 0.3, n_out=3)
    a.finish_reason = "stop"
    b = rec(1, 0, 0, [0.1, 0.2], [1, 1], 0.3, n_out=3)
    b.finish_reason = "length"
    s = build_summary(records_to_table([a, b])).to_json()
    assert s["usage_mismatches"] == 1


def test_cancelled_requests_do_not_stretch_the_window():
    recs = [rec(i, i * 1.0, i * 1.0, [i + 0.2], [1], i + 0.5) for i in range(10)]
    cancelled = RequestRecord(request_id=10, intended_at=9.0, sent_at=9.0, ended_at=40.0, outcome="cancelled")
    s = build_summary(records_to_table(recs + [cancelled])).to_json()
    assert s["duration_s"] == pytest.approx(9.5)
    assert s["cancelled"] == 1 and s["request_throughput"] == pytest.approx(10 / 9.5)
