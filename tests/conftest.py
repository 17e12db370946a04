"""Suite-wide fixtures: the installed CLI, a throwaway history database for every run, and headless Chromium."""

import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

BIN = Path(sys.executable).parent / "infermeter"

# Parallel runs (`make test` runs pytest-xdist with --dist loadgroup): a file's tests stay on one worker
# (module fixtures, emulators and servers a file starts are built once), and files that share a heavy
# session fixture or a machine-wide resource share a worker, so it is built once and never contended.
# Groups are listed heaviest first: they are scheduled first, so the longest one does not start last.
GROUPS: dict[str, tuple[str, ...]] = {
    # the real vLLM CPU engine: one at a time (CPU and memory; the converted GGUF model cache is shared)
    "vllm-engine": ("tests/engines/test_vllm_real.py", "tests/campaign/test_vllm_campaign.py"),
    # the corpus's refits (the leave-one-publication-out report and the leave-one-combination-out records)
    "corpus-fits": ("tests/perfmodel/test_validate.py", "tests/perfmodel/test_uncertainty.py",
                    "tests/perfmodel/test_paired.py"),
    # local Ray clusters: one per machine at a time (a second `ray.init` joins the first)
    "ray": ("tests/e2e/test_ray.py", "tests/e2e/test_ray_auth.py", "tests/twin/test_fleet.py"),
    # headless Chromium, one browser per worker
    "browser": ("tests/report/test_chart_marks_browser.py", "tests/report/test_report_browser.py",
                "tests/study/test_study_e2e.py", "tests/study/test_decision.py"),
}
# groups whose first test builds a session fixture that takes minutes on a loaded machine (the timeout counts it)
SLOW_SETUP = {"corpus-fits": 1200, "vllm-engine": 900}
_GROUP_OF = {path: name for name, paths in GROUPS.items() for path in paths}
_ORDER = {name: i for i, name in enumerate(GROUPS)}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Give every test an ``xdist_group`` (its group above, else its file) and put the named groups first."""
    root = Path(str(config.rootpath))

    def rel(item) -> str:
        return Path(str(item.path)).resolve().relative_to(root).as_posix()

    for item in items:
        path = rel(item)
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(_GROUP_OF.get(path, path)))
        if _GROUP_OF.get(path) in SLOW_SETUP and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_SETUP[_GROUP_OF[path]]))
    items.sort(key=lambda item: _ORDER.get(_GROUP_OF.get(rel(item), ""), len(_ORDER)))  # stable: file order kept


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (subprocesses, servers a fixture stopped)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


_CPU_LOG = os.environ.get("INFERMETER_TEST_CPU")  # a folder: one line per test (CPU and wall seconds) per worker
if _CPU_LOG:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu0, wall0 = _cpu_s(), time.monotonic()
        yield
        line = {"test": item.nodeid.split("@")[0], "cpu_s": round(_cpu_s() - cpu0, 3),
                "wall_s": round(time.monotonic() - wall0, 3)}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(_CPU_LOG) / f"{worker}.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")


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
