"""The fit's loss is Huber's on the log error: a row far off pulls a shared value with a bounded force, a row near
it exactly as least squares would."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from infermeter.perfmodel import fit as fitmod
from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.fit import fit, huber

ROW = "albvllm-h100-tp2-l38b-b64-1024-1024"  # alone on its (Hopper, vLLM, FP16, TP2) entries


def test_huber_is_squared_within_delta_and_linear_beyond():
    d = fitmod.HUBER_DELTA
    assert huber(d / 2) == pytest.approx((d / 2) ** 2) and huber(-d / 2) == huber(d / 2)
    assert huber(d) == pytest.approx(d * d)  # continuous at delta
    assert huber(3 * d) - huber(2 * d) == pytest.approx(huber(2 * d) - huber(d))  # constant slope 2 delta beyond
    assert huber(3 * d) < (3 * d) ** 2


def _decode_value(rows):
    [v] = [e.value for e in fit(rows).entries if e.fitted and e.key == ("hopper", "vllm", "fp16", "decode", 2)]
    return v


@pytest.fixture(scope="module")
def base():
    return next(r for r in load_rows("tests/data/published-measurements.csv") if r.id == ROW)


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
