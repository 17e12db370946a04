"""Seed 002's follow-ups run from the shipped study files (speculative decoding; AWQ/GPTQ 4-bit), offline and at
small settings; the speculative claim is checked against the physical bound, the model and the study's own ratio."""

from __future__ import annotations

import datetime as dt

import pytest

from infermeter.errors import ConfigError
from infermeter.study.config import build_study, example_text, load_study_text
from infermeter.study.runner import run_study

TODAY = dt.date(2026, 11, 30)
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
SMALL = {"sync_requests": 6, "saturation_requests": 24, "rate_fractions": [0.5], "requests": 24, "warmup": 0,
         "refine": 0, "converge": False}


def _small(name: str):
    study = load_study_text(example_text(name), name)
    data = study.model_dump(mode="json", exclude_none=True)
    data["load"] = {**data["load"], **SMALL}
    data["load"].pop("concurrency", None)
    data["load"]["concurrency"] = 8
    return build_study(data, name)


@pytest.fixture(scope="module")
def spec_result(tmp_path_factory):
    return run_study(_small("seed-002-speculative"), tmp_path_factory.mktemp("spec") / "out", today=TODAY, now=NOW)


def test_the_speculative_follow_up_runs_and_speculation_cuts_tpot_one_request_at_a_time(spec_result):
    tpot = {c.config: c.latency["unloaded"]["tpot_ms"]["p50"] for c in spec_result.cells}
    assert set(tpot) == {"4xa100 plain", "4xa100 draft-8b", "4xa100 ngram"}
    assert tpot["4xa100 draft-8b"] < tpot["4xa100 plain"] and tpot["4xa100 ngram"] < tpot["4xa100 plain"]
    sd = {c.config: (c.server or {}).get("spec_decode") for c in spec_result.cells}
    assert sd["4xa100 plain"] is None or sd["4xa100 plain"] == {}


def test_the_2_3x_claim_is_checked_against_the_bound_the_model_and_the_study(spec_result):
    (c,) = spec_result.claims
    assert c.claim.metric == "speedup" and c.ceiling == pytest.approx(1 + 4 * 0.7)
    assert c.verdict == ("impossible" if 3 > c.ceiling else "implausible" if 3 > 0.9 * c.ceiling else "possible")
    assert 1.2 < c.predicted < c.ceiling
    tpot = {x.config: x.latency["unloaded"]["tpot_ms"]["p50"] for x in spec_result.cells}
    assert c.study_value == pytest.approx(tpot["4xa100 plain"] / tpot["4xa100 draft-8b"])
    assert "3.8" in c.sentence


def test_the_quantization_follow_up_runs_and_4_bit_weights_decode_faster(tmp_path):
    res = run_study(_small("seed-002-quant"), tmp_path / "out", today=TODAY, now=NOW)
    tpot = {c.config: c.latency["unloaded"]["tpot_ms"]["p50"] for c in res.cells if not c.unavailable}
    assert tpot["4xa100-80gb:tp4 awq"] < tpot["4xa100-80gb:tp4"]
    assert tpot["4xa100-80gb:tp4 gptq"] < tpot["4xa100-80gb:tp4"]


def test_a_bad_speculative_axis_names_its_place():
    with pytest.raises(ConfigError, match="speculative"):
        build_study({"model": "llama-3.1-8b", "configurations": [{"config": "h100-sxm", "speculative": "medusa:k=2"}]},
                    "s.yaml")
    with pytest.raises(ConfigError, match="baseline"):
        build_study({"model": "llama-3.1-8b", "configurations": ["h100-sxm"],
                     "claims": [{"text": "2x", "metric": "speedup", "value": 2, "configuration": "h100-sxm"}]},
                    "s.yaml")
