import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "infermeter"


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def infermeter_bin():
    return BIN
