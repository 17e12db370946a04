"""``infermeter simulate``: flags to result files; bad flags name themselves."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.errors import ConfigError
from infermeter.twin.deploy import hardware_config

runner = CliRunner()


def test_simulate_writes_a_run_directory(tmp_path):
    out = tmp_path / "sim"
    res = runner.invoke(app, ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "5",
                              "--requests", "40", "--input-tokens", "200", "--output-tokens", "20",
                              "--max-num-seqs", "64", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert summary["completed"] == 40 and summary["source"] == "simulated"
    assert run["hardware"] == "h100-sxm" and run["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    emu = run["target"]["emulated"]
    assert emu["max_num_seqs"] == 64 and emu["max_num_batched_tokens"] == 8192
    assert run["load"]["open_loop"] and run["config"]["simulate"]["token_times"] is True
    assert (out / "requests.parquet").exists()


def test_closed_loop_and_duration(tmp_path):
    out = tmp_path / "closed"
    res = runner.invoke(app, ["simulate", "--concurrency", "4", "--duration", "5", "--input-tokens", "64",
                              "--output-tokens", "16", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert not run["load"]["open_loop"]
    assert summary["completed"] > 4
    assert run["server_metrics"]["num_requests_running_max"] == 4


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "1", "--concurrency", "2", "--requests", "5"], "--concurrency and --rate"),
        (["--rate", "1"], "--requests N and/or --duration"),
        (["--rate", "1", "--requests", "5", "--gpu", "nope-gpu"], "nope-gpu"),
        (["--rate", "1", "--requests", "5", "--max-num-seqs", "512", "--max-num-batched-tokens", "64"],
         "max_num_batched_tokens"),
        (["--rate", "1", "--requests", "5", "--token-times", "sometimes"], "--token-times"),
        (["--rate", "1", "--requests", "5", "--router", "random"], "--router"),
        (["--rate", "1", "--requests", "5", "--gpu", "4xh100-sxm:tp1", "--router", "least-outstanding",
          "--workers", "2"], "least-outstanding"),
        (["--rate", "1", "--requests", "5", "--block-size", "0"], "--block-size"),
        (["--rate", "1", "--requests", "5", "--frontend-service", "soon"], "--frontend-service"),
    ],
)
def test_bad_flags_are_named(tmp_path, args, needle):
    res = runner.invoke(app, ["simulate", "--out", str(tmp_path / "x"), *args])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError), res.output
    assert needle in str(res.exception)


def test_hardware_config_applies_tp_and_pp():
    assert hardware_config("a100-80gb", tp=4) == "4xa100-80gb:tp4"
    assert hardware_config("8xh100-sxm:tp4", tp=2) == "8xh100-sxm:tp2"  # 4 replicas
    assert hardware_config("2xl4", tp=4) == "4xl4:tp4"
    assert hardware_config("h100-sxm") == "h100-sxm"


def test_a_fleet_on_two_workers_with_the_twins_new_knobs(tmp_path):
    out = tmp_path / "fleet"
    res = runner.invoke(app, ["simulate", "--gpu", "4xh100-sxm:tp1", "--rate", "20", "--duration", "20", "--grace", "2",
                              "--router", "session", "--profile", "chat", "--workers", "2", "--block-size", "32",
                              "--frontend-overhead", "0.001", "--frontend-service", "0.0005", "--out", str(out),
                              "--json"])
    assert res.exit_code == 0, res.output
    run = json.loads((out / "run.json").read_text())
    emu = run["target"]["emulated"]
    assert (emu["router"], emu["block_size"], emu["frontend_service_s"]) == ("session", 32, 0.0005)
    assert emu["frontend_overhead_s"] == 0.001 and emu["replicas"] == 4
    assert run["runtime"]["workers"] == 2 and run["runtime"]["backend"] == "processes"
    assert json.loads((out / "summary.json").read_text())["scheduled"] > 300
