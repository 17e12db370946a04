"""Load shapes: frozen configs that yield intended send times.

An open-loop shape turns an arrival process into absolute send offsets (seconds
from the run start); the runner sleeps until ``t0 + offset`` and never looks at
the shape again. A closed-loop shape is a fixed number of streams (k6's
"VUs"), each sending its next request as soon as the previous one ends::

    >>> import numpy as np
    >>> shape = ConstantArrivalRate(rate_per_s=4.0, arrival="constant")
    >>> offsets = shape.arrivals(np.random.default_rng(0))
    >>> [round(next(offsets), 3) for _ in range(3)]
    [0.0, 0.25, 0.5]

How offsets are made: the arrival *process* yields points ``u_n`` in
"operational time" with unit mean spacing (constant: ``u_n = n``; poisson:
cumulative Exp(1) gaps; gamma(k): cumulative Gamma(k, 1/k) gaps, k = burstiness,
k < 1 burstier than Poisson). The *rate* maps them to wall time by inverting the
cumulative intensity Λ(t) = ∫ rate: ``t_n = Λ⁻¹(u_n)``. Constant rate R:
``t = u/R``; linear ramp A→B over T: ``Λ(t) = A t + (B-A) t²/(2T)``;
exponential ramp: ``rate(t) = A (B/A)^(t/T)``. Past T a ramp holds rate B.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

ArrivalKind = Literal["constant", "poisson", "gamma"]

_BATCH = 1024


def operational_times(arrival: ArrivalKind, burstiness: float, rng: np.random.Generator) -> Iterator[float]:
    """Unit-mean arrival points u_0 = 0, u_1, ...; see the module docstring."""
    u = 0.0
    n = 0
    while True:
        if arrival == "constant":
            gaps = np.ones(_BATCH)
        elif arrival == "poisson":
            gaps = rng.exponential(1.0, _BATCH)
        else:
            gaps = rng.gamma(burstiness, 1.0 / burstiness, _BATCH)
        for g in gaps:
            if n == 0:
                yield 0.0
            else:
                yield u
            u += float(g)
            n += 1


class _Shape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConstantArrivalRate(_Shape):
    """Open loop at a fixed mean rate."""

    kind: Literal["constant-arrival-rate"] = "constant-arrival-rate"
    rate_per_s: float = Field(gt=0, description="mean requests per second")
    arrival: ArrivalKind = "poisson"
    burstiness: float = Field(1.0, gt=0, description="gamma shape k (gamma arrivals only)")

    def arrivals(self, rng: np.random.Generator) -> Iterator[float]:
        for u in operational_times(self.arrival, self.burstiness, rng):
            yield u / self.rate_per_s

    def rate_at(self, t: float) -> float:
        return self.rate_per_s

    def describe(self) -> str:
        extra = f", k={self.burstiness:g}" if self.arrival == "gamma" else ""
        return f"open loop, {self.rate_per_s:g} req/s ({self.arrival}{extra})"


class RampingArrivalRate(_Shape):
    """Open loop whose rate moves from ``start_rate_per_s`` to ``end_rate_per_s`` over ``ramp_s``.

    Flag names follow vLLM's bench (``--ramp-up-strategy``, ``--ramp-up-start-rps``,
    ``--ramp-up-end-rps``) but the ramp runs over time, not request index.
    """

    kind: Literal["ramping-arrival-rate"] = "ramping-arrival-rate"
    strategy: Literal["linear", "exponential"] = "linear"
    start_rate_per_s: float = Field(ge=0)
    end_rate_per_s: float = Field(gt=0)
    ramp_s: float = Field(gt=0, description="seconds over which the rate ramps")
    arrival: ArrivalKind = "poisson"
    burstiness: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "RampingArrivalRate":
        if self.strategy == "exponential" and self.start_rate_per_s <= 0:
            raise ValueError("an exponential ramp needs --ramp-up-start-rps > 0")
        return self

    def rate_at(self, t: float) -> float:
        a, b, T = self.start_rate_per_s, self.end_rate_per_s, self.ramp_s
        if t >= T:
            return b
        if self.strategy == "linear":
            return a + (b - a) * t / T
        return a * (b / a) ** (t / T)

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


class ConstantConcurrency(_Shape):
    """Closed loop: ``concurrency`` streams, each sends when its previous request ends."""

    kind: Literal["constant-vus"] = "constant-vus"
    concurrency: int = Field(gt=0)

    def describe(self) -> str:
        return f"closed loop, concurrency {self.concurrency}"


class TraceReplay(_Shape):
    """Open loop at the trace's own timestamps, scaled: offset = arrival_s * time_scale."""

    kind: Literal["replay"] = "replay"
    time_scale: float = Field(1.0, gt=0)

    def describe(self) -> str:
        return f"trace replay at time scale {self.time_scale:g}"


Shape = ConstantArrivalRate | RampingArrivalRate | ConstantConcurrency | TraceReplay
