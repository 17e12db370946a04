"""ServerProcess, detached-state and venv-marker behaviour with tiny stand-in servers (no vLLM)."""

import json
import os
import sys
import time

import pytest

from infermeter.engines import detached
from infermeter.engines.process import ServerProcess, free_port, http_ok
from infermeter.engines.venv import EngineError, ManagedVenv, VenvSpec

# a health server that also spawns a child (like vLLM's engine core) in the same process group
SERVER = r'''
import http.server, subprocess, sys, time
delay, port = float(sys.argv[1]), int(sys.argv[2])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("CHILD_PID", child.pid, flush=True)
time.sleep(delay)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _child_pid(log):
    for _ in range(100):
        for line in log.read_text().splitlines():
            if line.startswith("CHILD_PID "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError("no child pid in log")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split()[2] != "Z"


def test_start_wait_healthy_and_stop_kills_the_whole_group(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    proc = ServerProcess([sys.executable, "-c", SERVER, "0.3", str(port)], env=dict(os.environ), log_path=log)
    proc.start()
    try:
        waited = proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout_s=20, poll_s=0.1)
        assert waited >= 0.0
        assert http_ok(f"http://127.0.0.1:{port}/health")
        child = _child_pid(log)
        assert _alive(child)
    finally:
        proc.stop(grace_s=5)
    assert not proc.alive()
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)
    assert proc.stop() == proc.proc.returncode  # stopping twice is harmless


def test_early_exit_raises_with_the_log_tail(tmp_path):
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-c", "import sys; print('CUDA? no: boom reason'); sys.exit(3)"]
    proc = ServerProcess(cmd, env=dict(os.environ), log_path=log)
    proc.start()
    with pytest.raises(EngineError) as info:
        proc.wait_healthy("http://127.0.0.1:9/health", timeout_s=20, poll_s=0.05)
    msg = str(info.value)
    assert "exited with code 3" in msg and "boom reason" in msg and str(log) in msg


def test_health_timeout_stops_the_server(tmp_path):
    port = free_port()
    proc = ServerProcess([sys.executable, "-c", SERVER, "30", str(port)], env=dict(os.environ),
                         log_path=tmp_path / "s.log")
    proc.start()
    with pytest.raises(EngineError, match="not healthy .* after 0 s"):
        proc.wait_healthy(f"http://127.0.0.1:{port}/health", timeout_s=0.3, poll_s=0.1)
    assert not proc.alive()


def test_detached_record_is_dropped_when_pid_is_not_the_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERMETER_CACHE_DIR", str(tmp_path))

    class Eng:
        pid, port, base_url, model, log_path = os.getpid(), 1234, "http://127.0.0.1:1234", "smollm2", "x.log"

    path = detached.save("vllm-cpu", Eng())
    assert json.loads(path.read_text())["base_url"] == "http://127.0.0.1:1234"
    # our own pid runs pytest, not vLLM: the record is stale, removed, and nothing is killed
    assert detached.load("vllm-cpu") is None
    assert not path.exists()
    assert detached.stop("vllm-cpu") is False


def test_venv_marker_decides_readiness(tmp_path):
    spec = VenvSpec(packages=("a==1",), no_deps=("b",), remove=("c",))
    venv = ManagedVenv(tmp_path, spec)
    assert not venv.ready()
    venv.python.parent.mkdir(parents=True)
    venv.python.write_text("")
    (tmp_path / "installed.json").write_text(json.dumps({"spec": spec.digest()}))
    assert venv.ready()
    assert venv.ensure() == venv.python  # ready: returns without running pip
    changed = ManagedVenv(tmp_path, VenvSpec(packages=("a==2",)))
    assert not changed.ready()  # a different spec installs again


def test_failed_pip_step_names_step_and_log(tmp_path):
    venv = ManagedVenv(tmp_path, VenvSpec(packages=("x",)), base_python=sys.executable)
    venv.python.parent.mkdir(parents=True)
    venv.python.symlink_to("/bin/false")  # every pip call "fails"
    with pytest.raises(EngineError) as info:
        venv.ensure(timeout_s=30)
    assert "pip install exited 1" in str(info.value) and str(tmp_path / "install.log") in str(info.value)
    assert not (tmp_path / "installed.json").exists()
