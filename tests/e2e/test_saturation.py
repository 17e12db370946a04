"""Overload is a verdict: an emulator offered 3x what it serves, and a simulation at 3x, are flagged.

The issue's cases, shortened for CI: a one-slot emulator (50 ms + 10 ms/token, ~1 s a request here)
offered 10 req/s; the 70B twin on 4xA100 TP4 at 47.8 req/s (about 3x its capacity).
"""

import json

import pytest

from infermeter.engines.emulator import EmulatorProcess


@pytest.fixture(scope="module")
def one_slot():
    with EmulatorProcess(["--ttft-ms", "50", "--itl-ms", "10", "--max-concurrency", "1"]) as emu:
        yield emu


def test_an_overloaded_emulator_is_saturated_and_its_cancelled_requests_count(one_slot, tmp_path, cli):
    out = tmp_path / "sat"
    p = cli("run", "--url", one_slot.base_url, "--rate", "10", "--arrival", "constant", "--duration", "3",
            "--grace", "4", "--output-tokens", "20", "--no-scrape", "--no-history", "--slo", "ttft_ms=500",
            "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    # overload is a verdict, not an invalid run; on a loaded machine the client may still fall behind
    # (schedule lag), which is the only reason allowed to invalidate this run
    assert s["saturated"] is True
    assert all(r.startswith("schedule_lag") for r in s["invalid_reasons"]), s["invalid_reasons"]
    sat = s["saturation"]
    assert sat["completion_rate"] < 0.5 * sat["offered_rate"]  # ~4 req/s served of 10 offered
    assert any(e.startswith("completed") for e in sat["evidence"])
    # every scheduled request is counted: completed, or cancelled at the end of --grace
    assert s["scheduled"] == 31 and s["completed"] + s["unfinished"] == s["scheduled"] and s["unfinished"] > 0
    assert s["slo_attainment"] < 0.5 and s["unfinished_rate"] == pytest.approx(s["unfinished"] / 31)
    text = " ".join(p.stdout.split())
    assert "SATURATED: the server could not keep up with the offered load" in text
    assert "did not finish" in text


def test_an_overloaded_simulation_is_saturated_with_the_evidence(tmp_path, cli):
    out = tmp_path / "sim"
    p = cli("simulate", "--model", "llama-3.1-70b", "--gpu", "4xa100-80gb:tp4", "--rate", "47.8", "--duration", "120",
            "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["source"] == "simulated" and s["saturated"] is True
    sat = s["saturation"]
    assert sat["completion_rate"] < 0.6 * sat["offered_rate"]
    assert sat["trend_p"] < 0.01 and sat["latency_end_s"] > 10 * sat["latency_start_s"]
    assert "SATURATED" in p.stdout


def test_a_server_that_keeps_up_is_not_saturated(tmp_path, cli):
    out = tmp_path / "ok"
    p = cli("simulate", "--model", "llama-3.1-70b", "--gpu", "4xa100-80gb:tp4", "--rate", "5", "--duration", "120",
            "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["saturated"] is False and s["saturation"]["evidence"] == []
    assert "saturated: no" in p.stdout
