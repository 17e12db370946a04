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
    expected_tokens_per_step,
    parse_spec,
    position_acceptance,
    sample_accepted,
    spec_step,
)

DRAFT = "draft:llama-3.1-8b,k=4,acceptance=0.7"
TARGET = ("llama-3.1-70b", "4xa100-80gb:tp4")


def test_expected_tokens_is_the_sum_of_the_acceptance_powers():
    for k in (1, 3, 4, 8):
        for a in (0.0, 0.3, 0.7, 0.95):
            assert expected_tokens_per_step(k, a) == pytest.approx(sum(a**i for i in range(k + 1)))
    assert expected_tokens_per_step(4, 1.0) == 5.0
    assert expected_tokens_per_step(4, 0.7) == pytest.approx((1 - 0.7**5) / 0.3)


def test_sampled_accepted_length_matches_the_expectation():
    rng = random.Random(7)
    n = 20000
    mean = sum(sample_accepted(rng, 4, 0.7) for _ in range(n)) / n + 1  # + the target's own token
    assert mean == pytest.approx(expected_tokens_per_step(4, 0.7), rel=0.03)
    assert position_acceptance(3, 0.5) == [0.5, 0.25, 0.125]


def test_parse_the_spec_strings():
    s = parse_spec(DRAFT)
    assert (s.method, s.draft_model, s.k, s.acceptance) == ("draft", "llama-3.1-8b", 4, 0.7)
    assert SpecConfig.parse("ngram:k=3,acceptance=0.6") == SpecConfig("ngram", 3, 0.6)
    assert parse_spec(s.label) == s
    assert parse_spec("EAGLE:acceptance=0.8,k=2").method == "eagle"


@pytest.mark.parametrize("bad", ["", "medusa:k=2,acceptance=0.5", "draft:k=4,acceptance=0.7", "ngram:k=3",
                                 "ngram:k=0,acceptance=0.5", "ngram:k=3,acceptance=1.5", "ngram:k=x,acceptance=0.5", "eagle:k=2,foo=1"])
def test_bad_specs_are_refused_by_name(bad):
    with pytest.raises(ConfigError, match="--speculative"):
        parse_spec(bad)


def test_70b_with_8b_draft_at_batch_1_lies_between_1_2_and_the_bound_and_shrinks_at_256():
    bound = (1 - 0.7**5) / (1 - 0.7)
    one = plan(*TARGET, concurrency=1, speculative=DRAFT).to_json()
    s1 = one["speculative"]
    assert 1.2 < s1["speedup"] <= bound
    assert s1["speedup_bound"] == pytest.approx(bound, abs=1e-3)
    plain = plan(*TARGET, concurrency=1).to_json()
    assert s1["tpot_ms_without"] == pytest.approx(plain["tpot_ms"], rel=1e-6)
    assert one["tpot_ms"] == pytest.approx(plain["tpot_ms"] / s1["speedup"], rel=1e-3)
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
