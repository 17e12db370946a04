"""The fit weighs a publication's rows by 1/sqrt(rows): one lab's many rows do not outvote another's few; and its loss
is Huber's on the log error: a row far off pulls a shared value with a bounded force, a row near it exactly as least
squares would."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from infermeter.perfmodel import fit as fitmod
from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.fit import _publication_weights, fit, huber

ROW = "albvllm-h100-tp2-l38b-b64-1024-1024"  # alone on its (Hopper, vLLM, FP16, TP2) entries


class _M:
    def __init__(self, url: str):
        self.row = type("R", (), {"source_url": url, "id": "x"})()


def test_each_publication_weighs_the_square_root_of_its_rows():
    ws = _publication_weights([_M("a")] + [_M("b")] * 4)  # type: ignore[list-item]
    assert ws == [1.0, 0.5, 0.5, 0.5, 0.5]
    assert sum(ws[1:]) == pytest.approx(math.sqrt(4) * ws[0])


def _decode_value(rows):
    cal = fit(rows)
    [v] = [e.value for e in cal.entries if e.fitted and e.key == ("hopper", "vllm", "fp16", "decode", 2)]
    return v


@pytest.fixture(scope="module")
def base():
    return next(r for r in load_rows("tests/data/published-measurements.csv") if r.id == ROW)


@pytest.fixture(scope="module")
def rows(base):
    one = [base]
    many = [replace(base, id=f"{ROW}-copy{i}", value=base.value * 1.5, source_url="https://example.org/other-lab")
            for i in range(9)]
    return one, many


def test_nine_rows_of_one_lab_pull_the_fit_less_than_nine_labs_would(rows, monkeypatch):
    one, many = rows
    alone = _decode_value(one)
    weighted = _decode_value(one + many)
    monkeypatch.setattr(fitmod, "PUBLICATION_WEIGHTS", False)
    unweighted = _decode_value(one + many)
    assert alone < weighted < unweighted  # the other lab's faster rows pull the value up, weighted less
    assert abs(math.log(weighted / alone)) < abs(math.log(unweighted / alone))


def test_huber_is_squared_within_delta_and_linear_beyond():
    d = fitmod.HUBER_DELTA
    assert huber(d / 2) == pytest.approx((d / 2) ** 2) and huber(-d / 2) == huber(d / 2)
    assert huber(d) == pytest.approx(d * d)  # continuous at delta
    assert huber(3 * d) - huber(2 * d) == pytest.approx(huber(2 * d) - huber(d))  # constant slope 2 delta beyond
    assert huber(3 * d) < (3 * d) ** 2


@pytest.mark.parametrize("factor", [5.0, 0.2])
def test_a_row_five_times_off_pulls_less_than_under_least_squares(base, monkeypatch, factor):
    other = replace(base, id=f"{ROW}-other", value=base.value * factor, source_url="https://example.org/other-lab")
    alone = _decode_value([base])
    robust = _decode_value([base, other])
    monkeypatch.setattr(fitmod, "HUBER_DELTA", 100.0)  # least squares
    squared = _decode_value([base, other])
    assert (robust - alone) * (factor - 1) > 0  # still pulled towards the other lab's value
    assert abs(math.log(robust / alone)) < abs(math.log(squared / alone)) - 0.05


def test_a_row_near_the_fit_counts_as_under_least_squares(base, monkeypatch):
    other = replace(base, id=f"{ROW}-other", value=base.value * 1.1, source_url="https://example.org/other-lab")
    robust = _decode_value([base, other])
    monkeypatch.setattr(fitmod, "HUBER_DELTA", 100.0)
    assert _decode_value([base, other]) == pytest.approx(robust, rel=1e-3)
