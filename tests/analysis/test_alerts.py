import pytest

from infermeter.analysis.alerts import evaluate_alerts, known_names, parse_alert, unavailable_alerts
from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError

SUMMARY = Summary.from_json({
    "completed": 95, "failed": 5, "error_rate": 0.05,
    "ttft_ms": {"p95": 612.0, "p99": 900.0, "mean": 300.0},
    "tpot_ms": {"p95": 40.0},
    "output_tokens_per_s_per_request": {"mean": 25.0, "p50": 31.0},
    "server_metrics": {"kv_cache_usage_max": 0.9, "kv_cache_usage_mean": 0.4, "num_requests_waiting_max": 12.0,
                       "prefix_cache_hit_rate": None},
    "gpu": {"temperature_c_max": 83.0, "throttled_fraction": 0.1},
})


def test_parse_accepts_operators_and_spacing():
    a = parse_alert(" ttft_p95_ms >= 500 ")
    assert (a.metric, a.op, a.threshold, a.text) == ("ttft_p95_ms", ">=", 500.0, "ttft_p95_ms >= 500")
    assert parse_alert("kv_cache_usage>0.85").threshold == 0.85
    assert parse_alert("error_rate>1e-2").threshold == 0.01
    assert parse_alert("output_tps_per_user<30").op == "<"


@pytest.mark.parametrize("bad", ["ttft_p95_ms", "ttft_p95_ms>>5", ">5", "ttft_p95_ms>fast", ""])
def test_parse_rejects_malformed_rules_naming_them(bad):
    with pytest.raises(ConfigError, match="--alert"):
        parse_alert(bad)


def test_unknown_metric_suggests_close_names():
    with pytest.raises(ConfigError, match="did you mean .*ttft_p95_ms"):
        parse_alert("ttft_p96_ms>500")


@pytest.mark.parametrize("alias", ["ttft_p95", "ttft_ms.p95", "TTFT_P95_MS"])
def test_old_spellings_of_a_metric_are_aliases(alias):
    fired = evaluate_alerts([parse_alert(f"{alias}>500")], Summary.from_json({"ttft_ms": {"p95": 612.0}}), [])
    assert [f["value"] for f in fired] == [612.0]


def test_throughput_alert_reads_the_summary_under_both_names():
    s = Summary(output_token_throughput=90.0)
    assert [len(evaluate_alerts([parse_alert(f"{n}<100")], s, [])) for n in ("output_tokens_per_s", "output_token_throughput")] == [1, 1]


def test_whole_run_evaluation():
    rules = [parse_alert(r) for r in (
        "ttft_p95_ms>500",            # 612 > 500: fires
        "tpot_p95_ms>50",             # 40: quiet
        "kv_cache_usage>0.85",        # max 0.9: fires
        "output_tps_per_user<30",     # mean 25: fires
        "error_rate>0.1",             # 0.05: quiet
        "gpu_temperature_c>=83",      # 83: fires
        "prefix_cache_hit_rate<0.5",  # not measured: never fires
    )]
    fired = evaluate_alerts(rules, SUMMARY, [])
    assert [(f["metric"], f["value"]) for f in fired] == [
        ("ttft_p95_ms", 612.0), ("kv_cache_usage", 0.9), ("output_tps_per_user", 25.0), ("gpu_temperature_c", 83.0)]
    assert fired[0]["scope"] == "run" and fired[0]["start_s"] is None
    assert fired[0]["message"] == "ttft_p95_ms = 612 > 500 (whole run)"
    assert unavailable_alerts(rules, SUMMARY) == ["prefix_cache_hit_rate<0.5"]


def test_error_rate_computed_when_a_window_lacks_it():
    a = parse_alert("error_rate>0.04")
    fired = evaluate_alerts([a], Summary(completed=90, failed=10, error_rate=0.1), [{"start_s": 0, "end_s": 10, "completed": 9, "failed": 1}])
    assert [(f["scope"], f["value"]) for f in fired] == [("run", 0.1), ("window", pytest.approx(0.1))]


def test_consecutive_firing_windows_merge_with_worst_value():
    windows = [
        {"start_s": 0, "end_s": 60, "ttft_ms": {"p95": 400.0}},
        {"start_s": 60, "end_s": 120, "ttft_ms": {"p95": 700.0}},
        {"start_s": 120, "end_s": 180, "ttft_ms": {"p95": 800.0}},
        {"start_s": 180, "end_s": 240, "ttft_ms": {"p95": 450.0}},
        {"start_s": 240, "end_s": 300, "ttft_ms": {"p95": 510.0}},
    ]
    fired = evaluate_alerts([parse_alert("ttft_p95_ms>500")], Summary.from_json({"ttft_ms": {"p95": 480.0}}), windows)
    assert [(f["scope"], f["start_s"], f["end_s"], f["value"], f["windows"]) for f in fired] == [
        ("window", 60, 180, 800.0, 2), ("window", 240, 300, 510.0, 1)]
    assert fired[0]["message"] == "ttft_p95_ms = 800 > 500 (window 60-180 s (2 windows))"


def test_lower_bound_alert_reports_the_lowest_window_value():
    windows = [
        {"start_s": 0, "end_s": 10, "output_tokens_per_s_per_request": {"mean": 28.0}},
        {"start_s": 10, "end_s": 20, "output_tokens_per_s_per_request": {"mean": 22.0}},
        {"start_s": 20, "end_s": 30},  # no data: breaks the span, never fires
        {"start_s": 30, "end_s": 40, "server_metrics": {"kv_cache_usage_max": 0.95}},
    ]
    rules = [parse_alert("output_tps_per_user<30"), parse_alert("kv_cache_usage>0.85")]
    fired = evaluate_alerts(rules, Summary(), windows)
    assert [(f["metric"], f["start_s"], f["end_s"], f["value"]) for f in fired] == [
        ("output_tps_per_user", 0, 20, 22.0), ("kv_cache_usage", 30, 40, 0.95)]


@pytest.mark.parametrize("name, summary, expected", [
    ("ttft_p99_ms", {"ttft_ms": {"p99": 9.0}}, 9.0),
    ("e2e_p95_ms", {"e2e_ms": {"p95": 8.0}}, 8.0),
    ("itl_p95_ms", {"itl_ms": {"p95": 7.0}}, 7.0),
    ("schedule_lag_p99_ms", {"schedule_lag_ms": {"p99": 6.0}}, 6.0),
    ("output_tps_per_user_p50", {"output_tokens_per_s_per_request": {"p50": 5.0}}, 5.0),
    ("num_requests_waiting", {"server_metrics": {"num_requests_waiting_max": 4.0}}, 4.0),
    ("num_preemptions", {"server_metrics": {"num_preemptions": 3.0}}, 3.0),
    ("energy_per_output_token_j", {"gpu": {"energy_per_output_token_j": 2.0}}, 2.0),
    ("gpu_throttled_fraction", {"gpu": {"throttled_fraction": 0.5}}, 0.5),
    ("request_throughput", {"request_throughput": 1.5}, 1.5),
])
def test_names_read_their_summary_field(name, summary, expected):
    fired = evaluate_alerts([parse_alert(f"{name}>0")], Summary.from_json(summary), [])
    assert [f["value"] for f in fired] == [expected]
    assert name in known_names()
