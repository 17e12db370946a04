"""``infermeter engine`` without starting anything: status, down and a bad engine name."""

import subprocess
import sys

from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.engines import EngineError


def test_status_and_down_on_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERMETER_CACHE_DIR", str(tmp_path))
    runner = CliRunner()
    status = runner.invoke(app, ["engine", "status", "vllm-cpu"])
    assert status.exit_code == 0
    assert status.output.splitlines()[0] == f"vllm-cpu: installed: no; venv {tmp_path}/engines/vllm-cpu/venv"
    assert status.output.splitlines()[1] == "vllm-cpu: not running (detached servers only)"
    down = runner.invoke(app, ["engine", "down", "vllm-cpu"])
    assert (down.exit_code, down.output) == (0, "vllm-cpu: not running\n")


def test_unknown_engine_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERMETER_CACHE_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["engine", "status", "tgi-gpu"])
    assert isinstance(result.exception, EngineError)
    assert str(result.exception) == "unknown engine 'tgi-gpu'; known: vllm-cpu"


def test_cli_exit_code_for_unknown_engine(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "infermeter.cli.main", "engine", "up", "tgi-gpu"],
                          capture_output=True, text=True, env={"INFERMETER_CACHE_DIR": str(tmp_path), "PATH": ""},
                          timeout=60)
    assert proc.returncode == 2
    assert "unknown engine 'tgi-gpu'" in proc.stderr
