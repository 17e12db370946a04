"""Soak runs: windows and checkpoints; a SIGKILLed run resumes with --resume and ends with every request once."""

import json
import signal
import subprocess
import time

import numpy as np
import pyarrow.parquet as pq
import pytest


def test_killed_soak_run_resumes_where_it_stopped(tmp_path, cli, infermeter_bin):
    out = tmp_path / "soak"
    args = [str(infermeter_bin), "run", "--rate", "50", "--arrival", "constant", "--duration", "4", "--window", "1s",
            "--checkpoint", "0.5", "--part-records", "100", "--output-tokens", "3", "--no-scrape", "--no-calibrate",
            "--emulator", "--ttft-ms 5 --itl-ms 1", "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out / "checkpoint.json").exists():
        time.sleep(0.05)
    time.sleep(0.6)
    emulators = subprocess.run(["ps", "--ppid", str(proc.pid), "-o", "pid="], capture_output=True, text=True).stdout.split()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for pid in emulators:  # the embedded emulator of the killed run
        subprocess.run(["kill", pid])
    partial = json.loads((out / "summary.json").read_text())
    assert partial["partial"] is True and partial["completed"] > 0
    assert (out / "parts").is_dir() and not (out / "requests.parquet").exists()

    p = cli("run", "--resume", str(out), "--no-scrape", "--json")
    assert p.returncode == 0, p.stderr
    assert "resuming at request" in p.stderr
    s = json.loads(p.stdout)
    run = json.loads((out / "run.json").read_text())
    assert len(run["segments"]) == 2 and run["segments"][1]["gap_s"] > 0
    t = pq.read_table(out / "requests.parquet")
    ids = np.sort(t.column("request_id").to_numpy())
    assert ids.tolist() == list(range(201))  # 50 req/s for 4 s: offsets 0, 0.02, ..., 4.0
    assert s["completed"] + s["cancelled"] == 201 and s["cancelled"] == run["segments"][1]["lost"]
    # the downtime is not measured time: throughput stays near the offered 50 req/s
    assert s["request_throughput"] == pytest.approx(50, rel=0.1)
    assert not s.get("partial") and not (out / "parts").exists()
    series = s["windows"]["series"]
    assert sum(w["completed"] for w in series) == s["completed"]
    # one window per second of run clock, the downtime included
    last_end = float(np.nanmax(t.column("ended_at").to_numpy(zero_copy_only=False)))
    assert [w["index"] for w in series] == list(range(int(last_end) + 1))
    assert last_end > 4 + run["segments"][1]["gap_s"] - 0.5


def test_a_soak_summary_carries_its_scrape_findings(tmp_path, cli):
    """The soak's summary is judged before the scraper stops; the scrape findings still reach it
    (the embedded twin emulator serves /metrics; a 512-byte cap truncates every scrape)."""
    out = tmp_path / "soak-scrape"
    p = cli("run", "--rate", "20", "--arrival", "constant", "--duration", "3", "--window", "1s", "--output-tokens", "3",
            "--scrape-interval", "0.5", "--scrape-max-mb", "0.0005", "--no-calibrate", "--out", str(out), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert any(w.startswith("scrape_truncated") for w in summary["warnings"]), summary["warnings"]
    assert "scrape_truncated" in {f["code"] for f in summary.get("findings", [])}
