"""The study file model: defaults, overrides per configuration, durations, and errors that name the field."""

from __future__ import annotations

import pytest

from infermeter.durations import parse_duration
from infermeter.errors import ConfigError
from infermeter.study.config import build_study, example_text, load_study_text


def test_example_is_the_four_gpu_three_profile_study() -> None:
    s = load_study_text(example_text(), "example")
    assert [c.label for c in s.configurations] == ["h100-sxm", "h200", "a100-80gb", "a100-40gb"]
    assert s.profiles == ("chat", "classification", "code")
    assert s.model == "llama-3.1-8b"
    assert all(not c.measured for c in s.configurations)
    assert s.slo.limits == {"ttft_ms": 2000.0, "tpot_ms": 80.0}


@pytest.mark.parametrize("text,seconds", [("72h", 259200.0), ("30m", 1800.0), ("90s", 90.0), ("2d", 172800.0),
                                          ("45", 45.0), (12, 12.0), ("1.5h", 5400.0)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["3 weeks", "-1h", "0", "h"])
def test_bad_duration_names_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError, match="--soak"):
        parse_duration(bad, "--soak")


def test_configuration_forms_and_canonical_labels() -> None:
    s = build_study({"configurations": ["8xA10G:tp4,pp2", {"config": "4xa100-80gb:tp4", "name": "a100-tp4",
                                                             "target": "http://127.0.0.1:8000/v1/"}]}, "t")
    a, b = s.configurations
    assert (a.config, a.label, a.measured) == ("8xa10g:tp4,pp2", "8xa10g:tp4,pp2", False)
    assert (b.config, b.label, b.target, b.measured) == ("4xa100-80gb:tp4", "a100-tp4", "http://127.0.0.1:8000", True)


def test_configuration_load_overrides_the_study_load_field_by_field() -> None:
    s = build_study({"configurations": ["h100-sxm", {"config": "a10g", "load": {"requests": 12, "concurrency": 4}}],
                     "load": {"requests": 300, "sync_requests": 5}}, "t")
    base, small = (s.load_for(c) for c in s.configurations)
    assert (base.requests, base.sync_requests, base.concurrency) == (300, 5, None)
    assert (small.requests, small.sync_requests, small.concurrency) == (12, 5, 4)


@pytest.mark.parametrize("data,needle", [
    ({"configurations": []}, "configurations: give at least one"),
    ({"configurations": ["h100-sxm", "h100-sxm"]}, "h100-sxm appear more than once"),
    ({"configurations": [{"config": "h100-sxm", "target": "http://x:1", "engine": "vllm-cpu"}]},
     "configurations[0]: give target (a URL) or engine"),
    ({"configurations": [{"config": "h100-sxm", "target": "ftp://x"}]}, "configurations[0].target"),
    ({"configurations": ["h100-sxm"], "profiles": ["chat"], "soak": {"duration_s": "1h", "rate_per_s": 1,
                                                                     "profile": "code"}}, "soak.profile 'code'"),
    ({"configurations": [{"config": "h100-sxm", "profiles": ["code"]}], "profiles": ["chat"]}, "profiles ['code']"),
    ({"configurations": ["h100-sxm"], "load": {"kind": "rate"}}, "kind 'rate' needs rate"),
    ({"configurations": ["h100-sxm"], "load": {"rate_fractions": [0.5, 2.0]}}, "load.rate_fractions"),
    ({"configurations": ["h100-sxm"], "volume": {"low": 10, "high": 5}}, "high (5) must be above low (10)"),
    ({"configurations": ["h100-sxm"], "colour": "blue"}, "colour"),
    ({"configurations": [{"config": "a10g", "load": {"requets": 3}}]}, "configuration a10g: requets"),
])
def test_errors_name_the_field(data: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        build_study(data, "study file s.yaml")
    assert needle in str(exc.value) and str(exc.value).startswith("study file s.yaml")


def test_bad_hardware_string_names_it() -> None:
    with pytest.raises(ConfigError, match="4xa100:tq4"):
        build_study({"configurations": ["4xa100:tq4"]}, "t")
