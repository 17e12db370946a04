"""When calibration runs, and when the requested load is too much for this client."""

import pytest

from infermeter.measure.capacity import capacity_warning, worth_calibrating


@pytest.mark.parametrize("rps,tokens,expect", [(None, 100, False), (10, 100, False), (10, 600, True),
                                               (60, 10, True), (50, 100, False)])
def test_small_loads_skip_calibration(rps, tokens, expect):
    assert worth_calibrating(rps, tokens) is expect


def test_warning_above_80_percent_of_capacity(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    cal = {"capacity_rps": 1000.0}
    assert capacity_warning(cal, 800.0) is None
    msg = capacity_warning(cal, 801.0)
    assert msg.startswith("client_capacity: requested 801 req/s exceeds 80% of this client's measured capacity 1000 req/s")
    # two processes on two cores: 2000; four processes still count two cores; Ray counts every worker
    assert capacity_warning(cal, 1500.0, workers=2) is None
    assert "estimated: 1000 per process x 2" in capacity_warning(cal, 1700.0, workers=4)
    assert capacity_warning(cal, 3000.0, workers=4, distributed=True) is None
