"""Ray backend pieces that need no cluster: clock offsets and the missing-extra error."""

import sys

import pytest

from infermeter.errors import UserError
from infermeter.load.ray_backend import estimate_offset, ray_module


def test_offset_from_the_shortest_round_trip():
    # (driver send, remote clock, driver receive): the 2 ms round trip wins over the 10 ms one
    samples = [(100.000, 105.010, 100.010), (200.000, 205.002, 200.002), (300.000, 305.009, 300.004)]
    offset, rtt = estimate_offset(samples)
    assert offset == pytest.approx(5.001) and rtt == pytest.approx(0.002)


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        estimate_offset([])


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"infermeter\[distributed\]"):
        ray_module()
