"""--ray against a token-authenticated two-node Ray cluster started as users start one (`ray start`).

The cluster (a head and a worker node on 127.0.0.1, RAY_AUTH_MODE=token) runs in processes of its
own, so this test process never imports Ray in token mode. infermeter runs as the CLI does, with
HOME pointed at an empty folder so that only the token the test gives can be found.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infermeter.load import ray_auth

pytest.importorskip("ray", reason="Ray is not installed (extra 'distributed')")
pytestmark = pytest.mark.slow

RAY = Path(sys.executable).with_name("ray")
RAY_ENV = (ray_auth.MODE, ray_auth.TOKEN, ray_auth.TOKEN_PATH, "RAY_ADDRESS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RAY_ENV}
    env["HOME"] = str(home)
    return env


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"ray start exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"the Ray head did not listen on {port} within {deadline_s:.0f} s")


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not RAY.exists():
        pytest.skip("the `ray` command is not installed beside this Python")
    home = tmp_path_factory.mktemp("rayhome")
    token = secrets.token_hex(32)
    env = {**_clean_env(home), ray_auth.MODE: "token", ray_auth.TOKEN: token}
    port = _free_port()
    common = ["--block", "--num-cpus", "2", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        head = subprocess.Popen([str(RAY), "start", "--head", "--port", str(port), "--include-dashboard=false", *common],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(head)
        _wait_port(port, head)
        procs.append(subprocess.Popen([str(RAY), "start", "--address", f"127.0.0.1:{port}", *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        yield f"127.0.0.1:{port}", token
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def _run(address: str, emulator_url: str, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("infermeter", path=str(Path(sys.executable).parent)) or "infermeter"
    return subprocess.run([exe, "run", "--url", emulator_url, "--ray", address, "--workers", "3", "--rate", "30",
                           "--arrival", "constant", "--requests", "30", "--output-tokens", "3", "--no-scrape",
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)


def test_a_given_token_is_passed_through_and_the_load_spreads_over_both_nodes(token_cluster, emulator, tmp_path):
    address, token = token_cluster
    env = {**_clean_env(tmp_path), ray_auth.TOKEN: token}          # no RAY_AUTH_MODE: infermeter decides it
    res = _run(address, emulator.base_url, tmp_path / "r", env)
    assert res.returncode == 0, res.stdout + res.stderr
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["load"]["backend"] == "ray"
    assert len({w["node_id"] for w in run["runtime"]["workers"]}) == 2
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "r").rglob("*") if p.is_file())
    assert token not in written and token not in res.stdout + res.stderr


@pytest.mark.parametrize("given", [None, "0" * 64], ids=["missing", "wrong"])
def test_a_missing_or_wrong_token_is_one_line_that_says_what_to_set(token_cluster, emulator, tmp_path, given):
    address, token = token_cluster
    env = _clean_env(tmp_path)
    if given:
        env[ray_auth.TOKEN] = given
    res = _run(address, emulator.base_url, tmp_path / "r", env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert not ray_auth.refused(res.stdout + res.stderr), res.stderr   # no stream of Ray's native auth warnings
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert ray_auth.TOKEN in errors[0] and address in errors[0]
    assert ("refused the token" in errors[0]) == bool(given)
    assert token not in res.stdout + res.stderr
