"""Suite-wide fixtures: the installed CLI, and a throwaway history database for every run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "infermeter"


@pytest.fixture(autouse=True, scope="session")
def _isolated_history(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("INFERMETER_HISTORY_DB", str(tmp_path_factory.mktemp("history") / "history.duckdb"))
    yield
    mp.undo()


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``infermeter ARGS`` as a subprocess, without any API key from the caller's environment."""
    e = dict(os.environ)
    e.pop("OPENAI_API_KEY", None)
    e.update(env or {})
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, env=e)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def infermeter_bin():
    return BIN
