"""Schedules reproduce intended times and rates for a fixed seed."""

import math

import numpy as np
import pytest

from infermeter.load.shapes import ConstantArrivalRate, RampingArrivalRate, TraceReplay


def take(it, n):
    return np.array([next(it) for _ in range(n)])


def test_constant_rate_is_exact():
    t = take(ConstantArrivalRate(rate_per_s=8, arrival="constant").arrivals(np.random.default_rng(0)), 5)
    assert t.tolist() == [0.0, 0.125, 0.25, 0.375, 0.5]


@pytest.mark.parametrize("arrival,k,cv", [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)])
def test_random_arrivals_have_the_rate_and_dispersion(arrival, k, cv):
    t = take(ConstantArrivalRate(rate_per_s=50, arrival=arrival, burstiness=k).arrivals(np.random.default_rng(7)), 20000)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)  # CV of gamma(k) = 1/sqrt(k)


def test_same_seed_same_schedule_and_different_seed_differs():
    s = ConstantArrivalRate(rate_per_s=10)
    a = take(s.arrivals(np.random.default_rng(3)), 50)
    b = take(s.arrivals(np.random.default_rng(3)), 50)
    c = take(s.arrivals(np.random.default_rng(4)), 50)
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


def test_linear_ramp_closed_form():
    # rate 1 -> 9 over 10 s: Λ(t) = t + 0.4 t²; the n-th send solves Λ(t) = n.
    s = RampingArrivalRate(strategy="linear", start_rate_per_s=1, end_rate_per_s=9, ramp_s=10, arrival="constant")
    t = take(s.arrivals(np.random.default_rng(0)), 60)
    expected = [(-1 + math.sqrt(1 + 1.6 * n)) / 0.8 for n in range(50)]
    assert t[:50] == pytest.approx(expected)
    # Λ(10) = 50 requests during the ramp; afterwards the rate holds at 9/s.
    assert t[51] - t[50] == pytest.approx(1 / 9)


def test_exponential_ramp_closed_form():
    # rate 1 * 8^(t/3): Λ(t) = (3/ln 8)(8^(t/3) - 1)
    s = RampingArrivalRate(strategy="exponential", start_rate_per_s=1, end_rate_per_s=8, ramp_s=3, arrival="constant")
    t = take(s.arrivals(np.random.default_rng(0)), 10)
    g = math.log(8) / 3
    assert t == pytest.approx([math.log1p(n * g) / g for n in range(10)])
    assert s.rate_at(1.5) == pytest.approx(math.sqrt(8))


def test_ramp_length_for_a_request_count():
    assert RampingArrivalRate.ramp_for_requests("linear", 2, 8, 100) == pytest.approx(20.0)
    T = RampingArrivalRate.ramp_for_requests("exponential", 1, 8, 100)
    s = RampingArrivalRate(strategy="exponential", start_rate_per_s=1, end_rate_per_s=8, ramp_s=T, arrival="constant")
    assert s.inverse_intensity(100) == pytest.approx(T)


def test_exponential_ramp_from_zero_is_rejected():
    with pytest.raises(ValueError, match="exponential"):
        RampingArrivalRate(strategy="exponential", start_rate_per_s=0, end_rate_per_s=5, ramp_s=1)


def test_weibull_arrivals_have_the_rate_and_the_dispersion_of_their_shape():
    k = 0.5
    t = take(ConstantArrivalRate(rate_per_s=20, arrival="weibull", burstiness=k).arrivals(np.random.default_rng(5)), 40000)
    gaps = np.diff(t)
    cv = math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1)  # 2.24 for k = 0.5
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_arrival_names_come_from_the_registry():
    from infermeter.errors import ConfigError
    from infermeter.load.shapes import ARRIVALS, parse_shape
    from infermeter.measure import RunConfig, build_shape

    assert set(ARRIVALS) >= {"constant", "poisson", "gamma", "weibull"}
    shape = build_shape(RunConfig(rate=3, arrival="weibull", burstiness=0.7, requests=5))
    assert shape.describe() == "open loop, 3 req/s (weibull, k=0.7)"
    assert parse_shape(shape.model_dump()) == shape  # round-trips through run.json
    with pytest.raises(ValueError, match="use one of constant, poisson, gamma, weibull"):
        RunConfig(rate=3, arrival="pareto", requests=5)
    with pytest.raises(ConfigError, match="--burstiness 2 needs --arrival gamma or weibull"):
        build_shape(RunConfig(rate=3, burstiness=2, requests=5))


@pytest.mark.parametrize("arrival,k", [("poisson", 1.0), ("gamma", 0.5), ("weibull", 0.7), ("constant", 1.0)])
def test_arrival_points_are_the_running_sum_of_the_gaps_and_blocks_give_the_same_floats(arrival, k):
    from infermeter.load.shapes.arrivals import ARRIVALS, operational_times

    rng = np.random.default_rng(2)
    gaps = np.concatenate([ARRIVALS[arrival](rng, 1024, k) for _ in range(3)])
    u, expected = 0.0, []
    for g in gaps[:3000]:  # u_{n+1} = u_n + g_n, one addition after the other (across draw blocks)
        expected.append(u)
        u += float(g)
    assert take(operational_times(arrival, k, np.random.default_rng(2)), 3000).tolist() == expected
    shape = ConstantArrivalRate(rate_per_s=48, arrival=arrival, burstiness=k)
    blocks = shape.arrival_blocks(np.random.default_rng(2))
    assert np.concatenate([next(blocks) for _ in range(3)])[:3000].tolist() == \
        take(shape.arrivals(np.random.default_rng(2)), 3000).tolist() == [x / 48 for x in expected]


def test_a_shape_without_blocks_of_its_own_gives_its_arrivals_in_arrays():
    ramp = RampingArrivalRate(start_rate_per_s=1, end_rate_per_s=20, ramp_s=100)
    blocks = ramp.arrival_blocks(np.random.default_rng(1))
    assert np.concatenate([next(blocks) for _ in range(2)]).tolist() == \
        take(ramp.arrivals(np.random.default_rng(1)), 2048).tolist()
    assert ramp.offsets_only and ConstantArrivalRate(rate_per_s=1).offsets_only
    assert not TraceReplay().offsets_only  # its times come from the specs
