"""Striping one schedule over workers, and merging their records exactly."""

import time

import pytest

from infermeter.client.openai import ClientConfig
from infermeter.errors import DataError
from infermeter.load.runner import Limits
from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency
from infermeter.load.workers import (
    MergedLive,
    Stripe,
    WorkerPlan,
    WorkerRun,
    aligned_clock,
    effective_workers,
    merge_records,
    primed,
    split,
)
from infermeter.records.record import RequestRecord, records_to_table


def test_stripes_partition_the_indices():
    n = 3
    stripes = [Stripe(k, n) for k in range(n)]
    owners = [[k for k, s in enumerate(stripes) if s(i)] for i in range(10)]
    assert owners == [[i % 3] for i in range(10)]


def test_split_and_effective_workers():
    assert split(5, 2) == [3, 2]
    assert split(7, 3) == [3, 2, 2]
    assert sum(split(64, 5)) == 64
    assert effective_workers(ConstantConcurrency(concurrency=1), 4) == 1
    assert effective_workers(ConstantConcurrency(concurrency=3), 4) == 3
    assert effective_workers(ConstantArrivalRate(rate_per_s=5), 4) == 4


def test_worker_plan_splits_streams_and_the_cap():
    plan = WorkerPlan(client=ClientConfig(base_url="http://x", model="m"), shape=ConstantConcurrency(concurrency=5),
                      limits=Limits(requests=10, max_concurrency=3), seed=0, workers=2, make_specs=iter)
    assert [plan.shape_for(k).concurrency for k in range(2)] == [3, 2]
    assert [plan.limits_for(k).max_concurrency for k in range(2)] == [2, 1]
    assert plan.limits_for(1).requests == 10  # the stripe filter, not the limit, divides the requests


def test_aligned_clock_reads_zero_at_the_start_wall_time():
    start = time.time() + 5.0
    clock = aligned_clock(start)
    assert clock() == pytest.approx(-5.0, abs=0.01)


def recs(ids, worker):
    return records_to_table([RequestRecord(request_id=i, worker=worker, intended_at=i / 10) for i in ids])


def test_merge_orders_by_request_id_and_counts_the_missing():
    table, report = merge_records([recs([0, 2, 4], 0), recs([1, 3], 1)], expected=6)
    assert table.column("request_id").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("worker").to_pylist() == [0, 1, 0, 1, 0]
    assert report == {"records": 5, "per_worker": [3, 2], "duplicates": 0, "missing": 1}


def test_merge_refuses_a_request_counted_twice():
    with pytest.raises(DataError, match=r"request ids \[2\]"):
        merge_records([recs([0, 2], 0), recs([1, 2], 1)])


def test_merged_live_sums_the_workers():
    live = MergedLive(3)
    live.snaps[0] = {"done": 4, "errors": 1, "in_flight": 2, "req_per_s": 10.0, "out_tok_per_s": 100.0, "ttft_p50_ms": 20.0}
    # worker 1 has not reported yet: it does not count
    live.snaps[2] = {"done": 6, "errors": 0, "in_flight": 1, "req_per_s": 5.0, "out_tok_per_s": 50.0, "ttft_p50_ms": 30.0}
    assert live.snapshot(0.0) == {"done": 10, "errors": 1, "in_flight": 3, "req_per_s": 15.0, "out_tok_per_s": 150.0,
                                  "ttft_p50_ms": 25.0}


def test_prepare_draws_the_first_spec_before_the_clock_starts(tmp_path):
    # a generator that sets itself up at its first next() (a tokenizer, a text pool) pays for it in
    # prepare(), not at the first send, where it would show as the client's schedule lag
    drawn = []

    def make_specs():
        for i in range(3):
            drawn.append(i)
            yield f"spec-{i}"

    plan = WorkerPlan(client=ClientConfig(base_url="http://x", model="m"), shape=ConstantArrivalRate(rate_per_s=5),
                      limits=Limits(requests=3), seed=0, workers=1, make_specs=make_specs)
    work = WorkerRun(plan, 0, tmp_path)
    specs = work.prepare()
    assert drawn == [0]  # drawn now, before run(): and only the first
    assert list(specs) == ["spec-0", "spec-1", "spec-2"] and drawn == [0, 1, 2]
    assert list(primed(iter(()))) == []
