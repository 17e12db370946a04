"""A run killed with SIGKILL leaves every finished request readable; summarize rebuilds the summary."""

import json
import os
import signal
import subprocess
import time

import pytest


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
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"interrupted (SIGINT)" in err and str(out).encode() in err
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] > 0
    assert (out / "requests.parquet").exists() and not journal.exists()


def test_sigterm_stops_cleanly_and_exits_143(emulator, tmp_path, infermeter_bin):
    out = tmp_path / "t"
    proc = subprocess.Popen([str(infermeter_bin), "run", "--url", emulator.base_url, "--concurrency", "2", "--requests", "100000",
                             "--output-tokens", "3", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    journal = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (journal.exists() and journal.stat().st_size > 2000):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and b"interrupted (SIGTERM)" in err
    assert json.loads((out / "summary.json").read_text())["completed"] > 0


def test_ctrl_c_in_a_command_that_does_not_trap_it_exits_130_saying_so(tmp_path, infermeter_bin):
    import threading

    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a hang is reported with every thread's stack (below)
    proc = subprocess.Popen([str(infermeter_bin), "simulate", "--rate", "50", "--requests", "50000000",
                             "--out", str(tmp_path / "sim")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env, preexec_fn=_default_sigint)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, b"")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(b"simulating" in x for x in lines):
        time.sleep(0.1)
    time.sleep(0.5)
    helpers = _children(proc.pid)  # the request feeder, once started
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints where each thread is stuck
        proc.wait(timeout=30)
        reader.join(timeout=10)
        pytest.fail("no exit within 30 s of SIGINT; stacks:\n" + b"".join(lines).decode(errors="replace")[-8000:])
    reader.join(timeout=10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in helpers):
        time.sleep(0.1)
    assert not [pid for pid in helpers if _alive(pid)], "a helper process outlived the interrupted command"
    assert proc.returncode == 130 and any(b"interrupted" in x for x in lines), lines


def _default_sigint() -> None:
    """Give the command Ctrl-C's default disposition, as a terminal would. A test run started as a background job of a
    non-interactive shell (``make test &``, as a clean-clone check is often run) inherits SIGINT *ignored*, and Python
    then installs no KeyboardInterrupt handler: the command would rightly keep running, and this test would time out."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
