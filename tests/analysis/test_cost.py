"""Cost figures from throughput: hand-computed cases, run directories, sweeps, the CLI's JSON."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from infermeter.analysis.cost import (
    Throughput,
    best_by_group,
    compute_cost,
    cost_for_throughput,
    cost_runs,
    load_subject,
)
from infermeter.analysis.prices import PriceOptions, resolve_price
from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel.configspec import parse_config

TODAY = dt.date(2026, 11, 29)
A100_1628 = PriceOptions(price_per_hour=16.28)


def test_issue_example_4xa100_at_1628_per_hour_and_1000_tokens_per_s():
    price = resolve_price(parse_config("4xa100-80gb"), A100_1628, today=TODAY)
    r = compute_cost(price, Throughput(output_tokens_per_s=1000, input_tokens_per_s=2000, requests_per_s=4))
    assert round(r.usd_per_1m_output_tokens, 2) == 4.52  # 16.28 / 3.6M tokens per hour x 1e6
    assert r.usd_per_1m_output_tokens == pytest.approx(4.522222, rel=1e-6)
    assert r.usd_per_1k_output_tokens == pytest.approx(0.004522222, rel=1e-6)
    assert r.usd_per_1m_input_tokens == pytest.approx(2.261111, rel=1e-6)
    assert r.usd_per_1m_total_tokens == pytest.approx(1.507407, rel=1e-6)
    assert r.usd_per_1m_requests == pytest.approx(1130.5556, rel=1e-6)
    assert (r.usd_per_hour, r.usd_per_month) == (16.28, pytest.approx(11721.6))  # the study's $11,722
    assert r.output_tokens_per_usd == pytest.approx(221130.22, rel=1e-6)
    assert r.total_tokens_per_usd == pytest.approx(663390.66, rel=1e-6)


def test_overhead_raises_the_hour_and_utilization_lowers_the_rate():
    r = cost_for_throughput("4xa100-80gb", 1000.0, 0.0, 4.0, options=A100_1628, overhead=0.2, utilization=0.5)
    assert r.usd_per_hour == pytest.approx(19.536)
    assert r.usd_per_1m_output_tokens == pytest.approx(10.853333, rel=1e-6)  # 19.536 / (500 x 3600) x 1e6
    assert r.usd_per_1m_input_tokens is None  # no input tokens: no figure, not infinity
    assert r.subject.source == "predicted"


@pytest.mark.parametrize("kw,match", [
    ({"overhead": -0.1}, r"--overhead -0.1"),
    ({"utilization": 0.0}, r"--utilization 0.0"),
    ({"utilization": 1.5}, r"--utilization 1.5"),
])
def test_bad_inputs_name_the_flag(kw, match):
    with pytest.raises(ConfigError, match=match):
        cost_for_throughput("4xa100-80gb", 1000.0, 0.0, 4.0, options=A100_1628, **kw)


def test_zero_throughput_is_an_error_naming_the_run(make_cost_run):
    d = make_cost_run("idle", output_tps=0.0)
    with pytest.raises(DataError, match=rf"{d}: output_token_throughput is 0.0"):
        cost_runs([d], options=A100_1628, today=TODAY)


def test_missing_throughput_field_names_file_and_field(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"output_token_throughput": 5.0, "request_throughput": "fast"}))
    with pytest.raises(DataError, match=r"broken/summary.json: field 'input_token_throughput' is None"):
        load_subject(d)
    with pytest.raises(DataError, match=r"nowhere: no summary.json"):
        load_subject(tmp_path / "nowhere")


def test_hardware_comes_from_the_flag_or_the_run(make_cost_run):
    in_run = make_cost_run("r1", hardware="2xh100-sxm:tp2", hardware_in="run")
    none = make_cost_run("r2", hardware_in="none")
    [r] = cost_runs([in_run], options=PriceOptions(price_per_gpu_hour=3.0), today=TODAY)
    assert (r.hardware, r.usd_per_hour) == ("2xh100-sxm:tp2", 6.0)
    with pytest.raises(DataError, match=rf"{none}: no hardware in run.json or summary.json; pass --hardware"):
        cost_runs([none], options=A100_1628, today=TODAY)
    [f] = cost_runs([none], hardware="4xa100-80gb", options=A100_1628, today=TODAY)
    assert f.hardware == "4xa100-80gb:tp4"


def test_one_price_per_hour_cannot_price_several_configurations(make_cost_run):
    a = make_cost_run("a", hardware="4xa100-80gb:tp4")
    b = make_cost_run("b", hardware="2xh100-sxm:tp2")
    with pytest.raises(ConfigError, match=r"--price-per-hour prices one configuration, but there are 2"):
        cost_runs([a, b], options=A100_1628, today=TODAY)


def test_sweep_uses_the_highest_throughput_step_that_met_the_slo(make_cost_run):
    steps = [
        {"offered_rate": 1.0, "meets_slo": True, "output_token_throughput": 250.0, "input_token_throughput": 500.0,
         "request_throughput": 1.0},
        {"offered_rate": 4.0, "meets_slo": True, "output_token_throughput": 1000.0, "input_token_throughput": 2000.0,
         "request_throughput": 4.0, "goodput": 3.9},
        {"offered_rate": 8.0, "meets_slo": False, "output_token_throughput": 1800.0, "input_token_throughput": 3600.0,
         "request_throughput": 7.2},
    ]
    d = make_cost_run("sweep", steps=steps)
    [r] = cost_runs([d], options=A100_1628, today=TODAY)
    assert r.usd_per_1m_output_tokens == pytest.approx(4.522222, rel=1e-6)
    assert r.subject.throughput.good_requests_per_s == 3.9
    assert r.subject.basis.startswith("sweep step 1, offered 4 req/s")


def test_sweep_step_without_rates_reads_its_own_summary(make_cost_run):
    d = make_cost_run("sweep2", steps=[{"offered_rate": 2.0, "meets_slo": True}])
    (d / "steps" / "0").mkdir(parents=True)
    (d / "steps" / "0" / "summary.json").write_text(json.dumps(
        {"output_token_throughput": 500.0, "input_token_throughput": 0.0, "request_throughput": 2.0}))
    assert load_subject(d).throughput.output_tokens_per_s == 500.0


def test_sweep_where_no_step_met_the_slo_is_an_error(make_cost_run):
    d = make_cost_run("sweep3", steps=[{"offered_rate": 2.0, "meets_slo": False, "output_token_throughput": 9.0}])
    with pytest.raises(DataError, match=rf"{d}: none of the sweep's 1 steps met the SLO"):
        load_subject(d)


def test_best_by_group_reports_the_margin_to_the_runner_up():
    picks = best_by_group([("chat", "a", 3.0), ("chat", "b", 4.5), ("code", "c", 2.0)], lambda x: x[2], lambda x: x[0])
    assert (picks["chat"].best[1], picks["chat"].runner_up[1]) == ("a", "b")
    assert (picks["chat"].margin, picks["chat"].margin_pct) == (1.5, 0.5)
    assert picks["code"].runner_up is None and picks["code"].margin is None


def test_cli_json_has_the_issue_keys_and_the_dated_price(make_cost_run, cost_cli_app):
    d = make_cost_run("chat-a100", source="simulated")
    res = CliRunner().invoke(cost_cli_app, ["cost", str(d), "--price-per-hour", "16.28", "--overhead", "0.2", "--json"])
    assert res.exit_code == 0, res.output
    [run] = json.loads(res.stdout)["runs"]
    for key in ("usd_per_hour", "usd_per_month", "usd_per_1m_output_tokens", "usd_per_1m_input_tokens",
                "usd_per_1m_total_tokens", "usd_per_1m_requests", "price_source", "price_date"):
        assert key in run
    assert run["usd_per_hour"] == pytest.approx(19.536)
    assert (run["source"], run["overhead"], run["price_source"]) == ("simulated", 0.2, "--price-per-hour on the command line")
    assert run["price_date"] == dt.date.today().isoformat()


def test_cli_table_prints_the_price_its_date_and_the_source_label(make_cost_run, cost_cli_app):
    d = make_cost_run("chat-h100", hardware="8xh100-sxm")
    res = CliRunner().invoke(cost_cli_app, ["cost", str(d), "--provider", "aws", "--utilization", "0.5"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "8xh100-sxm:tp8: $55.04/h (aws p5.48xlarge" in res.stdout
    assert "date: 2026-11-09" in res.stdout
    assert "measured" in res.stdout and "average utilization 50%" in res.stdout
