"""The offline event loop: tie-break at equal times, wake-up batching, routing, Little's L."""

from __future__ import annotations

import pytest

from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.loop import HeapSource, ListSource, LoopStats, VirtualClock, arrival_first, route, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import CANCELLED, FINISHED, REJECTED, TIMED_OUT, SimRequest

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


class _General:
    """The same source without ``passive``: the loop takes its general path (a heap of step ends)."""

    def __init__(self, src: ListSource) -> None:
        self._src = src

    def next_time(self) -> float:
        return self._src.next_time()

    def pop(self) -> SimRequest:
        return self._src.pop()

    def finished(self, r: SimRequest, now: float) -> None:
        self._src.finished(r, now)


class _CountingHeapq:
    """``heapq`` as the loop module sees it, counting the step ends it pushes."""

    def __init__(self) -> None:
        self.pushes = 0

    def heappush(self, heap, item):  # type: ignore[no-untyped-def]
        import heapq

        self.pushes += 1
        heapq.heappush(heap, item)

    def heappop(self, heap):  # type: ignore[no-untyped-def]
        import heapq

        return heapq.heappop(heap)


def _mixed_requests(n: int, seed: int, grid: bool) -> list[SimRequest]:
    """Poisson arrivals with bursts and lulls (decode spans between them), shared prompt prefixes (cache hits), a
    few prompts too long (rejected); ``grid``: arrival times on a 1/512 s grid (ties with step ends)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.02, n) * rng.choice([0.05, 1.0, 4.0], n))
    if grid:
        t = np.round(t * 512) / 512
    out = []
    for i in range(n):
        p = int(rng.integers(8, 420))
        group = int(rng.integers(0, 4))
        out.append(SimRequest(rid=i, arrival=float(t[i]), prompt_tokens=p, max_tokens=int(rng.integers(1, 90)),
                              keys=[group * 1000 + j for j in range(p // 16)]))
    return out


@pytest.mark.parametrize("known", [True, False])  # spans stopped at the next arrival, or interrupted by it
@pytest.mark.parametrize("blocks", [4096, 70])  # plenty of KV, or preemptions
@pytest.mark.parametrize("overhead", [0.0, 0.003])  # the API server's fixed overhead (sends shifted by it)
@pytest.mark.parametrize("grid", [False, True])  # step times and arrivals in binary fractions: equal times happen
@pytest.mark.parametrize("timeouts", [(None, None), (0.25, 1.0), (None, 0.5)])  # clients giving up
def test_the_one_engine_loop_gives_the_general_loops_results(monkeypatch, known, blocks, overhead, grid, timeouts):
    import infermeter.twin.loop as loop_mod
    from infermeter.twin.loop import EventLoop
    from infermeter.twin.router import Router

    p = (LinearStepTime(base_s=2**-8, per_token_s=2**-14) if grid
         else LinearStepTime(base_s=0.004, per_token_s=2e-4, per_kv_token_s=3e-7))
    runs = []
    for general in (False, True):
        heap = _CountingHeapq()
        monkeypatch.setattr(loop_mod, "heapq", heap)
        eng = Engine(p, EngineConfig(max_num_seqs=16, max_num_batched_tokens=256, max_model_len=400), blocks)
        src = ListSource(_mixed_requests(500, 11, grid))
        loop = EventLoop([eng], router=Router("round-robin", 1), frontend=(overhead, 0.0), known_arrivals=known)
        done: list[SimRequest] = []
        end = src._reqs[-1].arrival * 0.9  # the run gives up with requests in flight and still to send
        windows = list(loop.run(_General(src) if general else src, done.append, VirtualClock(), cancel_at=end,
                                window=64, timeouts=timeouts))
        recs = [(r.rid, r.state, r.first_token_at, r.ended_at, r.outputs, r.cached_tokens, r.scheduled_at,
                 r.preemptions, r.error, r.error_class) for r in done]
        stats = (eng.steps, eng.busy_s, eng.usage_integral, eng.running_integral, eng.in_system_integral,
                 eng.prefix_hits, eng.prefix_queries, eng.num_preemptions, eng.max_waiting, eng.max_running,
                 eng.generation_tokens_total, eng.waiting_series.state(), loop.stats)
        runs.append((heap.pushes, windows, recs, stats))
        eng.pool.check()
    (fast_pushes, *fast), (general_pushes, *slow) = runs
    assert fast_pushes == 0 < general_pushes  # the one-engine path ran (its step in flight is not a heap)
    assert fast == slow  # every window, record and counter the same, floats to the bit
    assert {r[1] for r in fast[1]} >= {FINISHED, REJECTED, CANCELLED}  # the case exercises them
    if timeouts[1] is not None and blocks == 70:
        assert TIMED_OUT in {r[1] for r in fast[1]}
    assert fast[2][0] > len(fast[1]) * 2  # decode spans: fewer schedule() calls than steps
    if blocks == 70:
        assert fast[2][7] > 0  # preemptions
