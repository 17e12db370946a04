"""``ramping-arrival-rate``: an open loop whose rate moves from a start to an end rate.

The rate maps the arrival process's unit-mean points to wall time by inverting the cumulative
intensity Λ(t) = ∫ rate: ``t_n = Λ⁻¹(u_n)``. Linear ramp A→B over T: ``Λ(t) = A t + (B-A)
t²/(2T)``; exponential ramp: ``rate(t) = A (B/A)^(t/T)``. Past T the rate holds at B. Flag
names follow vLLM's bench (``--ramp-up-strategy``, ``--ramp-up-start-rps``,
``--ramp-up-end-rps``), but the ramp runs over time, not request index::

    >>> import numpy as np
    >>> s = RampingArrivalRate(start_rate_per_s=1, end_rate_per_s=9, ramp_s=10, arrival="constant")
    >>> round(s.inverse_intensity(50), 6), s.peak_rate, s.mean_rate
    (10.0, 9.0, None)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from infermeter.load.shapes.arrivals import check_arrival, operational_times
from infermeter.load.shapes.base import BaseShape


class RampingArrivalRate(BaseShape):
    """Open loop whose rate moves from ``start_rate_per_s`` to ``end_rate_per_s`` over ``ramp_s``."""

    kind: Literal["ramping-arrival-rate"] = "ramping-arrival-rate"
    strategy: Literal["linear", "exponential"] = "linear"
    start_rate_per_s: float = Field(ge=0)
    end_rate_per_s: float = Field(gt=0)
    ramp_s: float = Field(gt=0, description="seconds over which the rate ramps")
    arrival: str = "poisson"
    burstiness: float = Field(1.0, gt=0)

    @field_validator("arrival")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_arrival(v)

    @model_validator(mode="after")
    def _check(self) -> RampingArrivalRate:
        if self.strategy == "exponential" and self.start_rate_per_s <= 0:
            raise ValueError("an exponential ramp needs --ramp-up-start-rps > 0")
        return self

    @property
    def peak_rate(self) -> float:
        return max(self.start_rate_per_s, self.end_rate_per_s)

    def rate_at(self, t: float) -> float:
        a, b, T = self.start_rate_per_s, self.end_rate_per_s, self.ramp_s
        if t >= T:
            return b
        if self.strategy == "linear":
            return a + (b - a) * t / T
        return float(a * (b / a) ** (t / T))

    def _ramp_total(self) -> float:
        """Λ(T): expected requests during the ramp."""
        a, b, T = self.start_rate_per_s, self.end_rate_per_s, self.ramp_s
        if self.strategy == "linear":
            return (a + b) * T / 2
        if math.isclose(a, b):
            return a * T
        return a * T / math.log(b / a) * (b / a - 1)

    def inverse_intensity(self, u: float) -> float:
        """t such that Λ(t) = u."""
        a, b, T = self.start_rate_per_s, self.end_rate_per_s, self.ramp_s
        total = self._ramp_total()
        if u >= total:
            return T + (u - total) / b
        if self.strategy == "linear":
            if math.isclose(a, b):
                return u / a
            c = (b - a) / (2 * T)  # c t² + a t - u = 0
            return (-a + math.sqrt(a * a + 4 * c * u)) / (2 * c)
        if math.isclose(a, b):
            return u / a
        g = math.log(b / a) / T
        return math.log1p(u * g / a) / g

    def arrivals(self, rng: np.random.Generator) -> Iterator[float]:
        for u in operational_times(self.arrival, self.burstiness, rng):
            yield self.inverse_intensity(u)

    def expected_requests(self, duration_s: float | None) -> float | None:
        if not duration_s:
            return None
        if duration_s <= self.ramp_s:  # an estimate: the ramp's mean rate over the time run
            return self._ramp_total() * duration_s / self.ramp_s
        return self._ramp_total() + (duration_s - self.ramp_s) * self.end_rate_per_s

    @staticmethod
    def ramp_for_requests(strategy: str, a: float, b: float, n: int) -> float:
        """Ramp length T whose expected request count is n (used when only --requests is given)."""
        if strategy == "linear":
            return 2.0 * n / (a + b)
        if math.isclose(a, b):
            return n / a
        return n * math.log(b / a) / (b - a)

    def describe(self) -> str:
        return (
            f"open loop, {self.strategy} ramp {self.start_rate_per_s:g}→{self.end_rate_per_s:g} req/s "
            f"over {self.ramp_s:g} s ({self.arrival})"
        )
