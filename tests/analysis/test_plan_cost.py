"""`infermeter plan --cost`: predictions priced like runs, labelled predicted."""

import json

import pytest
from typer.testing import CliRunner

from infermeter.cli.main import app


def plan_json(*args):
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", *args, "--cost", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_plan_cost_uses_saturation_throughput_and_the_given_price():
    p = plan_json("--gpu", "h100-sxm", "--price-per-hour", "10")
    sat = p["saturation_output_tokens_per_s"]
    c = p["cost"]
    assert c["usd_per_hour"] == pytest.approx(10.0)
    assert c["usd_per_1m_output_tokens"] == pytest.approx(10.0 / 3600 / sat * 1e6)
    # 1000 in / 200 out per request by default: requests/s = sat / 200
    assert c["usd_per_1m_requests"] == pytest.approx(10.0 / 3600 / (sat / 200) * 1e6)
    assert c["basis"] == "predicted saturation throughput"


def test_plan_cost_for_a_config_that_does_not_fit_is_null():
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "1", "--cost",
                                 "--price-per-hour", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cost"] is None
