"""The offline event loop: tie-break at equal times, wake-up batching, routing, Little's L."""

from __future__ import annotations

import pytest

from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.loop import HeapSource, ListSource, LoopStats, VirtualClock, arrival_first, route, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import SimRequest

P = LinearStepTime(base_s=0.01, per_token_s=0.001)


def _run(reqs, engines=None):
    engines = engines or [Engine(P, EngineConfig(), 256)]
    done: list[SimRequest] = []
    stats = LoopStats()
    end = run_virtual(engines, ListSource(reqs), done.append, VirtualClock(), stats=stats)
    return {r.rid: r for r in done}, stats, end


def test_the_tie_break_is_arrival_first():
    assert arrival_first(1.0, 1.0)
    assert arrival_first(0.5, 1.0)
    assert not arrival_first(1.5, 1.0)


def test_an_arrival_at_a_step_end_joins_the_next_batch():
    # r0's prefill ends at 0.042; r1 arrives exactly then and is prefilled with r0's first decode:
    # 0.01 + 0.001 * (1 + 32) = 0.043. Were the step end handled first, r1 would start one step later.
    a = SimRequest(rid=0, arrival=0.0, prompt_tokens=32, max_tokens=3)
    b = SimRequest(rid=1, arrival=0.042, prompt_tokens=32, max_tokens=1)
    done, _, _ = _run([a, b])
    assert done[1].scheduled_at == pytest.approx(0.042)
    assert done[1].first_token_at == pytest.approx(0.085)


def test_arrivals_at_the_same_instant_share_a_batch_on_an_idle_engine():
    reqs = [SimRequest(rid=i, arrival=0.5, prompt_tokens=16, max_tokens=1) for i in range(3)]
    done, _, end = _run(reqs)
    assert [r.first_token_at for r in done.values()] == pytest.approx([0.558] * 3)
    assert end == pytest.approx(0.558)


def test_route_picks_the_least_loaded_engine_lowest_index_on_ties():
    engines = [Engine(P, EngineConfig(), 64) for _ in range(3)]
    assert route(engines) is engines[0]
    engines[0].add(SimRequest(rid=0, arrival=0.0, prompt_tokens=16, max_tokens=1))
    assert route(engines) is engines[1]
    engines[1].add(SimRequest(rid=1, arrival=0.0, prompt_tokens=16, max_tokens=1))
    engines[2].add(SimRequest(rid=2, arrival=0.0, prompt_tokens=16, max_tokens=1))
    assert route(engines) is engines[0]


def test_replicas_run_in_parallel():
    reqs = [SimRequest(rid=i, arrival=0.0, prompt_tokens=16, max_tokens=1) for i in range(2)]
    done, _, end = _run(reqs, [Engine(P, EngineConfig(), 64), Engine(P, EngineConfig(), 64)])
    # each engine prefills one prompt alone: 0.01 + 0.016
    assert done[0].first_token_at == pytest.approx(0.026) and done[1].first_token_at == pytest.approx(0.026)


def test_in_system_integral_is_the_sum_of_request_lifetimes():
    reqs = [SimRequest(rid=i, arrival=0.1 * i, prompt_tokens=40, max_tokens=5) for i in range(20)]
    done, stats, _ = _run(reqs)
    assert stats.arrived == stats.done == 20
    assert stats.in_system_s == pytest.approx(sum(r.ended_at - r.arrival for r in done.values()))


def test_heap_source_orders_by_time_then_push_order():
    src = HeapSource()
    for rid, t in ((0, 2.0), (1, 1.0), (2, 1.0)):
        src.push(SimRequest(rid=rid, arrival=t, prompt_tokens=1, max_tokens=1))
    assert [src.pop().rid for _ in range(3)] == [1, 2, 0]
    assert src.next_time() == float("inf")


def test_rejected_requests_are_reported_at_arrival():
    eng = Engine(P, EngineConfig(max_model_len=64), 64)
    done, stats, _ = _run([SimRequest(rid=0, arrival=1.0, prompt_tokens=60, max_tokens=10)], [eng])
    assert done[0].ended_at == 1.0 and done[0].error
    assert stats.done == 1 and stats.in_system_s == 0.0
