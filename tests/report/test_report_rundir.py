"""rundir: single runs, sweeps (numeric step order), labels, and errors that name the file."""

from __future__ import annotations

import json

import pytest

from infermeter.analysis.results import Summary
from infermeter.errors import DataError
from infermeter.report.rundir import load_run_dir, load_run_dirs


def test_single_run_metadata_and_optional_files(make_run, tmp_path):
    d = make_run(tmp_path / "a", label="first", hardware="4xa100-80gb:tp4", profile="rag", source="simulated", n=20)
    r = load_run_dir(d)
    assert (r.label, r.source, r.hardware, r.profile, r.model) == ("first", "simulated", "4xa100-80gb:tp4", "rag", "llama-3-8b")
    assert r.requests_path == d / "requests.parquet" and r.gpu_path == d / "gpu.parquet"
    assert r.configuration == "llama-3-8b @ 4xa100-80gb:tp4"
    assert not r.is_sweep and r.leaves() == [r]
    (d / "gpu.parquet").unlink()
    assert load_run_dir(d).gpu_path is None


def test_sweep_steps_in_numeric_order(make_sweep, tmp_path):
    d = make_sweep(tmp_path / "sw", [1.0, 2.0, 3.0])
    (d / "steps" / "2").rename(d / "steps" / "10")  # 10 must sort after 1, not before 2
    r = load_run_dir(d)
    assert [s.name for s in r.steps] == ["0", "1", "10"]
    assert [s.label for s in r.steps] == ["sweep / step 0", "sweep / step 1", "sweep / step 10"]
    assert [s.summary["target_rate"] for s in r.leaves()] == [1.0, 2.0, 3.0]


def test_same_labels_are_told_apart(make_run, tmp_path):
    a = make_run(tmp_path / "x" / "demo", label="demo", n=10)
    b = make_run(tmp_path / "y" / "demo", label="demo", n=10)
    labels = [r.label for r in load_run_dirs([a, b, a])]  # the repeated path is read once
    assert len(labels) == 2 and labels[0] != labels[1] and all(lbl.startswith("demo (") for lbl in labels)


def test_errors_name_the_input(tmp_path):
    with pytest.raises(DataError, match="nowhere"):
        load_run_dir(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no summary.json"):
        load_run_dir(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{not json")
    with pytest.raises(DataError, match=r"bad/summary.json: not readable JSON"):
        load_run_dir(tmp_path / "bad")
    (tmp_path / "bad" / "summary.json").write_text(json.dumps({"schema_version": 9}))
    with pytest.raises(DataError, match="schema_version 9"):
        load_run_dir(tmp_path / "bad")


def test_the_summary_is_the_validated_model_also_for_a_schema_1_file(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({  # schema 1: no version, no scheduled/unfinished, a bare distribution
        "label": "old", "completed": 8, "failed": 1, "cancelled": 1, "duration_s": 2.0,
        "ttft_ms": {"count": 8, "p50": 12.5}, "steps": [{"step_dir": "steps/0", "meets_slo": True}]}))
    s = load_run_dir(d).summary
    assert isinstance(s, Summary) and s.schema_version == 2
    assert (s.scheduled, s.unfinished, s.ttft_ms.p50, s.ttft_ms.p99) == (10, 1, 12.5, None)
    assert s.get("steps") == [{"step_dir": "steps/0", "meets_slo": True}]  # a plan's own section is kept as written
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "completed": "many"}))
    with pytest.raises(DataError, match=r"old/summary.json: completed"):
        load_run_dir(d)
