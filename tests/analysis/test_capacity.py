"""Capacity: replicas round up, headroom applied once, exact break-even bands, best value per profile."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from infermeter.analysis.capacity import (
    break_even,
    candidates_from,
    predicted_throughput,
    replicas_needed,
    size,
    volume_grid,
)
from infermeter.analysis.cost import cost_for_throughput
from infermeter.analysis.prices import PriceOptions
from infermeter.cli.cmd_capacity import parse_volume, parse_workload
from infermeter.errors import ConfigError, DataError


def test_replicas_round_up():
    # peak = 1e6 / 86400 x 2 = 23.15 req/s; each replica serves 10 x (1 - 0.2) = 8 -> 2.89 -> 3
    assert replicas_needed(1_000_000, 10.0, peak_factor=2.0, headroom=0.2) == 3
    assert replicas_needed(1_000, 10.0) == 1  # never fewer than one


def test_headroom_is_applied_once():
    # 691,200 req/day = 8 req/s: exactly one replica at 80% of 10 req/s. Applying the
    # headroom twice (8 x 1.2 over 8) would ask for 2.
    assert replicas_needed(691_200, 10.0, peak_factor=1.0, headroom=0.2) == 1
    assert replicas_needed(691_201, 10.0, peak_factor=1.0, headroom=0.2) == 2


@pytest.mark.parametrize("args,match", [
    ((0, 10.0), r"--requests-per-day 0: must be above zero"),
    ((1000, 10.0, 0.5), r"--peak-factor 0.5: must be >= 1"),
    ((1000, 10.0, 1.0, 1.0), r"--headroom 1.0"),
])
def test_impossible_volume_inputs_name_the_flag(args, match):
    with pytest.raises(ConfigError, match=match):
        replicas_needed(*args)


def test_zero_capacity_is_an_error():
    with pytest.raises(DataError, match=r"capacity 0.0 req/s"):
        replicas_needed(1000, 0.0)


def _cand(config: str, usd_per_hour: float, rps: float, profile: str = "chat"):
    cost = cost_for_throughput(config, rps * 100, rps * 200, rps, options=PriceOptions(price_per_hour=usd_per_hour),
                               profile=profile)
    return candidates_from([cost])[0]


def test_size_gives_fleet_cost_and_cost_per_million_requests():
    a100 = _cand("4xa100-80gb", 16.28, 10.0)
    s = size(a100, 1_000_000, peak_factor=2.0, headroom=0.2)
    assert (s.replicas, s.gpus) == (3, 12)
    assert s.usd_per_hour == pytest.approx(48.84)
    assert s.usd_per_month == pytest.approx(35164.8)  # 3 x 16.28 x 720
    assert s.usd_per_1m_requests == pytest.approx(1172.16)  # 35164.8 / (1e6 x 30) x 1e6
    assert a100.capacity_basis == "saturation (predicted)"


def test_break_even_bands_and_crossings_are_exact():
    # A: $10/h, 1 req/s -> a replica per 86,400 req/day; B: $25/h, 3 req/s -> per 259,200.
    a, b = _cand("a100-80gb", 10.0, 1.0), _cand("h100-sxm", 25.0, 3.0)
    be = break_even([a, b], low=50_000, high=500_000, peak_factor=1.0, headroom=0.0)
    got = [(band.low, band.high, band.winner, band.replicas_at_high) for band in be.bands]
    assert got == [
        (50_000, 172_800, a.name, 2),   # A $10-20 vs B $25
        (172_800, 259_200, b.name, 1),  # A $30 vs B $25
        (259_200, 432_000, a.name, 5),  # A $40-50 vs B $50: a tie goes to the first given
        (432_000, 500_000, b.name, 2),  # A $60 vs B $50
    ]
    assert [v for v, _, _ in be.crossings] == [172_800, 259_200, 432_000]
    assert be.crossings[0][1:] == (a.name, b.name)
    assert a.name == "a100-80gb [predicted]"


def test_break_even_grid_marks_the_cheapest():
    a, b = _cand("a100-80gb", 10.0, 1.0), _cand("h100-sxm", 25.0, 3.0)
    be = break_even([a, b], low=100_000, high=1_000_000, headroom=0.0)
    volume, costs, best = be.grid[0]
    assert (volume, costs[a.name], costs[b.name], best) == (100_000, 20 * 720, 25 * 720, a.name)  # 2 x $10 < $25


def test_volume_grid_steps_one_two_five():
    assert volume_grid(1e5, 5e7) == [1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7]
    assert volume_grid(3e5, 1.5e6) == [3e5, 5e5, 1e6, 1.5e6]


def test_volume_and_workload_parsing():
    assert [parse_volume(t, "--x") for t in ("2M", "500K", "2,000,000", "1.5e6")] == [2e6, 5e5, 2e6, 1.5e6]
    with pytest.raises(ConfigError, match=r"--requests-per-day 'lots'"):
        parse_volume("lots", "--requests-per-day")
    assert parse_workload("chat=512:256") == ("chat", 512, 256)
    with pytest.raises(ConfigError, match=r"--workload 'chat'"):
        parse_workload("chat")


def test_predicted_throughput_is_positive_and_consistent():
    r = predicted_throughput("llama-3.1-8b", "a100-40gb", 300, 250)
    assert r["requests_per_s"] * 250 == pytest.approx(r["output_tokens_per_s"])
    assert r["input_tokens_per_s"] == pytest.approx(r["requests_per_s"] * 300)
    with pytest.raises(ConfigError, match=r"--plan h100-sxm: llama-3.1-70b \(bf16\) does not fit"):
        predicted_throughput("llama-3.1-70b", "h100-sxm", 512, 256)


def test_capacity_cli_picks_best_value_per_profile_with_margin(make_cost_run, tmp_path, cost_cli_app):
    prices = tmp_path / "p.yaml"
    prices.write_text("""schema_version: 1
offers:
  - {provider: test, instance: a, gpu: a100-40gb, gpus: 1, usd_per_hour: 2.0, date: 2026-11-01}
  - {provider: test, instance: h, gpu: h100-sxm, gpus: 1, usd_per_hour: 5.0, date: 2026-11-01}
  - {provider: test, instance: x, gpu: h200, gpus: 1, usd_per_hour: 6.0, date: 2026-11-01}
""")
    # capacity per replica (goodput): chat A100 2, H100 4, H200 4.5; code A100 1, H100 3, H200 3
    runs = [make_cost_run(f"{p}-{hw}", hardware=hw, profile=p, goodput=g)
            for p, hw, g in [("chat", "a100-40gb", 2.0), ("chat", "h100-sxm", 4.0), ("chat", "h200", 4.5),
                             ("code", "a100-40gb", 1.0), ("code", "h100-sxm", 3.0), ("code", "h200", 3.0)]]
    args = ["capacity", *map(str, runs), "--requests-per-day", "864K", "--headroom", "0", "--prices", str(prices),
            "--provider", "test", "--json"]
    res = CliRunner().invoke(cost_cli_app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # 864K/day = 10 req/s. chat: A100 5 x $2 = $10/h, H100 3 x $5 = $15, H200 3 x $6 = $18.
    chat = out["best_value"]["chat"]
    assert (chat["config"], chat["runner_up"]) == ("a100-40gb [measured]", "h100-sxm [measured]")
    assert chat["usd_per_month"] == pytest.approx(10 * 720)
    assert chat["margin_usd_per_month"] == pytest.approx(5 * 720) and chat["margin_pct"] == pytest.approx(0.5)
    # code: A100 10 x $2 = $20/h, H100 4 x $5 = $20 (tie: first given), H200 4 x $6 = $24
    assert out["best_value"]["code"]["config"] == "a100-40gb [measured]"
    assert out["best_value"]["code"]["margin_usd_per_month"] == 0
    replicas = {(c["profile"], c["hardware"]): c["replicas"] for c in out["configs"]}
    assert replicas[("code", "h200")] == 4
    assert set(out["break_even"]) == {"chat", "code"}
    assert all(c["price_date"] == "2026-11-01" for c in out["configs"])


def test_capacity_cli_needs_runs_or_plans(cost_cli_app):
    res = CliRunner().invoke(cost_cli_app, ["capacity", "--requests-per-day", "1M"])
    assert isinstance(res.exception, ConfigError)
    assert "give RUN_DIR... and/or --plan CONFIG" in str(res.exception)


def test_capacity_cli_labels_plans_predicted(make_cost_run, cost_cli_app):
    run = make_cost_run("chat-a100", hardware="a100-40gb", profile="chat", goodput=2.0)
    res = CliRunner().invoke(cost_cli_app, ["capacity", str(run), "--plan", "h100-sxm", "--model", "llama-3.1-8b",
                                      "--workload", "chat=300:250", "--requests-per-day", "1M", "--provider", "lambda",
                                      "--price-per-gpu-hour", "2.0", "--json"])
    assert res.exception is not None and "--price-per-gpu-hour prices one GPU type" in str(res.exception)
    res = CliRunner().invoke(cost_cli_app, ["capacity", str(run), "--plan", "h100-sxm", "--model", "llama-3.1-8b",
                                      "--workload", "chat=300:250", "--requests-per-day", "1M", "--provider", "lambda",
                                      "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert sorted(c["source"] for c in out["configs"]) == ["measured", "predicted"]
    assert {c["profile"] for c in out["configs"]} == {"chat"}
