"""Sweeps and find-max against the emulator: one run directory, steps inside, the capacity on top."""

import asyncio
import json
import shutil

import pytest

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.measure import Measurement, RunConfig, summarize_dir
from infermeter.report.rundir import load_run_dir

# 4 requests at once, 20 ms to the first token, 5 ms per token: 10 tokens take 70 ms
EMU = ["--ttft-ms", "20", "--itl-ms", "5", "--max-concurrency", "4"]
# the same server 4x slower, for the SLO searches: its TTFT sits 120 ms under their 200 ms SLO, so a
# loaded machine's scheduling delays (tens of ms beside a busy core) cannot move the capacity found
SLOW = ["--ttft-ms", "80", "--itl-ms", "20", "--max-concurrency", "4"]


@pytest.fixture(scope="module")
def emu4():
    with EmulatorProcess(EMU) as emu:
        yield emu


@pytest.fixture(scope="module")
def emu4_slow():
    with EmulatorProcess(SLOW) as emu:
        yield emu


def run(cfg):
    return asyncio.run(Measurement(cfg).run())


def test_find_max_on_concurrency_finds_the_server_limit(emu4_slow, tmp_path):
    # up to 4 streams the TTFT is 80 ms; with a 5th, requests wait up to 260 ms for a free slot (p90 ~320 ms)
    res = run(RunConfig(url=emu4_slow.base_url, load="find-max", search="concurrency", slo={"ttft_ms": 200.0}, slo_percentile=90,
                        requests=24, warmup=4, output_tokens="10", input_tokens="20", scrape=False, out=str(tmp_path / "fm")))
    s = res.summary
    assert s["capacity"]["concurrency"] == 4 and s["capacity"]["bracket"] == [4, 5] and s["capacity"]["converged"]
    assert [e["concurrency"] for e in s["steps"]] == [1, 2, 4, 8, 6, 5]
    assert [e["meets_slo"] for e in s["steps"]] == [True, True, True, False, False, False]
    on_disk = json.loads((tmp_path / "fm" / "summary.json").read_text())
    assert on_disk["capacity"]["step"] == 2 and on_disk["head_step"] == 2 and on_disk["completed"] == 24
    step = json.loads((tmp_path / "fm" / "steps" / "2" / "run.json").read_text())
    assert step["config"]["shape"] == {"kind": "constant-vus", "concurrency": 4} and step["config"]["warmup"] == 4
    # the report helper reads it as one sweep with six steps
    assert [st.name for st in load_run_dir(tmp_path / "fm").steps] == [str(k) for k in range(6)]
    # summarize rebuilds the plan's summary from the steps (also after a kill: then "interrupted")
    (tmp_path / "fm" / "summary.json").unlink()
    rebuilt = summarize_dir(tmp_path / "fm")
    assert rebuilt["capacity"]["concurrency"] == 4 and rebuilt["capacity"]["bracket"] == [4, 5]
    assert not rebuilt["interrupted"]
    shutil.rmtree(tmp_path / "fm" / "steps" / "5")
    assert summarize_dir(tmp_path / "fm")["interrupted"] is True


def test_sweep_runs_synchronous_throughput_and_rates_between(emu4, tmp_path):
    # p90: 20 requests per step are too few for a p99 (it needs 100 samples)
    res = run(RunConfig(url=emu4.base_url, load="sweep", sweep_rates=2, concurrency=8, arrival="constant", requests=20,
                        output_tokens="10", input_tokens="20", scrape=False, slo={"ttft_ms": 60.0}, slo_percentile=90,
                        calibrate=False, out=str(tmp_path / "sw")))
    s = res.summary
    every = s["steps"]
    # A step the client could not apply (a loaded machine: schedule lag) is not the server's answer: it is
    # run once more, its entry kept and marked; twice in a row stops the sweep, saying why.
    steps = [e for e in every if "client_limited" not in e]
    for k, e in enumerate(every):
        if "client_limited" in e:
            assert e["meets_slo"] is None
            assert e.get("retried") or "could not apply the load" in s["stopped"]
            if e.get("retried"):
                assert every[k + 1]["step"] == e["step"] and every[k + 1]["offered_rate"] == e["offered_rate"]
    if s.get("stopped"):
        return
    assert [e["step"] for e in steps] == ["synchronous", "throughput", "rate", "rate"]
    lo, hi = steps[0]["request_throughput"], steps[1]["request_throughput"]
    # one request takes at least 20 + 9 x 5 = 65 ms: one stream gives at most ~15 req/s, four slots at
    # most ~62 req/s. How close a loaded machine gets is a speed claim, so only the physical ceilings
    # and the direction are asserted.
    assert 0 < lo <= 1.05 / 0.065 and lo < hi <= 4 * 1.05 / 0.065
    assert hi > 1.5 * lo
    assert [e["offered_rate"] for e in steps[2:]] == pytest.approx([lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3])
    for e in steps[2:]:
        assert e["achieved_rate"] == pytest.approx(e["offered_rate"], rel=0.1)
    assert steps[1]["meets_slo"] is False  # 8 streams on 4 slots queue for ~70 ms
    assert s["rates"] == [e["offered_rate"] for e in steps[2:]]
    assert "capacity" not in s and every[s["head_step"]]["step"] in ("synchronous", "rate")
    assert all((tmp_path / "sw" / "steps" / str(k) / "requests.parquet").exists() for k in range(len(every)))


def test_cli_find_max_prints_the_capacity(emu4_slow, tmp_path, cli):
    p = cli("run", "--url", emu4_slow.base_url, "--load", "find-max", "--search", "concurrency", "--slo", "ttft_ms=200",
            "--slo-percentile", "90",
            "--requests", "16", "--output-tokens", "10", "--max-steps", "4", "--no-scrape", "--out", str(tmp_path / "c"))
    assert p.returncode == 0, p.stderr
    assert "capacity under the SLO: concurrency 4 streams" in " ".join(p.stdout.split())
    s = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert s["capacity"]["converged"] is False and s["capacity"]["bracket"] == [4, 8]


def test_find_max_without_slo_is_a_one_line_error(tmp_path, cli):
    p = cli("run", "--url", "http://127.0.0.1:9", "--load", "find-max", "--requests", "5", "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "--load find-max needs --slo" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
