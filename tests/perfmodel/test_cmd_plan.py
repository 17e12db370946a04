"""`infermeter plan`: the table, --json keys, --compare parsing, --check, --validate, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from infermeter.cli import cmd_plan
from infermeter.errors import ConfigError

CSV = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"
JSON_KEYS = {"fits", "weights_gib_per_gpu", "kv_capacity_tokens", "max_concurrency", "ttft_ms", "tpot_ms",
             "output_tokens_per_s", "saturation_output_tokens_per_s", "bound"}


@pytest.fixture(scope="module")
def app():
    a = typer.Typer()

    @a.callback()
    def _root() -> None:
        """test app"""

    cmd_plan.register(a)
    return a


def run(app, *args):
    return CliRunner().invoke(app, ["plan", *args], catch_exceptions=True)


def test_70b_bf16_on_one_h100_does_not_fit_and_says_why(app):
    res = run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "1", "--dtype", "bf16")
    assert res.exit_code == 0, res.output
    assert "NO" in res.output and "131.4 GiB" in res.output
    assert "does not fit: weights need 131.4 GiB per GPU" in " ".join(res.output.split())


def test_json_has_the_documented_keys(app):
    res = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "8", "--json")
    out = json.loads(res.stdout)
    assert JSON_KEYS <= out.keys()
    assert out["fits"] is True and out["bound"] in ("compute", "memory", "communication", "overhead")
    assert out["output_tokens_per_s"] == pytest.approx(8 * out["output_tokens"] / (
        out["ttft_ms"] / 1e3 + (out["output_tokens"] - 1) * out["tpot_ms"] / 1e3), rel=1e-3)
    nofit = json.loads(run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--json").stdout)
    assert (nofit["fits"], nofit["ttft_ms"], nofit["bound"], nofit["kv_capacity_tokens"]) == (False, None, None, 0)


def test_gpus_tp_pp_flags_build_the_configuration(app):
    out = json.loads(run(app, "--model", "llama-3.1-70b", "--gpu", "a10g", "--gpus", "8", "--tp", "4", "--pp", "2", "--json").stdout)
    assert out["config"] == "8xa10g:tp4,pp2"
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "4", "--tp", "1", "--json").stdout)
    assert (out["config"], out["replicas"]) == ("4xh100-sxm:tp1", 4)


def test_compare_accepts_one_string_or_several_arguments(app):
    one = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2", "--json")
    many = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4", "2xh100-sxm:tp2", "8xa10g:tp4,pp2", "--json")
    assert one.exit_code == 0, one.output
    a, b = json.loads(one.stdout), json.loads(many.stdout)
    assert a == b and [p["config"] for p in a] == ["4xa100-80gb:tp4", "2xh100-sxm:tp2", "8xa10g:tp4,pp2"]
    table = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2")
    header = next(line for line in table.output.splitlines() if "4xa100-80gb:tp4" in line)
    assert "2xh100-sxm:tp2" in header and "8xa10g:tp4,pp2" in header  # side by side


def test_check_reports_the_verdict(app):
    res = run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "2", "--check", "decode_tokens_per_s=115")
    assert res.exit_code == 0, res.output
    assert "IMPOSSIBLE" in res.output and "2.39x the physical limit" in res.output
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "ttft=500", "--json").stdout)
    assert out[0]["verdict"] == "possible" and out[0]["metric"] == "ttft_ms"


def test_validate_prints_rows_and_both_errors(app, tmp_path):
    small = tmp_path / "few.csv"
    lines = CSV.read_text().splitlines()
    small.write_text("\n".join(lines[:1] + [line for line in lines if line.startswith(("trt05", "ft13b"))]) + "\n")
    res = run(app, "--validate", str(small))
    assert res.exit_code == 0, res.output
    assert "trt05-h100-7b-128" in res.output
    assert "in-sample (shipped calibration): median |error|" in res.output
    assert "out-of-sample (leave-one-out" in " ".join(res.output.split())


@pytest.mark.parametrize("args,match", [
    (["--gpu", "h100-sxm"], "--model is required"),
    (["--model", "llama-3.1-8b"], "--gpu is required"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "extra-config"], "unexpected argument"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--compare", "h200"], "drop --gpu"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "ttft"], "expected METRIC=VALUE"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "0"], "--concurrency must be >= 1"),
])
def test_bad_input_is_a_config_error_naming_it(app, args, match):
    res = run(app, *args)
    assert isinstance(res.exception, ConfigError)
    assert match in str(res.exception)
