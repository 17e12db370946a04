"""Validation against the published measurements: targets in and out of sample, provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from infermeter.errors import DataError
from infermeter.perfmodel.calibration import load_calibration
from infermeter.perfmodel.fit import fit
from infermeter.perfmodel.validate import load_rows, predict, validate

CSV = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"


@pytest.fixture(scope="module")
def rows():
    return load_rows(CSV)


@pytest.fixture(scope="module")
def report(rows):
    return validate(rows)


def test_rows_parse(rows):
    assert len(rows) == 32
    first = rows[0]
    assert (first.id, first.config, first.concurrency, first.metric, first.value) == (
        "tr8-h100-128", "1xh100-sxm:tp1,pp1", None, "output_tokens_per_s", 28312.0)


def test_errors_meet_the_targets_in_and_out_of_sample(report):
    assert report.median_abs_error <= 0.15 and report.max_abs_error <= 0.35
    assert report.median_abs_error_loo <= 0.15 and report.max_abs_error_loo <= 0.35
    assert all(r.predicted_loo is not None for r in report.results)


def test_shipped_calibration_is_the_fit_of_the_shared_rows(rows):
    """data/calibration.yaml's fitted block must be what `python -m infermeter.perfmodel.fit` produces."""
    shipped = {e.key: e.value for e in load_calibration().entries if e.prior is not None}
    fresh = {e.key: e.value for e in fit(rows).entries if e.prior is not None}
    assert shipped.keys() == fresh.keys()
    for k in shipped:
        assert shipped[k] == pytest.approx(fresh[k], abs=0.002), k


def test_predict_uses_the_row_metric(rows):
    ttft = next(r for r in rows if r.id == "trt05-h100-7b-2048")
    assert 20 < predict(ttft) < 50  # milliseconds, not seconds


def test_bad_files_name_the_problem(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("id,model\nx,llama-3.1-8b\n")
    with pytest.raises(DataError, match="missing column"):
        load_rows(f)
    header = CSV.read_text().splitlines()[0]
    f.write_text(header + "\nx,llama-3.1-8b,h100-sxm,1,1,1,bf16,vllm,saturated,max,128,128,joules,5,src,\n")
    with pytest.raises(DataError, match=r"m.csv:2: column 'metric' 'joules' unknown"):
        load_rows(f)
    f.write_text(header + "\nx,llama-9,h100-sxm,1,1,1,bf16,vllm,saturated,max,128,128,output_tokens_per_s,5,src,\n")
    with pytest.raises(DataError, match="measurement row 'x': unknown model 'llama-9'"):
        predict(load_rows(f)[0])


def test_whole_publications_held_out_still_meet_the_targets(rows):
    report = validate(rows, holdout="source")
    assert report.median_abs_error_loo <= 0.15 and report.max_abs_error_loo <= 0.35
    with pytest.raises(DataError, match="--holdout 'half' unknown"):
        validate(rows, holdout="half")
