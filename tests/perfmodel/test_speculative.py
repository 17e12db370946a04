"""Speculative decoding in the performance model: acceptance arithmetic, the physical bound, batch effect, plan --speculative."""

from __future__ import annotations

import json
import random

import pytest
import typer
from typer.testing import CliRunner

from infermeter.cli import cmd_plan
from infermeter.errors import ConfigError
from infermeter.perfmodel.api import build_deployment
from infermeter.perfmodel.planner import plan
from infermeter.perfmodel.speculative import (
    SpecConfig,
    acceptance_rate_of,
    conditional_from_rate,
    expected_tokens_per_step,
    geometric_tokens_per_step,
    parse_spec,
    position_acceptance,
    sample_accepted,
    spec_step,
)

DRAFT = "draft:llama-3.1-8b,k=4,acceptance=0.7"
TARGET = ("llama-3.1-70b", "4xa100-80gb:tp4")


def test_expected_tokens_is_one_plus_k_times_the_acceptance_rate_and_the_geometric_sum_of_the_conditional():
    for k in (1, 3, 4, 8):
        for a in (0.0, 0.3, 0.7, 0.95, 1.0):
            c = conditional_from_rate(k, a)
            assert expected_tokens_per_step(k, a) == pytest.approx(1 + k * a)
            assert geometric_tokens_per_step(k, c) == pytest.approx(1 + k * a, abs=1e-9)
            assert acceptance_rate_of(k, c) == pytest.approx(a, abs=1e-9)
            assert c >= a - 1e-12  # the conditional probability is never below the rate
    assert geometric_tokens_per_step(4, 0.7) == pytest.approx((1 - 0.7**5) / 0.3)
    assert conditional_from_rate(1, 0.4) == 0.4  # one draft: the two are the same


def test_sampled_accepted_length_matches_the_expectation():
    rng = random.Random(7)
    n = 20000
    s = parse_spec("ngram:k=4,acceptance=0.7")
    draws = [sample_accepted(rng, 4, s.conditional) for _ in range(n)]
    assert sum(draws) / n + 1 == pytest.approx(s.expected_tokens, rel=0.03)  # + the target's own token
    assert sum(draws) / (4 * n) == pytest.approx(0.7, abs=0.02)  # vLLM's accepted / drafted
    assert position_acceptance(3, acceptance_rate_of(3, 0.5)) == pytest.approx([0.5, 0.25, 0.125])
    assert sum(position_acceptance(4, 0.7)) / 4 == pytest.approx(0.7)


def test_parse_the_spec_strings():
    s = parse_spec(DRAFT)
    assert (s.method, s.draft_model, s.k, s.acceptance) == ("draft", "llama-3.1-8b", 4, 0.7)
    assert SpecConfig.parse("ngram:k=3,acceptance=0.6") == SpecConfig("ngram", 3, 0.6)
    assert parse_spec(s.label) == s
    assert parse_spec("EAGLE:acceptance=0.8,k=2").method == "eagle"
    assert parse_spec("ngram:k=3,rate=0.6") == parse_spec("ngram:k=3,acceptance=0.6")
    c = parse_spec("ngram:k=3,conditional=0.6")  # the per-position form, converted to the rate
    assert c.acceptance == pytest.approx((0.6 + 0.36 + 0.216) / 3) and c.conditional == pytest.approx(0.6)
    d = parse_spec("draft:llama-3.1-8b,k=4,acceptance=0.7,draft_cost=0.2,seed=3")
    assert (d.draft_cost, d.seed) == (0.2, 3) and parse_spec(d.label).draft_cost == 0.2


@pytest.mark.parametrize("bad", ["", "medusa:k=2,acceptance=0.5", "draft:k=4,acceptance=0.7", "ngram:k=3",
                                 "ngram:k=0,acceptance=0.5", "ngram:k=3,acceptance=1.5", "ngram:k=x,acceptance=0.5", "eagle:k=2,foo=1",
                                 "ngram:k=3,acceptance=0.5,conditional=0.5", "ngram:k=3,k=4,acceptance=0.5",
                                 "ngram:k=3,conditional=1.2", "ngram:k=3,acceptance=0.5,draft_cost=-1"])
def test_bad_specs_are_refused_by_name(bad):
    with pytest.raises(ConfigError, match="--speculative"):
        parse_spec(bad)


def test_70b_with_8b_draft_at_batch_1_lies_between_1_2_and_the_bound_and_shrinks_at_256():
    # acceptance 0.7 is vLLM's rate: the bound (1 - c^(k+1)) / (1 - c) at its conditional probability c is 1 + k a
    c = parse_spec(DRAFT).conditional
    bound = (1 - c**5) / (1 - c)
    assert bound == pytest.approx(1 + 4 * 0.7)
    one = plan(*TARGET, concurrency=1, speculative=DRAFT).to_json()
    s1 = one["speculative"]
    assert 1.2 < s1["speedup"] <= bound
    assert s1["speedup_bound"] == pytest.approx(bound, abs=1e-3)
    plain = plan(*TARGET, concurrency=1).to_json()
    assert s1["tpot_ms_without"] == pytest.approx(plain["tpot_ms"], rel=1e-6)
    assert one["tpot_ms"] == pytest.approx(plain["tpot_ms"] / s1["speedup"], rel=1e-3)
    assert s1["conditional_acceptance"] == pytest.approx(c, abs=1e-4)
    lo, hi = one["intervals"]["tpot_ms"]
    assert lo <= one["tpot_ms"] <= hi
    many = plan(*TARGET, concurrency=256, speculative=DRAFT).to_json()["speculative"]
    assert many["speedup"] < s1["speedup"]
    assert many["verify_step_ms"] > many["base_step_ms"] * 2  # compute-bound: k+1 tokens a sequence cost
    assert s1["speedup_at_acceptance"]["0.60"] < s1["speedup"] < s1["speedup_at_acceptance"]["0.80"]


@pytest.mark.parametrize("method", ["draft:llama-3.1-8b", "eagle", "mtp", "ngram"])
@pytest.mark.parametrize("a", [0.3, 0.7, 0.95])
def test_the_speedup_never_exceeds_the_expected_tokens(method, a):
    d = build_deployment(*TARGET)
    spec = parse_spec(f"{method},k=4,acceptance={a}")
    for n in (1, 16, 256):
        step = spec_step(d, spec, n, n * 1100)
        assert 0 < step.speedup <= step.expected_tokens
        assert step.t_verify >= step.t_base and step.t_draft >= 0


def test_draft_costs_order_ngram_head_model():
    d = build_deployment(*TARGET)
    t = {m: spec_step(d, parse_spec(f"{m},k=4,acceptance=0.7"), 1, 1100).t_draft for m in ("ngram", "eagle", "draft:llama-3.1-8b")}
    assert t["ngram"] == 0.0 < t["eagle"] < t["draft:llama-3.1-8b"]
    # memory-bound at batch 1: verifying 5 tokens costs nearly one step, so n-gram drafting gets close to E
    ng = spec_step(d, parse_spec("ngram:k=4,acceptance=0.7"), 1, 1100)
    assert ng.speedup > 0.9 * ng.expected_tokens
    # draft_cost=F replaces the modelled draft by k F target decode steps
    fixed = spec_step(d, parse_spec("draft:llama-3.1-8b,k=4,acceptance=0.7,draft_cost=0.25"), 1, 1100)
    assert fixed.t_draft == pytest.approx(4 * 0.25 * fixed.t_base)


@pytest.mark.parametrize("method", ["draft:llama-3.1-8b", "eagle"])
def test_an_eager_engine_drafts_eagerly_too(method):
    """``--enforce-eager`` is the whole engine's: the draft model (or EAGLE head) launches its layers at each of its k
    draft steps as the target does at its verification step. (Whether speculation then gains more or less than with
    graphs depends on the draft: a one-layer head adds little and amortises the target's launches over more tokens.)"""
    spec = parse_spec(f"{method},k=4,acceptance=0.7")
    graphs, eager = build_deployment(*TARGET), build_deployment(*TARGET, enforce_eager=True)
    g, e = spec_step(graphs, spec, 1, 1100), spec_step(eager, spec, 1, 1100)
    draft_layers = build_deployment("llama-3.1-8b", TARGET[1]).spec.layers if method.startswith("draft") else 1
    per_layer = eager.layer_overhead_us * 1e-6  # one family, one engine: the draft's per-layer cost is the target's
    assert e.t_draft - g.t_draft == pytest.approx(4 * draft_layers * per_layer)
    assert e.t_base - g.t_base == pytest.approx(eager.spec.layers * per_layer) == pytest.approx(e.t_verify - g.t_verify)


def _app() -> typer.Typer:
    a = typer.Typer()

    @a.callback()
    def _root() -> None:
        """test app"""

    cmd_plan.register(a)
    return a


def test_cli_plan_speculative_json_has_tpot_ms():
    res = CliRunner().invoke(_app(), ["plan", "--model", TARGET[0], "--gpu", TARGET[1], "--speculative", DRAFT, "--json"])
    assert res.exit_code == 0, res.output
    p = json.loads(res.output)
    assert p["tpot_ms"] > 0 and p["speculative"]["method"] == "draft"
    assert p["tpot_ms"] < p["speculative"]["tpot_ms_without"]


def test_cli_bad_speculative_is_a_config_error():
    res = CliRunner().invoke(_app(), ["plan", "--model", TARGET[0], "--gpu", TARGET[1], "--speculative", "medusa:k=2", "--json"])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError) and "--speculative" in str(res.exception)
