"""A run killed with SIGKILL leaves every finished request readable; summarize rebuilds the summary."""

import json
import signal
import subprocess
import time


def test_sigkill_leaves_readable_records(emulator, tmp_path, cli, infermeter_bin):
    out = tmp_path / "k"
    proc = subprocess.Popen([str(infermeter_bin), "run", "--url", emulator.base_url, "--concurrency", "4", "--requests", "100000",
                             "--output-tokens", "3", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if journal.exists() and journal.stat().st_size > 20000:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = journal.read_bytes().count(b"\n")
    assert lines > 20
    p = cli("summarize", str(out), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["completed"] + s["failed"] >= lines
    assert any(w.startswith("incomplete") for w in s["warnings"])
    assert (out / "requests.parquet").exists()


def test_sigint_stops_cleanly_and_writes_summary(emulator, tmp_path, cli, infermeter_bin):
    out = tmp_path / "i"
    proc = subprocess.Popen([str(infermeter_bin), "run", "--url", emulator.base_url, "--concurrency", "4", "--requests", "100000",
                             "--output-tokens", "3", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    journal = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.exists() and journal.stat().st_size > 5000):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] > 0
    assert (out / "requests.parquet").exists() and not journal.exists()
