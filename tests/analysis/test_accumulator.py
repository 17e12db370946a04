"""One accumulator: the same summary in any batching and on every path; windows count what ended in them."""

import numpy as np
import pytest

from infermeter.analysis.accumulator import Accumulator as RecordAggregator
from infermeter.analysis.accumulator import build_summary
from infermeter.records.record import RequestRecord, records_to_table

RUN = {"load": {"open_loop": True, "target_rate": 10.0}, "slo": {"ttft_ms": 150.0}}


def records(n=400, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = i / 10  # 10 req/s
        ttft = float(rng.uniform(0.05, 0.3))
        k = int(rng.integers(2, 20))
        chunks = [t + 0.001 + ttft + 0.02 * j for j in range(k)]
        ok = i % 25 != 7
        if i == 399:  # in flight when the run stopped: must not stretch the window
            out.append(RequestRecord(request_id=i, intended_at=t, sent_at=t + 0.001, ended_at=t + 60.0,
                                     outcome="cancelled"))
            continue
        out.append(RequestRecord(
            request_id=i, phase="warmup" if i < 5 else "measure", intended_at=t, sent_at=t + 0.001,
            first_token_at=chunks[0] if ok else None, ended_at=chunks[-1] if ok else t + 0.1,
            chunk_times=chunks if ok else [], chunk_tokens=[1] * k if ok else [], outcome="ok" if ok else "error",
            error_class=None if ok else "http_5xx", prompt_tokens=100 if ok else None,
            completion_tokens=k if ok else None, stream_tokens=k if ok else 0, usage_source="server" if ok else None))
    return out


EXACT = ("completed", "failed", "dropped", "cancelled", "total_input_tokens", "total_output_tokens", "errors",
         "token_count_source", "usage_mismatches", "valid", "error_rate", "warnings")
CLOSE = ("duration_s", "request_throughput", "output_token_throughput", "input_token_throughput", "goodput",
         "achieved_rate", "target_rate", "mean_output_tokens", "mean_input_tokens")


@pytest.mark.parametrize("batches", [1, 3, 7])
def test_streaming_summary_matches_build_summary(batches):
    recs = records()
    exact = build_summary(records_to_table(recs), run=RUN).to_json()
    agg = RecordAggregator(slo=RUN["slo"])
    for part in np.array_split(np.arange(len(recs)), batches):
        agg.add(records_to_table([recs[i] for i in part]))
    got = agg.summary(run=RUN).to_json()
    assert set(exact) <= set(got)
    for key in EXACT:
        assert got[key] == exact[key], key
    for key in CLOSE:
        assert got[key] == pytest.approx(exact[key], rel=1e-9), key
    for dist in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttft_from_intended_ms", "schedule_lag_ms"):
        assert got[dist]["count"] == exact[dist]["count"]
        assert got[dist]["mean"] == pytest.approx(exact[dist]["mean"], rel=1e-9)
        assert got[dist]["max"] == pytest.approx(exact[dist]["max"], rel=1e-12)
        for p in ("p50", "p90", "p99"):
            assert got[dist][p] == pytest.approx(exact[dist][p], rel=0.02), (dist, p)


def test_windows_hold_what_ended_in_them():
    recs = records(n=300)  # measured: 295 requests from 0.5 s to 29.9 s; every 25th (from 7) fails
    agg = RecordAggregator(window_s=10.0)
    for lo in range(0, 300, 50):
        agg.add(records_to_table(recs[lo:lo + 50]))
    series = agg.summary(run=RUN).to_json()["windows"]["series"]
    ends = [r.ended_at for r in recs if r.request_id >= 5]
    ok = [r.outcome == "ok" for r in recs if r.request_id >= 5]
    for w in series:
        inside = [o for e, o in zip(ends, ok) if w["start_s"] <= e < w["end_s"]]
        assert w["completed"] == sum(inside) and w["failed"] == len(inside) - sum(inside)
    assert [w["index"] for w in series] == [0, 1, 2, 3]
    assert series[1]["request_throughput"] == pytest.approx(series[1]["completed"] / 10.0)
    assert series[1]["error_rate"] == pytest.approx(series[1]["failed"] / (series[1]["completed"] + series[1]["failed"]))


def test_gap_windows_are_empty_and_downtime_is_not_duration():
    early = [RequestRecord(request_id=i, intended_at=float(i), sent_at=float(i), first_token_at=i + 0.1, ended_at=i + 0.2,
                           chunk_times=[i + 0.1, i + 0.2], chunk_tokens=[1, 1], completion_tokens=2, stream_tokens=2,
                           prompt_tokens=5, usage_source="server") for i in range(3)]
    late = [RequestRecord(request_id=3 + i, intended_at=30.0 + i, sent_at=30.0 + i, first_token_at=30.1 + i,
                          ended_at=30.2 + i, chunk_times=[30.1 + i, 30.2 + i], chunk_tokens=[1, 1], completion_tokens=2,
                          stream_tokens=2, prompt_tokens=5, usage_source="server") for i in range(3)]
    agg = RecordAggregator(window_s=10.0)
    agg.add(records_to_table(early))
    agg.add(records_to_table(late))
    run = {"load": {"open_loop": True}, "segments": [{"gap_s": 0.0}, {"gap_s": 27.0}]}
    s = agg.summary(run=run).to_json()
    assert [w["completed"] for w in s["windows"]["series"]] == [3, 0, 0, 3]
    assert s["windows"]["series"][1]["ttft_ms"]["p99"] is None
    assert s["duration_s"] == pytest.approx(32.2 - 27.0)


def test_only_warmup_rows_give_an_empty_summary_not_a_crash():
    from infermeter.records.record import RequestRecord

    warm = [RequestRecord(request_id=i, phase="warmup", intended_at=i * 0.1, sent_at=i * 0.1, ended_at=i * 0.1 + 0.05)
            for i in range(5)]
    agg = RecordAggregator(window_s=1.0)
    agg.add(records_to_table(warm))
    s = agg.summary(run={}).to_json()
    assert s["completed"] == 0 and agg.windows() == []
