"""Speculative decoding in the twin: the option parser, the acceptance sampler, and an engine that verifies
k drafted tokens per step (counters, token delivery, KV blocks, fewer steps than plain decoding)."""

import dataclasses
import math
import random

import pytest

from infermeter.errors import ConfigError
from infermeter.twin.deploy import fake_twin
from infermeter.twin.loop import ListSource, VirtualClock, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import SimRequest
from infermeter.twin.speculative import draw_accepted, expected_tokens_per_step, parse_speculative
from infermeter.telemetry.spec_decode import spec_decode_block


@pytest.mark.parametrize("k,a", [(1, 0.5), (3, 0.6), (4, 0.9), (5, 0.0), (2, 1.0)])
def test_sampled_tokens_per_step_match_the_closed_form(k, a):
    rng = random.Random(7)
    n = 40_000
    c = parse_speculative(f"ngram:k={k},acceptance={a}").conditional
    draws = [draw_accepted(rng, k, c) + 1 for _ in range(n)]
    mean = sum(draws) / n
    var = sum((d - mean) ** 2 for d in draws) / (n - 1)
    assert abs(mean - expected_tokens_per_step(k, a)) <= 5 * math.sqrt(var / n) + 1e-12
    # P(L >= 1) = c: the first draft is accepted with the conditional probability
    first = sum(d >= 2 for d in draws) / n
    assert abs(first - c) <= 5 * math.sqrt(c * (1 - c) / n) + 1e-12


def test_closed_form_is_one_plus_k_times_the_rate():
    assert expected_tokens_per_step(3, 0.6) == pytest.approx(1 + 3 * 0.6)
    assert expected_tokens_per_step(4, 1.0) == 5.0
    assert expected_tokens_per_step(4, 0.0) == 1.0


@pytest.mark.parametrize("text", ["", "foo:k=3,acceptance=0.5", "ngram:k=3", "ngram:acceptance=0.5",
                                  "ngram:k=0,acceptance=0.5", "ngram:k=3,acceptance=1.5", "ngram:k=x,acceptance=0.5",
                                  "draft:k=3,acceptance=0.5", "eagle:k=3,acceptance=0.5,colour=red",
                                  "mtp:k=3,acceptance=nan"])
def test_bad_speculative_is_a_one_line_config_error(text):
    with pytest.raises(ConfigError) as e:
        parse_speculative(text)
    assert "--speculative" in str(e.value) and "\n" not in str(e.value)


def test_parser_reads_every_method():
    assert parse_speculative("eagle:k=4,acceptance=0.7").draft_fraction == 0.1
    assert parse_speculative("ngram:k=3,acceptance=0.6").draft_fraction == 0.0
    d = parse_speculative("draft:llama-3.1-8b,k=4,acceptance=0.7,draft_cost=0.2,seed=3")
    assert (d.method, d.draft_model, d.k, d.acceptance, d.draft_cost, d.seed) == ("draft", "llama-3.1-8b", 4, 0.7, 0.2, 3)
    assert parse_speculative(d.label()).config == dataclasses.replace(d.config, seed=0)


def _run(spec, n=60, out=120, keep=True, gap=0.005):
    twin = fake_twin(predictor=LinearStepTime(base_s=0.01, per_token_s=1e-4), num_blocks=2048)
    if spec:
        twin = dataclasses.replace(twin, speculative=parse_speculative(spec))
    eng = twin.engines(keep_token_times=keep)[0]
    reqs = [SimRequest(rid=i, arrival=i * gap, prompt_tokens=64 + i, max_tokens=out - (i % 7)) for i in range(n)]
    done = []
    end = run_virtual(eng, ListSource(reqs), done.append, VirtualClock())
    return eng, done, end


def test_speculative_engine_counts_as_vllm_and_delivers_every_token():
    eng, done, _ = _run("ngram:k=3,acceptance=0.6")
    assert len(done) == 60
    assert all(r.outputs == r.max_tokens and len(r.token_times) == r.outputs for r in done)
    assert all(b >= a for r in done for a, b in zip(r.token_times, r.token_times[1:]))
    assert eng.generation_tokens_total == sum(r.max_tokens for r in done)
    assert eng.pool.num_free == eng.pool.num_blocks  # every block back
    assert eng.spec_draft_tokens == 3 * eng.spec_drafts
    per_pos = eng.spec_accepted_per_pos
    assert sum(per_pos) == eng.spec_accepted and per_pos[0] >= per_pos[1] >= per_pos[2]
    # several tokens arrive at once when drafts are accepted
    assert any(a == b for r in done for a, b in zip(r.token_times, r.token_times[1:]))


def test_the_engine_reports_the_acceptance_rate_it_was_given():
    # one draw per step shared by the batch: steps are the independent trials, so spread the arrivals
    # (about 2,500 steps: the rate's standard error is ~0.008)
    eng, done, _ = _run("ngram:k=3,acceptance=0.6", keep=False, gap=0.5)
    b = spec_decode_block(eng.spec_drafts, eng.spec_draft_tokens, eng.spec_accepted, eng.spec_accepted_per_pos)
    assert eng.steps > 2000
    assert b["acceptance_rate"] == pytest.approx(0.6, abs=0.05)  # acceptance= is vLLM's accepted / drafted
    assert b["conditional_acceptance"] == pytest.approx(eng.spec.conditional, abs=0.05)


def test_speculation_takes_fewer_steps_and_the_plain_engine_is_unchanged():
    plain, done0, end0 = _run(None)
    spec, done1, end1 = _run("eagle:k=4,acceptance=0.8")
    assert plain.spec_drafts == 0 and plain.spec_accepted_per_pos == []
    assert spec.steps < plain.steps
    assert [r.outputs for r in done0] == [r.outputs for r in sorted(done1, key=lambda r: r.rid)] or \
        sorted(r.outputs for r in done0) == sorted(r.outputs for r in done1)


def test_acceptance_zero_is_plain_decoding_with_the_verify_cost():
    spec, done, _ = _run("ngram:k=2,acceptance=0.0", keep=False)
    assert spec.spec_accepted == 0 and spec.spec_drafts > 0
    assert all(r.outputs == r.max_tokens for r in done)


def test_same_seed_same_run_other_seed_other_draws():
    a, da, ea = _run("ngram:k=3,acceptance=0.6,seed=1", keep=False)
    b, db, eb = _run("ngram:k=3,acceptance=0.6,seed=1", keep=False)
    c, _, _ = _run("ngram:k=3,acceptance=0.6,seed=2", keep=False)
    assert ea == eb and a.spec_accepted_per_pos == b.spec_accepted_per_pos
    assert c.spec_accepted_per_pos != a.spec_accepted_per_pos


@pytest.mark.parametrize("k,c", [(1, 0.3), (3, 0.6), (5, 0.9), (4, 0.0), (2, 1.0)])
def test_conditional_gives_the_rate_of_that_per_position_probability(k, c):
    from infermeter.twin.speculative import acceptance_rate_of

    s = parse_speculative(f"ngram:k={k},conditional={c}")
    assert s.acceptance == pytest.approx(acceptance_rate_of(k, c), abs=1e-12)
    assert s.conditional == pytest.approx(c, abs=1e-9)
    assert s.acceptance <= c + 1e-12  # the rate is never above the conditional probability


def test_acceptance_and_conditional_together_are_refused():
    with pytest.raises(ConfigError):
        parse_speculative("ngram:k=3,acceptance=0.6,conditional=0.6")


def test_the_twin_and_the_planner_share_one_parser():
    from infermeter.perfmodel.speculative import parse_spec

    for text in ("ngram:k=3,acceptance=0.6", "draft:llama-3.1-8b,k=4,rate=0.7,seed=2", "mtp:k=1,conditional=0.8"):
        assert parse_speculative(text).config == parse_spec(text)


def test_simulated_server_metrics_carry_the_block_only_with_speculation():
    from infermeter.measure.simulate import _spec_decode, engine_stats

    spec, _, _ = _run("mtp:k=2,acceptance=0.7", keep=False)
    plain, _, _ = _run(None, keep=False)
    block = _spec_decode([engine_stats(spec), engine_stats(spec)])["spec_decode"]
    assert block["drafts"] == 2 * spec.spec_drafts and block["num_speculative_tokens"] == 2
    assert block["acceptance_rate"] == pytest.approx(spec.spec_accepted / spec.spec_draft_tokens)
    assert _spec_decode([engine_stats(plain)]) == {}
