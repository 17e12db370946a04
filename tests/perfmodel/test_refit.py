"""The refit's one leave-one-publication-out pass (``python -m infermeter.perfmodel.refit --derived CSV``) gives
the same texts as the two modules' own commands, which each run that pass: the refit writes what a fresh
derivation (the tests of the shipped files) prints. On a small corpus cut from the real one, so it runs in seconds."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

from infermeter.perfmodel import paired, refit, uncertainty
from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.validate import validate

CORPUS = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"
# three publications' rows (tr8- and tr70- are one edition): TensorRT-LLM v1.0 on Hopper, LMDeploy 0.1 on A100, the vLLM FP8-KV blog
KEEP = ("tr8-", "tr70-", "lmd010-", "vblog-")


def _small(tmp_path: Path) -> str:
    lines = CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines[1:] if ln.startswith(KEEP)]
    path = tmp_path / "small.csv"
    path.write_text(lines[0] + "".join(kept), encoding="utf-8")
    return str(path)


def _printed(main: object, path: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main([path]) == 0  # type: ignore[operator]
    return buf.getvalue()


def test_derived_is_what_the_two_commands_print(tmp_path: Path) -> None:
    path = _small(tmp_path)
    out = refit.derived(path)
    assert out["uncertainty"] == _printed(uncertainty.main, path)
    assert out["paired"] == _printed(paired.main, path)
    assert out["uncertainty"].startswith("uncertainty:") and "same_family" in out["paired"]
    # the pass's medians, as validate reports them, overall and split into classes and engines that cover every row
    report = validate(load_rows(path), holdout="source")
    assert out["summary"]["all"] == {"rows": len(report.results), "in": round(report.median_abs("in"), 4),
                                     "lopo": round(report.median_abs("lopo"), 4)}
    assert sum(out["summary"][k]["rows"] for k in ("dense", "moe") if k in out["summary"]) == len(report.results)
    assert sum(v["rows"] for k, v in out["summary"].items() if k.startswith("engine:")) == len(report.results)


def test_derived_flag_prints_json(tmp_path: Path) -> None:
    path = _small(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "infermeter.perfmodel.refit", "--derived", path],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == refit.derived(path)


def test_fit_many_gives_the_serial_fits_in_worker_processes(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A leave-one-out pass's refits, spread over processes (``fit.fit_many``), are the fits one process would make."""
    from infermeter.perfmodel.calibration import load_calibration
    from infermeter.perfmodel.corpus import load_rows, publication
    from infermeter.perfmodel.fit import fit, fit_many, priors_only

    rows = load_rows(_small(tmp_path))
    base = priors_only(load_calibration())
    pubs = list(dict.fromkeys(publication(r) for r in rows))
    subsets = [[r for r in rows if publication(r) != p] for p in pubs] + [rows]
    assert len(subsets) >= 4
    monkeypatch.setenv("INFERMETER_FIT_WORKERS", "2")
    spread = fit_many(subsets, base)
    serial = [fit(s, base) for s in subsets]
    assert [c.entries for c in spread] == [c.entries for c in serial]
    assert [c.engines for c in spread] == [c.engines for c in serial]


def test_fit_workers_names_a_bad_setting(monkeypatch) -> None:  # noqa: ANN001
    import pytest

    from infermeter.perfmodel.fit import fit_workers

    from infermeter.errors import ConfigError

    for bad in ("many", "0", "-2"):
        monkeypatch.setenv("INFERMETER_FIT_WORKERS", bad)
        with pytest.raises(ConfigError, match=f"INFERMETER_FIT_WORKERS='{bad}'"):
            fit_workers()
    monkeypatch.setenv("INFERMETER_FIT_WORKERS", "1")
    assert fit_workers() == 1
