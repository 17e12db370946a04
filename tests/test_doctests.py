"""The ``>>>`` examples in infermeter's docstrings are contracts: every one runs here, one test per module.

Each module's examples run with ``doctest`` (ELLIPSIS and NORMALIZE_WHITESPACE, as the docstrings are written) in
a scratch folder that holds the run folders they name (``results/demo``, ``results/sweep``, ``a``/``b`` ...),
with the objects they take as given (``run``, ``leaves``, ``costs``, ``content``, ``study``, ``cells``, ``prices``,
``soaks`` ...) in their namespace: :func:`_world` builds them once, from small synthetic records (no server, no
network). A module whose import needs an optional extra that is not installed is skipped, naming the extra.
"""

from __future__ import annotations

import datetime as dt
import doctest
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import infermeter

HERE = Path(__file__).parent
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
PACKAGE = Path(infermeter.__path__[0])
MODULES = sorted(".".join(["infermeter", *p.relative_to(PACKAGE).with_suffix("").parts]).removesuffix(".__init__")
                 for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
TODAY = dt.date(2026, 11, 30)
# modules whose examples need an optional extra that they import only when called: (package, extra)
NEEDS = {"infermeter.report.history": ("duckdb", "report")}


def _load(name: str, path: Path) -> ModuleType:
    """A sibling test module by path (tests run with --import-mode=importlib: conftests are not importable)."""
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def _examples(name: str) -> list[doctest.DocTest]:
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:  # an optional extra (ray, pynvml, transformers ...) is not installed
        if (exc.name or "infermeter").split(".")[0] == "infermeter":
            raise  # infermeter's own import error is a failure, never a skip
        pytest.skip(f"{name} needs a package that is not installed ({exc}); its examples are not run")
    return [t for t in doctest.DocTestFinder(exclude_empty=True).find(mod, name) if t.examples]


def _has_examples(name: str) -> bool:
    """Whether the module's source holds a ``>>>`` (read as text: collection imports no module). The ``.py``
    file is found by name, so a module compiled in place (``make fast``) is still read."""
    base = PACKAGE.joinpath(*name.split(".")[1:])
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return source.is_file() and ">>>" in source.read_text(encoding="utf-8")


HAS_EXAMPLES = [name for name in MODULES if _has_examples(name)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return _world(tmp_path_factory.mktemp("doctests"))


def _world(root: Path) -> tuple[Path, dict[str, Any]]:
    """The run folders and objects the examples name, built once in ``root`` (their working directory)."""
    rep = _load("infermeter_tests_report_conftest", HERE / "report" / "conftest.py")
    kit = _load("infermeter_tests_study_conftest", HERE / "study" / "conftest.py")
    write_run, write_sweep = rep.write_run, rep.write_sweep

    write_run(root / "results" / "demo", label="demo", n=200)
    write_sweep(root / "results" / "sweep", [5.0, 10.0, 20.0], label="sweep")
    write_run(root / "results" / "a100", label="a100", hardware="a100-80gb", ttft_s=0.25, tpot_s=0.03, seed=1)
    write_run(root / "results" / "h100", label="h100", hardware="h100-sxm", seed=2)
    write_run(root / "a", label="a", seed=3)
    write_run(root / "b", label="b", seed=4)
    (root / "tests").mkdir()
    (root / "tests" / "data").symlink_to(HERE / "data")  # the corpus the perfmodel examples read
    ns: dict[str, Any] = {}
    ns.update(_report(root))
    ns.update(_study(root, kit))
    return root, ns


def _report(root: Path) -> dict[str, Any]:
    """What the report modules' examples take as given: three runs loaded, aggregated and priced as
    ``build_report`` does (``runs``, ``leaves``, ``costs``, ``content``), the first one's aggregates
    (``run``, ``aggregates``) and per-request metrics (``metrics``)."""
    from infermeter.analysis.prices import PriceOptions
    from infermeter.report.aggregate import aggregate_run, read_requests
    from infermeter.report.build import ReportOptions, build_content
    from infermeter.report.pricing import price_runs
    from infermeter.report.rundir import load_run_dirs

    cwd = Path.cwd()
    os.chdir(root)
    try:
        runs = load_run_dirs(["results/demo", "results/a100", "results/h100"])
        leaves = [leaf for r in runs for leaf in r.leaves()]
        aggs = [(leaf, aggregate_run(leaf)) for leaf in leaves]
        options = ReportOptions(price_options=PriceOptions(provider="lambda"), today=TODAY,
                                now=dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc))
        costs, notes = price_runs(leaves, options.price_options, options.today)
        content = build_content(runs, aggs, costs, notes, options)
        run, aggregates = aggs[0]
        return {"runs": runs, "leaves": leaves, "costs": costs, "content": content, "run": run,
                "aggregates": aggregates, "metrics": read_requests(run)}
    finally:
        os.chdir(cwd)


def _study(root: Path, kit: ModuleType) -> dict[str, Any]:
    """What the study modules' examples take as given: a study of two configurations (h200, h100-sxm) on the
    chat profile with prices per hour and an SLO, simulated cells with figures given directly
    (``tests/study/conftest.py``: h200 4,187 output tokens/s at saturation, 3 req/s under the SLO; h100
    2,500 and 2 req/s), their ``prices``, the configurations' ``colors``, and one soak of h100-sxm whose
    windows, error budget and alerts are computed from the demo run's records."""
    from infermeter.analysis.alerts import evaluate_alerts, parse_alert
    from infermeter.report.rundir import load_run_dir
    from infermeter.study.charts import config_colors
    from infermeter.study.pricing import price_study
    from infermeter.study.soak import SoakResult, default_alerts, error_budget, soak_windows

    def conf(name: str, usd: float) -> dict[str, Any]:
        return {"config": name, "price_per_hour": usd, "price_source": "test", "price_date": "2026-11-01"}

    study = kit.study_of([conf("h200", 4.04), conf("h100-sxm", 3.99)], ["chat"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell("h200", "chat", 4187.0, cap_rps=3.0), kit.make_cell("h100-sxm", "chat", 2500.0, cap_rps=2.0)]
    prices = price_study(study, cells, TODAY)
    demo = load_run_dir(root / "results" / "demo")
    objective = 0.99
    windows = soak_windows(demo.requests_path, window_s=5.0, duration_s=15.0, slo=study.slo, objective=objective)
    rules = [parse_alert(a) for a in default_alerts(study.slo, objective)]
    soak = SoakResult(config="h100-sxm", hardware="2xh100-sxm:tp1", replicas=2, replicas_basis="given",
                      profile="chat", rate_per_s=20.0, duration_s=15.0, window_s=5.0, run_dir=str(demo.path),
                      summary=demo.summary.to_json(), windows=windows, budget=error_budget(windows, objective),
                      alerts=evaluate_alerts(rules, demo.summary, windows))
    return {"study": study, "cells": cells, "prices": prices, "colors": config_colors(study), "soaks": [soak]}


@pytest.mark.parametrize("name", HAS_EXAMPLES)
def test_docstring_examples(name: str, world: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    root, ns = world
    if name in NEEDS and importlib.util.find_spec(NEEDS[name][0]) is None:
        pytest.skip(f"{name}: its examples need {NEEDS[name][0]} (the {NEEDS[name][1]!r} extra), not installed")
    monkeypatch.chdir(root)
    # a history database of this test's own (the suite-wide one is shared with every test on this worker)
    monkeypatch.setenv("INFERMETER_HISTORY_DB", str(root / f"history-{name}.duckdb"))
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    tests = _examples(name)
    assert tests, f"{name}: its source has '>>>' but no docstring example was found"
    for test in tests:
        for key, value in ns.items():  # a name the module itself defines wins
            test.globs.setdefault(key, value)
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)
