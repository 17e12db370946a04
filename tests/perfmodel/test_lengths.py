"""Length distributions (issue 29): a run is planned over its lengths, not at their mean."""

from __future__ import annotations

import math

import pytest

from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.lengths import Lengths
from infermeter.perfmodel.serving import at_concurrency, saturation


@pytest.mark.parametrize("kind", ["fixed", "uniform", "sharegpt"])
def test_moments_and_tails_agree(kind):
    lg = Lengths.of(kind, 300, 200)
    pts = lg.prompt_points()
    assert sum(pts) / len(pts) == pytest.approx(300, rel=1e-9)  # the stated mean is kept
    # E[R] = E[O^2] / (2 E[O]): the residual's tail integrates to it
    h = lg.horizon()
    steps = 20000
    mean_r = sum(lg.residual((k + 0.5) * h / steps) for k in range(steps)) * h / steps
    assert mean_r == pytest.approx(lg.o2 / (2 * lg.mean_o), rel=0.02)
    # the survival integrates to the mean
    mean_o = sum(lg.survival((k + 0.5) * h / steps) for k in range(steps)) * h / steps
    assert mean_o == pytest.approx(200, rel=0.02)
    assert lg.running_context >= 300 + 100  # never below the mean-length context


def test_the_running_batch_is_output_length_biased():
    assert Lengths.of("fixed", 200, 200).running_context == 300
    assert Lengths.of("uniform", 200, 200).running_context == pytest.approx(200 + 200 * (4 / 3) / 2)
    assert Lengths.of("sharegpt", 200, 200).running_context == pytest.approx(400)  # CV 1: E[O^2]/E[O] = 2 E[O]


def test_fixed_lengths_keep_the_mean_length_model():
    """Equal lengths are the mean-length model: a closed loop and a steady state alike; a finite run of them keeps the
    steady rate for every wave of the batch limit but the last (its last wave: test_serving)."""
    from infermeter.perfmodel.serving import static_batch

    d = build_deployment("llama-3.1-8b", "h100-sxm", engine="vllm")
    fixed = Lengths.of("fixed", 1000, 200)
    steady, b = saturation(d, 1000, 200)
    assert saturation(d, 1000, 200, fixed) == (steady, b)
    last = static_batch(d, 1000, 200, b)  # three waves: two at the steady rate, the last a whole static batch
    thr, running = saturation(d, 1000, 200, fixed, 3 * b)
    assert running == b and thr == pytest.approx(3 * b * 200 / (2 * b * 200 / steady + last.e2e_s), rel=1e-9)
    assert at_concurrency(d, 1000, 200, 8, fixed) == at_concurrency(d, 1000, 200, 8)


def test_a_finite_run_of_chat_lengths_ends_in_a_drain():
    """All requests queued at once: the steady state runs at the batch limit, then the batch empties as the longest
    outputs finish; the fewer the requests per batch, the larger the drain's share and the lower the rate."""
    d = build_deployment("llama-3.3-70b", "4xh200:tp4", engine="sglang")
    chat = Lengths.of("sharegpt", 224, 192)
    steady, b = saturation(d, 224, 192, chat)
    rates = [saturation(d, 224, 192, chat, n)[0] for n in (100_000, 5_000, 2_000)]
    assert rates[0] == pytest.approx(steady, rel=0.02)
    assert rates[0] > rates[1] > rates[2]
    assert rates[2] < 0.85 * steady  # DataCrunch's 2,000 ShareGPT prompts: the mean-length model was +21% out of publication
    assert saturation(d, 224, 192, chat, 2000)[0] < saturation(d, 224, 192)[0]


def test_uniform_random_lengths_cost_more_than_their_mean():
    d = build_deployment("llama-3.3-70b", "4xh200:tp4", engine="sglang")
    assert saturation(d, 2047, 1023, Lengths.of("uniform", 2047, 1023), 800)[0] < saturation(d, 2047, 1023)[0]


def test_rows_say_their_lengths(tmp_path):
    rows = {r.id: r for r in load_rows("tests/data/published-measurements.csv")}
    assert rows["dc-sglang-h200-tp4-l3370b-sharegpt"].lengths == "sharegpt"
    assert rows["dc-sglang-h200-tp4-l3370b-sharegpt"].setting("requests") == 2000
    assert rows["dc-sglang-h200-tp4-l3370b-1024-512"].lengths == "uniform"
    assert rows["tr8-h100-128"].lengths == "fixed"
    head = "id,model,hardware,gpus,tp,pp,weight_dtype,engine,scenario,concurrency,input_tokens,output_tokens,metric,value,conditions,settings\n"
    p = tmp_path / "m.csv"
    p.write_text(head + "a,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,200,200,output_tokens_per_s,100,ShareGPT prompts,\n")
    assert load_rows(p)[0].lengths == "sharegpt"  # conditions naming ShareGPT
    p.write_text(head + "a,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,200,200,output_tokens_per_s,100,,lengths=zipf\n")
    with pytest.raises(DataError, match=r"m.csv:2: column 'settings' item 'lengths=zipf'"):
        load_rows(p)
    with pytest.raises(ConfigError, match="zipf"):
        Lengths.of("zipf", 1, 1)
    assert math.isfinite(Lengths.of("sharegpt", 1, 1).horizon())


def test_plan_takes_a_length_distribution():
    from infermeter.perfmodel.planner import plan

    fixed = plan("llama-3.1-8b", "h100-sxm", input_tokens=224, output_tokens=192, concurrency=64)
    chat = plan("llama-3.1-8b", "h100-sxm", input_tokens=224, output_tokens=192, concurrency=64, lengths="sharegpt")
    assert chat.saturation_tokens_per_s < fixed.saturation_tokens_per_s  # a longer running context per sequence
    assert chat.to_json()["lengths"] == "sharegpt" and "lengths" not in fixed.to_json()
    with pytest.raises(ConfigError, match="zipf"):
        plan("llama-3.1-8b", "h100-sxm", lengths="zipf")


@pytest.mark.parametrize("kind", ["uniform", "sharegpt"])
def test_an_output_cap_cuts_the_tail_and_keeps_the_measured_mean(kind):
    """``max_tokens`` stops every output at the cap: the law is the kind's, cut there, with the stated (measured) mean;
    the tail's integrals still agree, nothing runs past the cap, and the uncapped law behind it has a larger mean."""
    capped, free = Lengths.of(kind, 198, 551, max_output=1024), Lengths.of(kind, 198, 551)
    assert capped.cap_o == 1024 and capped.free_o > 551 and free.cap_o is None and free.free_o == 551
    h = capped.horizon()
    assert h == 1024 and capped.survival(1024) == 0 and capped.residual(1024) == 0 and capped.survival(1023) > 0
    steps = 20000
    mean_o = sum(capped.survival((k + 0.5) * h / steps) for k in range(steps)) * h / steps
    assert mean_o == pytest.approx(551, rel=0.01)
    mean_r = sum(capped.residual((k + 0.5) * h / steps) for k in range(steps)) * h / steps
    assert mean_r == pytest.approx(capped.o2 / (2 * capped.mean_o), rel=0.01)
    assert capped.o2 < free.o2 and capped.running_context < free.running_context  # a shorter tail, a shorter context
    far = Lengths.of(kind, 198, 551, max_output=10**7)  # a cap no output reaches changes nothing
    assert far.o2 == pytest.approx(free.o2, rel=1e-6) and far.residual(700) == pytest.approx(free.residual(700), rel=1e-6)


def test_a_mean_at_the_cap_is_every_output_at_the_cap():
    lg = Lengths.of("sharegpt", 198, 1024, max_output=1024)
    assert lg.o2 == pytest.approx(1024 ** 2, rel=1e-3)
    assert lg.residual(512) == pytest.approx(0.5, abs=0.01)  # as equal lengths: half the way, half the tokens left
    assert Lengths.of("fixed", 198, 500, max_output=1024) == Lengths.of("fixed", 198, 500)  # equal lengths: nothing to cut
    with pytest.raises(ConfigError, match="output cap 400: below the mean output of 500 tokens"):
        Lengths.of("sharegpt", 198, 500, max_output=400)
    # built directly, a law without a cap has one mean; a capped one must come from of(), which solves the uncapped mean
    assert Lengths("sharegpt", 198, 500) == Lengths.of("sharegpt", 198, 500)
    with pytest.raises(ConfigError, match="build a capped length law with Lengths.of"):
        Lengths("sharegpt", 198, 500, 1024)


def test_a_capped_run_drains_faster():
    """100 chat requests queued at once on one A100 with ``max_tokens`` 1024: the run ends when its longest output
    does, and the cap bounds that output, so the run is faster than the uncapped law of the same mean (whose longest
    of 100 outputs is about 3,000 tokens); a closed loop's steady state changes only through the running context."""
    d = build_deployment("llama-3.1-8b", "a100-80gb", engine="vllm")
    capped, free = Lengths.of("sharegpt", 198, 551, max_output=1024), Lengths.of("sharegpt", 198, 551)
    assert saturation(d, 198, 551, capped, 100)[0] > 1.5 * saturation(d, 198, 551, free, 100)[0]
    steady_capped, steady_free = at_concurrency(d, 198, 551, 20, capped), at_concurrency(d, 198, 551, 20, free)
    assert steady_capped.tpot_s <= steady_free.tpot_s and steady_capped.tpot_s == pytest.approx(steady_free.tpot_s, rel=0.05)


def test_rows_and_plans_take_an_output_cap(tmp_path):
    from infermeter.perfmodel.planner import plan
    from infermeter.perfmodel.validate import predict

    head = "id,model,hardware,gpus,tp,pp,weight_dtype,engine,scenario,concurrency,input_tokens,output_tokens,metric,value,conditions,settings\n"
    p = tmp_path / "m.csv"
    p.write_text(head + "a,llama-3.1-8b,a100-80gb,1,1,1,fp16,vllm,saturated,max,198,551,output_tokens_per_s,100,,"
                        "lengths=sharegpt; requests=100\n"
                      + "b,llama-3.1-8b,a100-80gb,1,1,1,fp16,vllm,saturated,max,198,551,output_tokens_per_s,100,,"
                        "lengths=sharegpt; requests=100; max_output=1024\n")
    free, capped = load_rows(p)
    assert predict(capped) > 1.5 * predict(free)
    chat = plan("llama-3.1-8b", "a100-80gb", input_tokens=198, output_tokens=551, rate=2.0, requests=100, lengths="sharegpt",
                max_output=1024)
    assert chat.to_json()["max_output"] == 1024 and "max_output" not in plan("llama-3.1-8b", "a100-80gb").to_json()
    with pytest.raises(ConfigError, match="--max-output 1024: equal lengths have no tail to cap"):
        plan("llama-3.1-8b", "a100-80gb", max_output=1024)


def test_a_capped_plan_must_fit_the_prompt_and_the_cap():
    """A server admits a request only if its prompt and ``max_tokens`` fit its context: the plan sizes the one sequence
    that must fit in the KV cache with the cap, not the mean output."""
    from infermeter.perfmodel.planner import plan

    capped = plan("llama-3.1-8b", "h100-sxm", input_tokens=198, output_tokens=551, lengths="sharegpt", max_output=1024)
    assert capped.deployment.max_model_len == 198 + 1024
    assert plan("llama-3.1-8b", "h100-sxm", input_tokens=198, output_tokens=551, lengths="sharegpt").deployment.max_model_len == 749
