"""Serving estimates built from step times: single user, queueing, saturation, replicas."""

from __future__ import annotations

import pytest

from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.serving import at_concurrency, at_rate, engine_of, max_concurrency, saturation


@pytest.fixture(scope="module")
def d8():
    return build_deployment("llama-3.1-8b", "h100-sxm")


def test_single_user_is_prefill_then_plain_decode_steps(d8):
    e = at_concurrency(d8, 1000, 200, 1)
    assert e.ttft_s == pytest.approx(d8.request_overhead_s + d8.prefill_time(1000, 8192))
    assert e.tpot_s == pytest.approx(d8.step_time(1, 1100, 1))
    assert e.e2e_s == pytest.approx(e.ttft_s + 199 * e.tpot_s)
    assert e.output_tokens_per_s == pytest.approx(200 / e.e2e_s)
    assert e.per_user_tokens_per_s == pytest.approx(1 / e.tpot_s)
    assert e.bound == "memory"


def test_more_users_raise_throughput_and_latency(d8):
    a, b = at_concurrency(d8, 1000, 200, 1), at_concurrency(d8, 1000, 200, 32)
    assert b.output_tokens_per_s > 10 * a.output_tokens_per_s
    assert b.tpot_s > a.tpot_s and b.ttft_s > a.ttft_s


def test_users_beyond_capacity_queue_for_a_slot():
    d = build_deployment("llama-3.1-70b", "2xh100-sxm:tp2")
    limit = max_concurrency(d, 1000, 200)
    at, over = at_concurrency(d, 1000, 200, limit), at_concurrency(d, 1000, 200, 2 * limit)
    assert over.running_per_replica == limit
    assert over.ttft_s == pytest.approx(at.ttft_s + at.e2e_s, rel=1e-6)  # one full request time in the queue
    assert over.output_tokens_per_s == pytest.approx(at.output_tokens_per_s, rel=1e-6)


def test_replicas_multiply_saturation_throughput():
    one = build_deployment("llama-3.1-8b", "h100-sxm")
    four = build_deployment("llama-3.1-8b", "4xh100-sxm:tp1")
    assert saturation(four, 1000, 200)[0] == pytest.approx(4 * saturation(one, 1000, 200)[0])
    # vLLM V1 on an H100 admits up to 1024 sequences: here the KV cache is the limit (capacity / per-sequence reservation)
    assert saturation(one, 1000, 200)[1] == one.kv_capacity_tokens // (1000 + 200 // 2) < 1024


def test_a_finite_run_counts_only_the_requests_it_has_over_the_replicas():
    """A run of N requests split over the replicas counts N requests' output over the busiest replica's time: one
    request on two replicas is one replica's work (it was counted twice), three on two take the time of two on one."""
    from infermeter.perfmodel.serving import static_batch

    one = build_deployment("llama-3.1-8b", "h100-sxm")
    two = build_deployment("llama-3.1-8b", "2xh100-sxm:tp1")
    for n in (1, 3):
        busiest = -(-n // 2)
        sat_two, sat_one = saturation(two, 1000, 200, requests=n)[0], saturation(one, 1000, 200, requests=busiest)[0]
        assert sat_two == pytest.approx(sat_one * n / busiest, rel=1e-9)
        st_two, st_one = static_batch(two, 1000, 200, n), static_batch(one, 1000, 200, busiest)
        assert st_two.output_tokens_per_s == pytest.approx(st_one.output_tokens_per_s * n / busiest, rel=1e-9)
    # an even split is the replicas' sum, as before
    assert saturation(two, 1000, 200, requests=4)[0] == pytest.approx(2 * saturation(one, 1000, 200, requests=2)[0])


def test_saturation_is_the_steady_state_mixed_step(d8):
    tput, batch = saturation(d8, 128, 128)
    # each step decodes `batch` tokens and prefills batch*128/128 prompt tokens
    step = d8.step_time(2 * batch, batch * (128 + 64) + batch, batch, attn_pairs=batch * (128 + 64) + batch * 129 / 2)
    # the engine's steady state, unless the API server's serial per-request work caps it first (frontend phase)
    assert tput == pytest.approx(min(batch / step, 128 / d8.frontend_s))
    assert saturation(d8, 128, 128, served=False)[0] == pytest.approx(batch / step)


def test_static_batch_runs_the_whole_batch_to_completion(d8):
    from infermeter.perfmodel.serving import static_batch

    e = static_batch(d8, 128, 256, 64)
    assert e.running_per_replica == 64
    assert e.e2e_s == pytest.approx(e.ttft_s + 255 * e.tpot_s)
    assert e.output_tokens_per_s == pytest.approx(64 * 256 / e.e2e_s)
    # a batch four times the engine's limit runs in four waves: the same rate, four times the latency
    limit = d8.engine_defaults.max_num_seqs
    one, four = static_batch(d8, 128, 256, limit), static_batch(d8, 128, 256, 4 * limit)
    assert four.output_tokens_per_s == pytest.approx(one.output_tokens_per_s) and four.e2e_s == pytest.approx(4 * one.e2e_s)
    # a static batch waits for its longest member: continuous batching of the same users is no slower
    assert static_batch(d8, 1000, 200, 32).output_tokens_per_s <= at_concurrency(d8, 1000, 200, 32).output_tokens_per_s * 1.05


def test_serving_uses_the_deployments_own_engine_limits():
    d = build_deployment("llama-3.1-8b", "h100-sxm", max_num_seqs=16)
    assert saturation(d, 1000, 200)[1] == 16
    assert max_concurrency(d, 1000, 200) == 16


def test_vllm_v1_scheduler_limits_follow_the_device():
    """vLLM V1 serves 1024 sequences and an 8192-token budget on a >= 70 GiB device other than an A100, else 256 and
    2048 (its get_batch_defaults); V0 and other engines keep their table values; explicit limits win."""
    def limits(gpu, engine="vllm", **kw):
        e = build_deployment("llama-3.1-8b", gpu, engine=engine, **kw).engine_defaults
        return e.max_num_seqs, e.max_batched_tokens

    assert limits("h100-sxm") == limits("h200") == limits("mi300x") == (1024, 8192)
    assert limits("a100-80gb") == limits("l40s") == limits("rtx-4090") == (256, 2048)
    assert limits("h100-sxm", engine="vllm@0.6.3") != (1024, 8192)  # V0: the vllm<0.8 generation's own limits
    assert limits("h100-sxm", engine="sglang") == limits("a100-80gb", engine="sglang")
    assert limits("h100-sxm", max_num_seqs=64, max_batched_tokens=4096) == (64, 4096)
    from dataclasses import replace

    from infermeter.perfmodel.engines import hardware_limits

    overlay = replace(build_deployment("llama-3.1-8b", "h100-sxm").engine_defaults, max_num_seqs=64, max_batched_tokens=4096)
    assert (hardware_limits(overlay, 80e9, "h100-sxm").max_num_seqs, overlay.max_batched_tokens) == (64, 4096)  # a user's table


def test_a_saturated_run_queues_behind_its_batch():
    """TPOT = B / X (Little's law); TTFT grows with the queue; no queue when every request fits the batch; the mean
    TTFT of a run of unknown size is not a number the model can give."""
    from infermeter.perfmodel.serving import saturated_latency

    d = build_deployment("llama-3.1-8b", "a100-80gb")
    x, b = saturation(d, 500, 200)
    ttft_none, tpot = saturated_latency(d, 500, 200)
    assert ttft_none is None and tpot == pytest.approx(b / x)
    small, _ = saturated_latency(d, 500, 200, None, b // 2)
    full, _ = saturated_latency(d, 500, 200, None, b)
    big, tpot_big = saturated_latency(d, 500, 200, None, 4 * b)
    assert small is not None and full is not None and big is not None
    assert small < full < big and tpot_big == pytest.approx(tpot)
    # 3B requests wait behind the first B: on average (3B)(3B+1)/(8B) completions' worth of E[O]/X, and more
    assert big > (3 * b) * (3 * b + 1) / (2 * 4 * b) * 200 / x
    _, tpot_four = saturated_latency(d, 500, 200, None, 4)  # fewer than the batch: one batch of 4, its own step
    assert tpot_four == pytest.approx(d.step_time(4, 4 * 600, 4)) and tpot_four < tpot
    two, _ = saturated_latency(build_deployment("llama-3.1-8b", "2xa100-80gb:tp1"), 500, 200, None, 8 * b)
    assert two == pytest.approx(big, rel=1e-6)  # two replicas split the queue: each holds 4B


def test_equal_requests_queue_in_whole_waves():
    """Equal lengths admitted together finish together: with 3B requests queued at once, the second wave waits one
    whole wave (B E[O] / X seconds) and the third two, one wave on average over the run beyond the first wave's own
    prompt burst; the even spread of completions that varied lengths give would say (2B + 1) / 3 completions."""
    from infermeter.perfmodel.serving import saturated_latency

    d = build_deployment("llama-3.1-8b", "a100-80gb")
    x, b = saturation(d, 500, 200, served=False)  # the engine's own rate: the API server's cap is not in the queue
    one, _ = saturated_latency(d, 500, 200, None, b)
    three, _ = saturated_latency(d, 500, 200, None, 3 * b)
    assert one is not None and three is not None
    assert three - one == pytest.approx(b * 200 / x, rel=1e-9)
    extra, _ = saturated_latency(d, 500, 200, None, 3 * b + 1)  # one more request: a fourth wave of one
    assert extra is not None and extra > three


def test_validate_asks_for_the_request_count_of_a_saturated_ttft_row(tmp_path):
    from infermeter.errors import DataError
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.validate import predict

    head = ("id,model,hardware,gpus,tp,pp,weight_dtype,engine,scenario,concurrency,input_tokens,output_tokens,metric,"
            "value,settings\n")
    csv = tmp_path / "rows.csv"
    csv.write_text(head + "sat-ttft,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,500,200,ttft_ms,900,\n"
                   "sat-ttft-n,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,500,200,ttft_ms,900,requests=3000\n"
                   "sat-tpot,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,500,200,tpot_ms,90,\n")
    rows = {r.id: r for r in load_rows(csv)}
    with pytest.raises(DataError, match="sat-ttft.*requests=N"):
        predict(rows["sat-ttft"])
    assert predict(rows["sat-ttft-n"]) > 10 * predict(rows["sat-tpot"]) > 0  # 3000 queued: seconds, not one step


def test_a_saturated_run_of_equal_requests_runs_in_waves(d8):
    """Equal lengths and a request count: fewer requests than the batch limit run as one static batch (a run of 50
    was predicted as fast as one of the engine's full batch); whole waves keep the steady rate; a last partial wave
    runs at its own, smaller batch."""
    from infermeter.perfmodel.lengths import Lengths
    from infermeter.perfmodel.serving import static_batch

    fixed = Lengths.of("fixed", 1000, 2000)
    steady, b = saturation(d8, 1000, 2000, served=False)
    few, running = saturation(d8, 1000, 2000, fixed, requests=b // 4, served=False)
    assert running == b // 4 < b
    assert few == pytest.approx(static_batch(d8, 1000, 2000, b // 4).output_tokens_per_s)
    assert few < steady  # a quarter of the batch: the weights are read for fewer tokens a step
    full = saturation(d8, 1000, 2000, fixed, requests=b, served=False)[0]  # one whole wave: a static batch of b
    assert full == pytest.approx(static_batch(d8, 1000, 2000, b).output_tokens_per_s)
    partial = saturation(d8, 1000, 2000, fixed, requests=2 * b + b // 4, served=False)[0]
    assert few < partial < max(steady, full)
    # no step where b divides the run (2b - 1 and 2b both end in a wave of about b), but one request past it decodes
    # its 2,000 tokens alone in a last wave of one
    below, at, past = (saturation(d8, 1000, 2000, fixed, requests=2 * b + k, served=False)[0] for k in (-1, 0, 1))
    assert abs(at - below) < 0.01 * at and past < 0.97 * at


def test_an_open_loop_below_capacity_holds_rate_times_e2e_users_and_delivers_the_rate(d8):
    """Little's law: at 5 requests a second the replica holds 5 E2E requests, and its latencies are the closed loop's at
    that many users; the steady output rate is the arrivals' rate times the output length."""
    e = at_rate(d8, 1000, 200, 5.0)
    assert e.output_tokens_per_s == pytest.approx(5.0 * 200)
    assert e.running_per_replica == pytest.approx(5.0 * e.e2e_s, abs=1.0)
    one, many = at_concurrency(d8, 1000, 200, 1), at_concurrency(d8, 1000, 200, e.running_per_replica + 1)
    assert one.tpot_s <= e.tpot_s <= many.tpot_s
    slow, fast = at_rate(d8, 1000, 200, 1.0), at_rate(d8, 1000, 200, 10.0)
    assert slow.tpot_s < e.tpot_s < fast.tpot_s and slow.running_per_replica < e.running_per_replica < fast.running_per_replica
    # a finite run counts from the first send to the last completion: its rate is below the arrivals' and nears them
    short, long = at_rate(d8, 1000, 200, 5.0, requests=50), at_rate(d8, 1000, 200, 5.0, requests=5000)
    assert short.output_tokens_per_s < long.output_tokens_per_s < 5.0 * 200
    assert long.output_tokens_per_s > 0.99 * 5.0 * 200


def test_an_overloaded_open_loop_queues_for_slots(d8):
    """Past the replica's rate a queue grows: without a number of requests there is no finite mean wait; a run of
    2B sent at once waits, on average, about half a full-batch request's life more than a run of B (its second half
    waits one whole request), and one request past B adds almost nothing (no step at B + 1)."""
    with pytest.raises(ValueError, match="queue grows without end"):
        at_rate(d8, 1000, 200, 1000.0)
    b = max_concurrency(d8, 1000, 200)
    full = at_concurrency(d8, 1000, 200, b)
    one, two = at_rate(d8, 1000, 200, 1e9, requests=b), at_rate(d8, 1000, 200, 1e9, requests=2 * b)
    assert two.overloaded and two.ttft_s - one.ttft_s == pytest.approx(full.e2e_s / 2, rel=0.15)
    past = at_rate(d8, 1000, 200, 1e9, requests=b + 1)
    assert past.output_tokens_per_s == pytest.approx(one.output_tokens_per_s, rel=0.05)
    assert past.ttft_s - one.ttft_s < 0.05 * full.e2e_s


@pytest.mark.parametrize("config,inp,out", [("h100-sxm", 1000, 200), ("2xh100-sxm:pp2", 1000, 200), ("h100-sxm", 4000, 100)])
def test_an_open_loop_run_delivers_more_as_the_rate_rises(config, inp, out):
    """From a tenth of the configuration's rate to ten times it, a run of 1,000 requests delivers (nearly) more output
    as the arrivals come faster: no drop past 10% of what a slower rate delivered (4% at most in these three; the blend
    of the open loop and the burst is continuous), and past the rate it nears the all-at-once run."""
    d = build_deployment("llama-3.1-8b", config)
    cap = max(c / at_concurrency(d, inp, out, c).e2e_s for c in range(1, max_concurrency(d, inp, out) + 1, 7))
    got = [at_rate(d, inp, out, cap * f, requests=1000).output_tokens_per_s
           for f in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.01, 1.2, 2.0, 10.0)]
    assert all(g >= 0.9 * max(got[:i + 1]) for i, g in enumerate(got)), got
    assert got[-1] == pytest.approx(saturation(d, inp, out, None, 1000)[0], rel=0.1)


def test_an_open_loop_takes_the_configuration_s_best_rate_and_splits_runs_over_replicas(d8):
    """A replica's rate is the most c / E2E(c) of its closed loop (long prompts peak before the batch limit: 4,000-in /
    100-out requests at 3 a second are served, not refused); a long run converges to the steady state; one request
    on two replicas runs on one of them."""
    e = at_rate(d8, 4000, 100, 3.0)
    assert e.output_tokens_per_s == pytest.approx(300) and not e.overloaded
    for r in (0.01, 5.0):
        assert at_rate(d8, 1000, 200, r, requests=100_000).ttft_s == pytest.approx(at_rate(d8, 1000, 200, r).ttft_s, rel=0.01)
    two = build_deployment("llama-3.1-8b", "2xh100-sxm:tp1")
    assert at_rate(two, 1000, 200, 0.1, requests=1).output_tokens_per_s == pytest.approx(
        at_rate(d8, 1000, 200, 0.1, requests=1).output_tokens_per_s, rel=0.01)


@pytest.mark.parametrize(("model", "config", "engine", "kind", "inp", "out"), [
    ("llama-3.1-8b", "h100-sxm", "vllm", "fixed", 1000, 200),
    ("llama-3.1-8b", "a100-80gb", "sglang", "sharegpt", 300, 200),
    ("llama-3.1-70b", "4xh100-sxm:tp4", "trtllm", "uniform", 2048, 128),
    ("llama-3.1-70b", "8xa10g:tp4,pp2", "vllm", "fixed", 512, 256),  # two pipeline stages
    ("qwen3-30b-a3b", "h100-sxm", "vllm", "sharegpt", 30000, 2),  # long prompts, two output tokens
    ("llama-3.1-8b", "2xl4", "lmdeploy", "fixed", 128, 2048),  # two replicas
])
def test_the_open_loops_ceiling_bounds_every_closed_loop(model, config, engine, kind, inp, out):
    """``at_rate`` skips the closed loop of any user count whose ceiling (``closed_loop_ceiling``: the users over
    ``O - 1`` plain decode steps) cannot beat the best rate it knows: that is only the same answer if the ceiling is
    never below the closed loop's own rate, at any user count up to and past the replica's limit."""
    from infermeter.perfmodel.lengths import Lengths
    from infermeter.perfmodel.serving import closed_loop_ceiling

    d = build_deployment(model, config, engine=engine)
    dist = Lengths.of(kind, inp, out)
    limit = max_concurrency(d, inp, out)
    for users in sorted({1, 2, 3, 7, 16, 63, 200, limit, limit + 5}):
        rate = users / at_concurrency(d, inp, out, users * d.config.replicas, dist).e2e_s
        assert rate <= closed_loop_ceiling(d, inp, out, users, dist, limit) * (1 + 1e-12), (users, limit)
    assert closed_loop_ceiling(d, inp, 1, 4, dist) == float("inf")  # no decode step to bound a one-token output by
