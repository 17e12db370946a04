"""The commands: report writes three files; compare exits 1 on a regression and 0 on noise; history; sql."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.errors import UserError


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=True)


def test_report_command_writes_three_files(grid_runs, tmp_path):
    res = invoke("report", *grid_runs[:3], "--out", tmp_path / "r", "--price-per-gpu-hour", "2", "--api-price", "0.4")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["report.html", "report.md", "summary.csv"]
    assert f"wrote {tmp_path / 'r' / 'report.html'}" in res.output


def test_report_command_rejects_bad_input(tmp_path):
    res = invoke("report", tmp_path / "missing", "--out", tmp_path / "r")
    assert isinstance(res.exception, UserError) and "missing" in str(res.exception)
    res = invoke("report", tmp_path, "--api-price", "-1")
    assert isinstance(res.exception, UserError) and "--api-price" in str(res.exception)


def test_compare_passes_on_noise_and_fails_on_a_regression(make_run, tmp_path):
    base = make_run(tmp_path / "base", label="base", n=1500, seed=1, telemetry=False)
    noise = make_run(tmp_path / "noise", label="noise", n=1500, seed=2, telemetry=False)
    slow = make_run(tmp_path / "slow", label="slow", n=1500, seed=3, ttft_s=0.2, telemetry=False)
    ok = invoke("compare", base, noise, "--threshold", "5%")
    assert ok.exit_code == 0, ok.output
    assert "OK: no metric regressed" in ok.output
    bad = invoke("compare", base, slow, "--threshold", "5%", "--json")
    assert bad.exit_code == 1, bad.output
    doc = json.loads(bad.output)
    by_metric = {m["metric"]: m for m in doc["metrics"]}
    assert doc["regressed"] is True and by_metric["ttft_p50_ms"]["verdict"] == "regression"
    assert by_metric["ttft_p50_ms"]["change"] == pytest.approx(0.2 / 0.15 - 1, abs=0.08)
    assert by_metric["ttft_p50_ms"]["ci_low"] > 0.05
    assert by_metric["tpot_p50_ms"]["verdict"] != "regression"
    # a loose enough threshold lets the same change pass
    assert invoke("compare", base, slow, "--threshold", "60%").exit_code == 0


def test_compare_checks_its_inputs(make_run, make_sweep, tmp_path):
    a = make_run(tmp_path / "a", n=30, telemetry=False)
    res = invoke("compare", a, a, "--threshold", "5")
    assert isinstance(res.exception, UserError) and "did you mean 5%" in str(res.exception)
    res = invoke("compare", a, a, "--metric", "ttft_p42")
    assert isinstance(res.exception, UserError) and "ttft_p42" in str(res.exception)
    sweep = make_sweep(tmp_path / "sw", [5.0])
    res = invoke("compare", sweep, a)
    assert isinstance(res.exception, UserError) and "steps/0" in str(res.exception)


def test_history_and_sql_commands(make_run, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERMETER_HISTORY_DB", str(tmp_path / "h.duckdb"))
    a = make_run(tmp_path / "a", label="alpha", hardware="h100-sxm", n=30, telemetry=False)
    b = make_run(tmp_path / "b", label="beta", hardware="l40s", n=40, telemetry=False)
    res = invoke("history", "--index", a, "--index", b, "--json")
    assert res.exit_code == 0, res.output
    assert [r["label"] for r in json.loads(res.output)["runs"]] == ["alpha", "beta"]  # same start: insertion order kept
    res = invoke("history", "--hardware", "l40s", "--json")
    assert [r["label"] for r in json.loads(res.output)["runs"]] == ["beta"]
    res = invoke("history", "--trend", "ttft_ms.p95")
    assert res.exit_code == 0 and "ttft_p95_ms over time" in res.output
    res = invoke("sql", "SELECT label, count(*) AS n FROM requests JOIN runs USING (run_id) GROUP BY 1 ORDER BY 1",
                 "--format", "csv")
    assert res.exit_code == 0 and res.output.splitlines() == ["label,n", "alpha,30", "beta,40"]
    res = invoke("sql", "SELECT 1", "--format", "xml")
    assert isinstance(res.exception, UserError) and "--format 'xml'" in str(res.exception)
