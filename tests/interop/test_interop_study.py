"""A study whose configuration's ``target`` is existing runs (``{runs: {PROFILE: [PATH, ...]}}``): other tools'
result files are imported and infermeter run directories copied, one load step each, and the study prices,
judges and reports them as measured cells; nothing is sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError
from infermeter.study.config import build_study, read_study_source
from infermeter.study.runner import run_study
from infermeter.study.saturation import steady_throughput

DATA = Path(__file__).parents[1] / "data" / "interop"
VLLM = DATA / "vllm-bench" / "vllm-bench-random.json"
GUIDELLM = DATA / "guidellm" / "benchmarks.json"
IB = DATA / "inference-benchmarker" / "results.json"
NATIVE = DATA / "native"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infermeter.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def _study(tmp_path: Path, runs: str, native: str = "native") -> Path:
    f = tmp_path / "study.yaml"
    f.write_text(f"""
model: smollm2
profiles: [chat]
slo: {{ttft_ms: 200, percentile: p90}}
configurations:
  - config: h100-sxm
    name: other tools
    target: {{runs: {{chat: {runs}}}}}
  - config: h100-sxm
    name: infermeter
    target: {{runs: {{chat: {native}}}}}
""")
    return f


@pytest.fixture(scope="module")
def study_out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("study")
    for src in (VLLM, GUIDELLM, IB):  # relative paths in the file: from the file's folder
        shutil.copy(src, tmp / src.name)
    shutil.copytree(NATIVE, tmp / "native")
    f = _study(tmp, "[vllm-bench-random.json, benchmarks.json, results.json]")
    p = cli("study", str(f), "--out", str(tmp / "out"))
    assert p.returncode == 0, p.stderr
    return tmp / "out", p.stdout


GIVEN = ["vllm-bench", "guidellm", "inference-benchmarker"]  # the order the study file lists them in


def _tools(cell: Path) -> list[str]:
    return [json.loads((cell / "steps" / str(k) / "run.json").read_text())["imported"]["tool"] for k in range(len(GIVEN))]


def test_each_run_is_a_step_of_the_cell(study_out):
    out, _ = study_out
    cell = out / "cells" / "other-tools" / "chat"
    tools = _tools(cell)
    assert sorted(tools) == sorted(GIVEN) and not (cell / "steps" / "3").exists()
    summaries = [Summary.read(cell / "steps" / str(k) / "summary.json") for k in range(3)]
    assert all(s.source == "imported" for s in summaries)
    # every run is a closed loop of 4 streams: the fastest first (the cell's saturation point), the others as given
    assert max(range(3), key=lambda k: summaries[k].request_throughput) == 0
    assert tools[1:] == [t for t in GIVEN if t != tools[0]]
    for k, tool in enumerate(tools):  # inference-benchmarker's file has no per-request data
        assert (cell / "steps" / str(k) / "requests.parquet").exists() == (tool != "inference-benchmarker")
    # infermeter's own run directory is copied as it is
    native = out / "cells" / "infermeter" / "chat" / "steps" / "0"
    assert (native / "summary.json").read_bytes() == (NATIVE / "summary.json").read_bytes()
    assert (native / "requests.parquet").read_bytes() == (NATIVE / "requests.parquet").read_bytes()


def test_the_steps_are_judged_and_the_capacity_is_the_step_meeting_the_slo(study_out):
    out, _ = study_out
    study = json.loads((out / "study.json").read_text())
    cells = {c["config"]: c for c in study["cells"]}
    other, native = cells["other tools"], cells["infermeter"]
    assert other["source"] == "measured" and native["source"] == "emulated"  # native's run.json: the emulator
    assert other["target"]["kind"] == "imported"
    assert other["target"]["tools"] == sorted(GIVEN)
    steps = other["steps"]
    assert [s["kind"] for s in steps] == ["saturation"] * 3 and [s["concurrency"] for s in steps] == [4] * 3
    by_tool = dict(zip(_tools(out / "cells" / "other-tools" / "chat"), steps))
    # vllm bench's and GuideLLM's runs meet TTFT p90 <= 200 ms (a closed loop has no schedule to fall behind);
    # the inference-benchmarker file has no per-request data, so no latency from the intended send to judge
    assert by_tool["vllm-bench"]["meets_slo"] and by_tool["guidellm"]["meets_slo"]
    assert not by_tool["inference-benchmarker"]["meets_slo"]
    assert any("no samples" in r for r in by_tool["inference-benchmarker"]["slo_reasons"])
    # the capacity is the passing step with the highest sustained rate: a closed loop's steady-window throughput
    best = max((k for k, s in enumerate(steps) if s["meets_slo"]), key=lambda k: steps[k]["sustained_rps"])
    assert other["capacity"]["step"] == best and steps[best]["sustained_basis"] == "steady window"
    assert other["capacity"]["requests_per_s"] == pytest.approx(steps[best]["sustained_rps"], rel=1e-9)
    table = pq.read_table(NATIVE / "requests.parquet")
    assert native["capacity"]["requests_per_s"] == pytest.approx(steady_throughput(table, 4).requests_per_s, rel=1e-6)


def test_the_report_and_cost_read_the_cells(study_out, tmp_path):
    out, stdout = study_out
    md = (out / "report.md").read_text()
    assert "other tools" in md and "infermeter" in md
    p = cli("cost", str(out / "cells" / "other-tools" / "chat"), "--json")
    assert p.returncode == 0, p.stderr
    [run] = json.loads(p.stdout)["runs"]
    assert run["hardware"] == "h100-sxm" and run["usd_per_hour"] > 0


def _bad(tmp_path: Path, runs: str, native: str = "native") -> str:
    data, text = read_study_source(_study(tmp_path, runs, native))
    with pytest.raises(ConfigError) as e:
        study = build_study(data, "study.yaml", text)
        run_study(study, tmp_path / "out")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_missing_run_is_refused_naming_the_field(tmp_path):
    shutil.copytree(NATIVE, tmp_path / "native")
    err = _bad(tmp_path, "[nowhere.json]")
    assert "configurations[0].target" in err and "runs.chat[0]" in err and "nowhere.json" in err


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    err = _bad(tmp_path, "[empty]", native="empty")
    assert "not a run directory" in err and "empty" in err


def test_a_garbled_result_file_is_refused_before_anything_runs(tmp_path):
    shutil.copytree(NATIVE, tmp_path / "native")
    (tmp_path / "cut.json").write_text(IB.read_text()[:500])
    err = _bad(tmp_path, "[cut.json]")
    assert "configuration other tools: target.runs.chat" in err and str(tmp_path / "cut.json") in err
    assert not (tmp_path / "out" / "cells").exists()


def test_every_profile_needs_its_runs(tmp_path):
    shutil.copytree(NATIVE, tmp_path / "native")
    data, text = read_study_source(_study(tmp_path, "[native]"))
    data["profiles"] = ["chat", "code"]
    with pytest.raises(ConfigError) as e:
        build_study(data, "study.yaml", text)
    assert "target.runs has no runs for ['code']" in str(e.value)


def test_runs_and_an_engine_together_are_refused(tmp_path):
    shutil.copytree(NATIVE, tmp_path / "native")
    data, text = read_study_source(_study(tmp_path, "[native]"))
    data["configurations"][0]["engine"] = "vllm-cpu"
    with pytest.raises(ConfigError) as e:
        build_study(data, "study.yaml", text)
    assert "give target (a URL) or engine" in str(e.value)
