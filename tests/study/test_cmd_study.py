"""``infermeter study``: flags over the study file, errors naming the flag, and a small run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.errors import UserError


def invoke(*args: object):
    return CliRunner().invoke(app, ["study", *(str(a) for a in args)], catch_exceptions=True)


def test_flags_build_the_study(tmp_path: Path) -> None:
    res = invoke("--dry-run", "--hardware", "h100-sxm", "--hardware", "8xa10g:tp4,pp2", "--profile", "chat",
                 "--slo", "ttft_ms=2000,tpot_ms=80", "--slo-percentile", "p99", "--target", "8xa10g:tp4,pp2=http://10.0.0.4:8000",
                 "--price", "h100-sxm=4.5", "--provider", "lambda", "--load", "concurrency:32", "--soak", "2h",
                 "--rate", "3", "--seed", "7")
    assert res.exit_code == 0, res.output
    s = yaml.safe_load(res.output)
    assert [c["config"] for c in s["configurations"]] == ["h100-sxm", "8xa10g:tp4,pp2"]
    assert s["configurations"][0]["price_per_hour"] == 4.5 and s["configurations"][1]["target"] == "http://10.0.0.4:8000"
    assert s["profiles"] == ["chat"] and s["seed"] == 7
    assert s["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 80.0, "percentile": "p99", "max_error_rate": 0.01}
    assert (s["load"]["kind"], s["load"]["concurrency"]) == ("concurrency", 32)
    assert (s["soak"]["duration_s"], s["soak"]["rate_per_s"], s["soak"]["window_s"]) == (7200.0, 3.0, 3600.0)
    assert s["pricing"]["provider"] == "lambda"


def test_flags_override_the_study_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-70b\nconfigurations: [4xa100-80gb:tp4, 2xh100-sxm:tp2]\nload: {requests: 50}\n")
    res = invoke(f, "--dry-run", "--requests", "80", "--engine", "2xh100-sxm:tp2=vllm-cpu")
    assert res.exit_code == 0, res.output
    s = yaml.safe_load(res.output)
    assert s["model"] == "llama-3.1-70b" and s["load"]["requests"] == 80
    assert s["configurations"][1] == {**s["configurations"][1], "config": "2xh100-sxm:tp2", "engine": "vllm-cpu"}


def test_example_dry_run_is_the_built_in_study() -> None:
    res = invoke("--example", "--dry-run")
    assert res.exit_code == 0, res.output
    s = yaml.safe_load(res.output)
    assert [c["config"] for c in s["configurations"]] == ["h100-sxm", "h200", "a100-80gb", "a100-40gb"]


def test_examples_by_name_are_the_seed_studies_written_down() -> None:
    res = invoke("--example", "seed-003", "--dry-run")
    assert res.exit_code == 0, res.output
    s = yaml.safe_load(res.output)
    confs = {c.get("name"): c for c in s["configurations"]}
    assert confs["h100 (lambda)"]["provider"] == "lambda" and confs["h100 (vultr)"]["provider"] == "vultr"
    assert confs["rtx-4090 8b (vast.ai)"]["model"] == "llama-3-8b" and confs["rtx-4090 8b (vast.ai)"]["dtype"] == "fp16"
    assert [c["metric"] for c in s["claims"]] == ["decode_tokens_per_s"] * 4 + ["usd_per_1m_output_tokens"] * 3
    for name in ("seed-000", "seed-002"):
        assert invoke("--example", name, "--dry-run").exit_code == 0


def test_bad_flags_name_themselves(tmp_path: Path) -> None:
    cases = [
        ((), "give a study file, --example [NAME], or at least one --hardware"),
        (("--hardware", "h100-sxm", "--target", "a100-40gb=http://x:1"), "--target a100-40gb=http://x:1: no configuration"),
        (("--hardware", "h100-sxm", "--target", "h100-sxm"), "--target 'h100-sxm': expected CONFIG=VALUE"),
        (("--hardware", "h100-sxm", "--soak", "1h"), "--soak DURATION and --rate R go together"),
        (("--hardware", "h100-sxm", "--load", "ramp"), "--load 'ramp'"),
        (("--hardware", "h100-sxm", "--price", "h100-sxm=cheap"), "--price: 'cheap'"),
        (("--example", tmp_path / "x.yaml"), "no such example; use one of default, seed-000, seed-002, seed-003"),
        ((tmp_path / "missing.yaml",), "cannot read"),
    ]
    for args, needle in cases:
        res = invoke(*args, "--dry-run")
        assert isinstance(res.exception, UserError), (args, res.output)
        assert needle in str(res.exception), (args, str(res.exception))


def test_a_small_study_runs_from_the_command_line(tmp_path: Path) -> None:
    res = invoke("--hardware", "h100-sxm", "--hardware", "a100-80gb", "--profile", "code", "--load", "concurrency:16",
                 "--saturation-requests", "40", "--provider", "aws", "--out", tmp_path / "s", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert Path(out["files"]["html"]).is_file() and out["best_value"].keys() == {"code"}
    assert out["findings"][0].startswith("code: best value is ")  # the decision's finding comes first
    assert out["decisions"]["code"]["best"]["config"] == out["best_value"]["code"]


def test_a_point_volume_from_the_flag_or_the_file(tmp_path: Path) -> None:
    res = invoke("--hardware", "h100-sxm", "--volume", "2M", "--dry-run")
    assert res.exit_code == 0, res.output
    v = yaml.safe_load(res.output)["volume"]
    assert (v["daily"], v["low"], v["high"]) == (2e6, 2e5, 2e7)
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nconfigurations: [h100-sxm]\nvolume: 2000000\n")
    res = invoke(str(f), "--headroom", "0.3", "--dry-run")
    assert res.exit_code == 0, res.output
    v = yaml.safe_load(res.output)["volume"]
    assert (v["daily"], v["headroom"]) == (2e6, 0.3)
    res = invoke("--hardware", "h100-sxm", "--volume", "lots", "--dry-run")
    assert isinstance(res.exception, UserError) and "--volume 'lots'" in str(res.exception)
