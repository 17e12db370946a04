"""Suite-wide fixtures: the installed CLI, a throwaway history database for every run, and headless Chromium."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

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


class Chromium(NamedTuple):
    """The headless-Chromium driver (``tests/report/_chromium.py``) and the browser binary it found."""

    driver: Any
    path: Path

    def inspect(self, page: Path, extra: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.driver.inspect_page(self.path, page, extra, **kw)


@pytest.fixture(scope="session")
def chromium_browser() -> Chromium:
    """Headless Chromium (installed with apt-get when missing; the test is skipped when that is impossible).
    The driver is a sibling module, loaded by path: tests run with --import-mode=importlib."""
    name = "infermeter_tests_chromium"
    driver = sys.modules.get(name)
    if driver is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "report" / "_chromium.py")
        assert spec is not None and spec.loader is not None
        driver = importlib.util.module_from_spec(spec)
        sys.modules[name] = driver  # dataclasses look their module up while the class is made
        spec.loader.exec_module(driver)
    path, why = driver.ensure_chromium()
    if path is None:
        pytest.skip(f"headless Chromium is not available: {why}")
    return Chromium(driver, path)
