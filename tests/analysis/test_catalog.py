"""The metric catalog: one grammar that --alert, --slo, compare --metric and history --trend share."""

import pytest

from infermeter.analysis import catalog
from infermeter.analysis.alerts import evaluate_alerts, parse_alert
from infermeter.analysis.compare import spec
from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig, parse_slo_rules
from infermeter.report.history import metric_column

SUMMARY = {"ttft_ms": {"count": 200, "p50": 100.0, "p95": 612.0}, "output_token_throughput": 90.0,
           "server_metrics": {"kv_cache_usage_max": 0.9}}


@pytest.mark.parametrize("name", ["ttft_p95_ms", "ttft_ms.p95", "ttft_p95"])
def test_every_consumer_takes_the_same_names_and_the_old_spellings(name):
    assert catalog.resolve(name).name == "ttft_p95_ms"
    assert evaluate_alerts([parse_alert(f"{name}>500")], Summary.from_json(SUMMARY), [])[0]["value"] == 612.0
    assert spec(name).name == "ttft_p95_ms" and spec(name).q == pytest.approx(0.95)
    assert metric_column(name) == "ttft_p95_ms"
    assert parse_slo_rules(f"{name}=500") == ({"ttft_ms": 500.0}, 95.0)


@pytest.mark.parametrize("name", ["output_tokens_per_s", "output_token_throughput", "output_throughput"])
def test_output_throughput_has_one_name_and_two_aliases(name):
    assert catalog.resolve(name).value(SUMMARY) == 90.0
    assert spec(name).name == "output_tokens_per_s"
    assert metric_column(name) == "output_token_throughput"  # the history column keeps the summary key


def test_a_percentile_in_the_slo_names_sets_the_judged_percentile():
    cfg = RunConfig(url="http://127.0.0.1:1", requests=10, slo="ttft_p95_ms=500,tpot_ms=40")
    assert cfg.slo == {"ttft_ms": 500.0, "tpot_ms": 40.0} and cfg.slo_percentile == 95.0
    with pytest.raises(ConfigError, match="--slo-percentile"):
        RunConfig(url="http://127.0.0.1:1", requests=10, slo="ttft_p95_ms=500", slo_percentile=99)
    with pytest.raises(ConfigError, match="different percentiles"):
        parse_slo_rules("ttft_p95_ms=500,e2e_p99_ms=9000")


def test_unknown_names_get_close_suggestions_in_every_consumer():
    with pytest.raises(ValueError, match="did you mean.*ttft_p95_ms"):
        spec("ttft_p96_ms")
    with pytest.raises(ConfigError, match="--trend 'ttft_p96_ms'"):
        metric_column("ttft_p96_ms")
    with pytest.raises(ConfigError, match="--slo"):
        parse_slo_rules("ttft_p96_ms=5")


def test_a_server_figure_and_its_alias_read_the_server_block():
    assert catalog.resolve("kv_cache_usage").name == "kv_cache_usage_max"
    assert catalog.resolve("kv_cache_usage").value(SUMMARY) == 0.9
    assert catalog.resolve("kv_cache_usage_mean").value(SUMMARY) is None  # not measured: never a number


def test_aliases_never_shadow_a_canonical_name():
    assert not set(catalog.aliases()) & set(catalog.NAMES)
    assert all(v in catalog.NAMES for v in catalog.aliases().values())
