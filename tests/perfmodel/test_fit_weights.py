"""The fit weighs a publication's rows by 1/sqrt(rows): one lab's many rows do not outvote another's few."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from infermeter.perfmodel import fit as fitmod
from infermeter.perfmodel.corpus import load_rows
from infermeter.perfmodel.fit import _publication_weights, fit

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
def rows():
    base = next(r for r in load_rows("tests/data/published-measurements.csv") if r.id == ROW)
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
