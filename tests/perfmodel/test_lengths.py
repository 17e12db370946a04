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
