"""One number formatter: no Python repr (None, a dict, 8.42637, 1.21e+03) reaches what people read."""

from infermeter.load.shapes.rate import ConstantArrivalRate
from infermeter.numbers import limits, rate, sig, usd


def test_significant_figures_never_use_e_notation_or_six_digits():
    assert [sig(8.42637), sig(1210.5), sig(0.0004371), sig(5.0), sig(None)] == ["8.426", "1,210", "0.0004371", "5", "–"]


def test_a_missing_rate_is_a_closed_loop_and_limits_are_text():
    assert rate(None) == "none (closed loop)" and rate(23.06169428689927) == "23.06 req/s"
    assert limits({"ttft_ms": 500.0, "tpot_ms": 50.0}) == "ttft_ms <= 500, tpot_ms <= 50"
    assert usd(1902.1) == "$1,902" and usd(2.5) == "$2.50" and usd(0.01234) == "$0.0123"


def test_a_measured_rate_describes_its_load_in_four_figures():
    assert ConstantArrivalRate(rate_per_s=8.42637).describe().startswith("open loop, 8.426 req/s (")
