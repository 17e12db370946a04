import os
import subprocess
import sys
from pathlib import Path

import pytest

from infermeter.twin.process import EmulatorProcess

BIN = Path(sys.executable).parent / "infermeter"


@pytest.fixture(scope="module")
def emulator():
    with EmulatorProcess(["--ttft-ms", "40", "--itl-ms", "8", "--max-concurrency", "64"]) as emu:
        yield emu


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
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
