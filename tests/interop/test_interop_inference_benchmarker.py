"""inference-benchmarker results JSON (a schema-faithful sample, tests/data/interop/inference-benchmarker): detected
from its content, imported as aggregates with the tool's definitions, priced by cost, bad files refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infermeter.analysis.results import Summary
from infermeter.errors import DataError
from infermeter.interop.common import write_imported
from infermeter.interop.definitions import definition_warnings
from infermeter.interop.readers import read_file

DATA = Path(__file__).parents[1] / "data" / "interop"
IB = DATA / "inference-benchmarker" / "results.json"
NATIVE = DATA / "native"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infermeter.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def test_detected_from_content_whatever_the_file_is_called(tmp_path):
    f = tmp_path / "smollm2_2026-12-03-18-25-24.json"  # the tool's own naming: results/<tokenizer>_<date>.json
    f.write_text(IB.read_text())
    [imp] = read_file(f)
    assert imp.tool == "inference-benchmarker" and imp.model == "smollm2"
    for other in (DATA / "vllm-bench" / "vllm-bench-random.json", DATA / "guidellm" / "benchmarks.json"):
        assert {i.tool for i in read_file(other)} != {"inference-benchmarker"}


def test_summary_copies_the_aggregates_with_the_tools_definitions(tmp_path):
    raw = json.loads(IB.read_text())
    [warmup, step] = raw["results"]
    s = write_imported(read_file(IB)[0], tmp_path / "ib")
    run = json.loads((tmp_path / "ib" / "run.json").read_text())
    assert s.source == "imported" and run["source"] == "imported" and not (tmp_path / "ib" / "requests.parquet").exists()
    assert run["imported"]["tool"] == "inference-benchmarker" and run["imported"]["per_request"] is False
    # the warmup step is not measured: the run is the rate step
    assert s.completed == step["successful_requests"] != warmup["successful_requests"]
    assert s.scheduled == step["total_requests"] and s.failed == step["failed_requests"]
    assert s.duration_s == step["duration_ms"] / 1e3
    assert s.request_throughput == step["request_rate"] and s.output_token_throughput == step["token_throughput_secs"]
    assert s.input_token_throughput == pytest.approx(step["total_tokens_sent"] / (step["duration_ms"] / 1e3))
    assert s.ttft_ms.p50 == step["time_to_first_token_ms"]["p50"] and s.ttft_ms.mean == step["time_to_first_token_ms"]["avg"]
    assert s.tpot_ms.p90 == step["inter_token_latency_ms"]["p90"]  # its "ITL" is a per-request mean: our TPOT family
    assert s.e2e_ms.p95 == step["e2e_latency_ms"]["p95"]
    assert s.itl_ms.count == 0  # no pooled gaps in the file: nothing to put there
    assert s.ttft_ms.p99 == step["time_to_first_token_ms"]["p99"]  # 120 requests: past infermeter's p99 floor
    assert s.ttft_ms.p999 is None
    assert s.summary_method.startswith("imported from inference-benchmarker aggregates only")
    copied = s.get("imported")["copied"]
    assert "first non-empty delta.content" in copied["ttft_ms"]["definition"]
    assert "first completed response" in copied["duration_s"]["definition"]
    assert run["imported"]["tool_figures"]["other_percentiles"]["time_to_first_token_ms"]["p60"] == \
        step["time_to_first_token_ms"]["p60"]


def test_its_ttft_and_e2e_rules_match_infermeters_on_the_same_records():
    """The sample applies the tool's rules (results.rs, requests.rs) to ../native's records: TTFT (send to the first
    content delta) and E2E (send to [DONE]) are infermeter's rules there, so only the microsecond truncation differs."""
    [imp] = read_file(IB)
    native = Summary.read(NATIVE / "summary.json")
    for key in ("ttft_ms", "e2e_ms"):
        for stat in ("mean", "p50", "p90", "p95"):
            assert imp.copied[key][stat] == pytest.approx(native.distribution(key).get(stat), abs=1.01e-3), (key, stat)


def test_a_sweep_gives_one_run_per_step(tmp_path):
    raw = json.loads(IB.read_text())
    faster = dict(raw["results"][1], id="constant@16.00req/s", executor_type="ConstantArrivalRate", request_rate=13.1,
                  config={"max_vus": 4, "duration_secs": 6, "rate": 16.0})
    raw["results"].append(faster)
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps(raw))
    runs = read_file(f)
    assert [r.label for r in runs] == [f"inference-benchmarker:{raw['results'][1]['id']}",
                                       "inference-benchmarker:constant@16.00req/s"]
    assert [r.load["open_loop"] for r in runs] == [False, True] and runs[0].load["concurrency"] == 4
    assert [r.copied["request_throughput"] for r in runs] == [raw["results"][1]["request_rate"], 13.1]
    p = cli("import", str(f), "--out", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    assert sorted(d.name for d in (tmp_path / "out").iterdir()) == ["sweep-0", "sweep-1"]


def test_cost_prices_it(tmp_path):
    step = json.loads(IB.read_text())["results"][1]
    p = cli("import", str(IB), "--out", str(tmp_path / "ib"), "--hardware", "h100-sxm")
    assert p.returncode == 0, p.stderr
    p = cli("cost", str(tmp_path / "ib"), "--json")
    assert p.returncode == 0, p.stderr
    [run] = json.loads(p.stdout)["runs"]
    assert run["source"] == "imported" and run["usd_per_hour"] > 0
    # aggregates only: priced at the tool's own throughput figures
    assert run["throughput"]["requests_per_s"] == step["request_rate"]
    tok_s = step["token_throughput_secs"]
    assert run["usd_per_1m_output_tokens"] == pytest.approx(run["usd_per_hour"] / (tok_s * 3600) * 1e6, rel=1e-9)


def test_compare_refuses_it_in_one_line(tmp_path):
    assert cli("import", str(IB), "--out", str(tmp_path / "ib")).returncode == 0
    p = cli("compare", str(NATIVE), str(tmp_path / "ib"))
    assert p.returncode == 2 and "Traceback" not in p.stderr and "requests.parquet" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_its_throughput_and_latency_rules_are_named_for_compare():
    out = definition_warnings("infermeter", "inference-benchmarker", ["requests_per_s", "output_tokens_per_s",
                                                                        "ttft_p50_ms", "e2e_p50_ms"])
    assert [w.split(" ")[0] for w in out] == ["output_throughput", "request_throughput", "ttft"]
    assert all("first completed response" in w for w in out[:2])


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["results"][1].pop("time_to_first_token_ms"), "results[1].time_to_first_token_ms"),
    (lambda d: d["results"][1].update(duration_ms="5853"), "results[1].duration_ms"),
    (lambda d: d["results"][1]["e2e_latency_ms"].update(p50=None), "results[1].e2e_latency_ms.p50"),
    (lambda d: d.update(results=d["results"][:1]), "only the warmup step"),
])
def test_a_bad_file_names_the_file_and_the_field(tmp_path, mutate, field):
    d = json.loads(IB.read_text())
    mutate(d)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(DataError) as e:
        read_file(f)
    assert str(f) in str(e.value) and field in str(e.value)


def test_a_garbled_file_is_one_line_naming_it(tmp_path):
    f = tmp_path / "cut.json"
    f.write_text(IB.read_text()[:700])  # the write stopped half way
    p = cli("import", str(f), "--out", str(tmp_path / "x"), "--format", "inference-benchmarker")
    assert p.returncode == 2 and "Traceback" not in p.stderr and str(f) in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_report_draws_it_beside_a_native_run(tmp_path):
    assert cli("import", str(IB), "--out", str(tmp_path / "ib")).returncode == 0
    p = cli("report", str(NATIVE), str(tmp_path / "ib"), "--out", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    step = json.loads(IB.read_text())["results"][1]
    assert f"inference-benchmarker:{step['id']}" in (tmp_path / "rep" / "report.md").read_text()
    rows = (tmp_path / "rep" / "summary.csv").read_text().splitlines()
    assert len(rows) == 3 and any(",imported," in r for r in rows) and any(",emulated," in r for r in rows)
