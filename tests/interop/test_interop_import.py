"""infermeter import: real result files of vllm bench serve, GuideLLM and AIPerf (tests/data/interop) become run
directories whose summary is recomputed from the tool's per-request data (or copied from its aggregates)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infermeter.analysis.results import Summary
from infermeter.errors import DataError
from infermeter.interop.common import write_imported
from infermeter.interop.readers import read_file

DATA = Path(__file__).parents[1] / "data" / "interop"
VLLM = DATA / "vllm-bench" / "vllm-bench-random.json"
GUIDELLM = DATA / "guidellm" / "benchmarks.json"
AIPERF_JSON = DATA / "aiperf" / "profile_export_aiperf.json"
AIPERF_CSV = DATA / "aiperf" / "profile_export_aiperf.csv"
NATIVE = DATA / "native"


def _import(path: Path, out: Path, **kw: object) -> tuple[Summary, dict]:
    [imp] = read_file(path, **kw)  # type: ignore[arg-type]
    s = write_imported(imp, out)
    return s, json.loads((out / "run.json").read_text())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infermeter.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def test_vllm_bench_detailed_is_recomputed_and_matches_the_tools_own_aggregates(tmp_path):
    raw = json.loads(VLLM.read_text())
    s, run = _import(VLLM, tmp_path / "v")
    assert s.source == "imported" and run["imported"]["tool"] == "vllm-bench" and run["imported"]["per_request"]
    assert (tmp_path / "v" / "requests.parquet").exists()
    assert s.completed == raw["completed"] and s.total_output_tokens == raw["total_output_tokens"]
    # the records rebuilt from start_times/ttfts/itls/latencies give back vllm's own means (its rules are kept)
    assert s.ttft_ms.mean == pytest.approx(raw["mean_ttft_ms"], rel=1e-9)
    assert s.tpot_ms.mean == pytest.approx(raw["mean_tpot_ms"], rel=1e-9)
    assert s.itl_ms.mean == pytest.approx(raw["mean_itl_ms"], rel=1e-9)
    # infermeter's percentile floor applies to imports too: a p99 from 100 samples on, no p99.9 below 1,000
    assert len(raw["ttfts"]) < 1000 and s.ttft_ms.p999 is None and (s.ttft_ms.p99 is not None) == (len(raw["ttfts"]) >= 100)
    assert "recomputed" in s.summary_method and "ttft" in s.summary_method
    assert s.get("imported")["tool_rules"]["ttft"].startswith("vllm bench")


def test_vllm_bench_without_detail_copies_the_aggregates_with_their_definition(tmp_path):
    raw = json.loads(VLLM.read_text())
    for k in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
        raw.pop(k)
    f = tmp_path / "plain.json"
    f.write_text(json.dumps(raw))
    s, run = _import(f, tmp_path / "v")
    assert not (tmp_path / "v" / "requests.parquet").exists() and not run["imported"]["per_request"]
    assert s.ttft_ms.mean == raw["mean_ttft_ms"] and s.ttft_ms.p50 == raw["median_ttft_ms"]
    assert s.request_throughput == raw["request_throughput"] and s.duration_s == raw["duration"]
    assert "aggregates only" in s.summary_method
    assert "role chunk" in s.get("imported")["copied"]["ttft_ms"]["definition"]


def test_guidellm_per_request_timings(tmp_path):
    raw = json.loads(GUIDELLM.read_text())
    b = raw["benchmarks"][0]
    s, run = _import(GUIDELLM, tmp_path / "g")
    assert run["imported"]["version"] == raw["metadata"]["guidellm_version"]
    assert s.completed == len(b["requests"]["successful"])
    assert s.ttft_ms.mean == pytest.approx(b["metrics"]["time_to_first_token_ms"]["successful"]["mean"], rel=1e-6)
    assert s.itl_source and "mean" in s.itl_source  # no per-chunk times: ITL is each request's mean gap
    # GuideLLM's own dispatch delay on this loaded machine (request_start - targeted_start) is kept as schedule lag
    lags = [r["info"]["timings"]["request_start"] - r["info"]["timings"]["targeted_start"] for r in b["requests"]["successful"]]
    plausible = [x for x in lags if 0 <= x < 60]
    assert s.schedule_lag_ms.max == pytest.approx(max(plausible) * 1e3, rel=1e-6)


def test_aiperf_json_uses_the_records_beside_it(tmp_path):
    raw = json.loads(AIPERF_JSON.read_text())
    s, run = _import(AIPERF_JSON, tmp_path / "a")
    assert run["imported"]["version"] == raw["aiperf_version"] and run["imported"]["command"].startswith("aiperf profile")
    assert s.completed == int(raw["request_count"]["avg"])
    assert s.ttft_ms.mean == pytest.approx(raw["time_to_first_token"]["avg"], rel=1e-9)
    assert s.e2e_ms.mean == pytest.approx(raw["request_latency"]["avg"], rel=1e-9)


def test_aiperf_csv_alone_is_aggregates_only(tmp_path):
    f = tmp_path / "profile_export_aiperf.csv"
    shutil.copy(AIPERF_CSV, f)
    raw = json.loads(AIPERF_JSON.read_text())
    s, _ = _import(f, tmp_path / "a")
    assert "aggregates only" in s.summary_method
    assert s.ttft_ms.p50 == pytest.approx(raw["time_to_first_token"]["p50"], abs=0.01)  # the CSV rounds to 2 decimals
    assert s.ttft_ms.p99 == pytest.approx(raw["time_to_first_token"]["p99"], abs=0.01)  # 120 requests: a p99
    assert s.duration_s == pytest.approx(raw["benchmark_duration"]["avg"], abs=0.01)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("ttfts") and d.update(ttfts=[0.1]), "ttfts"),
    (lambda d: d["itls"].__setitem__(0, ["x"]), "itls[0][0]"),
    (lambda d: d.update(start_times=[None] * len(d["start_times"])), "start_times[0]"),
])
def test_bad_vllm_file_names_file_and_field(tmp_path, mutate, field):
    d = json.loads(VLLM.read_text())
    mutate(d)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(DataError) as e:
        read_file(f)
    assert str(f) in str(e.value) and field in str(e.value)


def test_cli_import_and_errors(tmp_path):
    p = cli("import", str(VLLM), "--out", str(tmp_path / "v"), "--hardware", "h100-sxm")
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "v" / "run.json").read_text())["hardware"] == "h100-sxm"
    f = tmp_path / "other.json"
    f.write_text('{"hello": 1}')
    p = cli("import", str(f), "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "Traceback" not in p.stderr and str(f) in p.stderr
    assert not (tmp_path / "x").exists()


def test_a_key_in_the_tools_command_or_errors_never_reaches_the_run(tmp_path):
    key = "sk-test-abcdefghijklmnopqrstuvwx"
    raw = json.loads(AIPERF_JSON.read_text())
    raw["run_info"]["cli_command"] += f" --api-key {key}"
    records = AIPERF_JSON.with_name("profile_export.jsonl").read_text().splitlines()
    bad = json.loads(records[0])
    bad["error"] = {"message": f"HTTP 401: invalid key {key}"}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(raw))
    (tmp_path / "profile_export.jsonl").write_text("\n".join([json.dumps(bad), *records[1:]]) + "\n")
    s, run = _import(tmp_path / "profile_export_aiperf.json", tmp_path / "a")
    assert s.failed == 1 and s.errors == {"http_4xx": 1}
    assert "--api-key" in run["imported"]["command"]
    for f in ("run.json", "summary.json", "requests.parquet"):
        assert key.encode() not in (tmp_path / "a" / f).read_bytes(), f


def test_each_tools_closed_loop_keeps_its_concurrency(tmp_path):
    """The fixtures are closed loops of 4 streams (tests/data/interop/README.md): each reader says so."""
    for f in (VLLM, GUIDELLM, AIPERF_JSON):
        [imp] = read_file(f)
        assert imp.load["open_loop"] is False and imp.load["concurrency"] == 4, (f, imp.load)
    # AIPerf at a request rate is an open loop at that rate (its profiling phase in input_config)
    raw = json.loads(AIPERF_JSON.read_text())
    [phase] = [p for p in raw["input_config"]["phases"] if p["kind"] == "profiling"]
    phase.update(type="poisson", rate=8.0)
    phase.pop("concurrency")
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(raw))
    [imp] = read_file(tmp_path / "profile_export_aiperf.json")
    assert imp.load["open_loop"] is True and imp.load["target_rate"] == 8.0 and "concurrency" not in imp.load


def test_vllm_bench_queue_time_is_schedule_lag_only_in_an_open_loop(tmp_path):
    raw = json.loads(VLLM.read_text())
    assert max(raw["queue_times"]) > 1.0  # the wait for one of the 4 streams: seconds, at the run's end
    s, _ = _import(VLLM, tmp_path / "closed")
    assert s.schedule_lag_ms.max == 0.0 and s.ttft_from_intended_ms.p90 == s.ttft_ms.p90
    raw.update(request_rate=8.0, max_concurrency=None)  # the same file read as an open loop at 8 req/s
    f = tmp_path / "open.json"
    f.write_text(json.dumps(raw))
    s, _ = _import(f, tmp_path / "open")
    assert s.schedule_lag_ms.max == pytest.approx(max(raw["queue_times"]) * 1e3, rel=1e-6)
