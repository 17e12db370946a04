"""``constant-arrival-rate``: an open loop at a fixed mean rate.

The arrival process (``--arrival``, :mod:`infermeter.load.shapes.arrivals`) gives unit-mean
points ``u_n``; the rate maps them to wall time, ``t_n = u_n / rate``::

    >>> import numpy as np
    >>> offsets = ConstantArrivalRate(rate_per_s=4.0, arrival="constant").arrivals(np.random.default_rng(0))
    >>> [round(next(offsets), 3) for _ in range(3)]
    [0.0, 0.25, 0.5]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from infermeter.load.shapes.arrivals import SHAPED, check_arrival, operational_times
from infermeter.load.shapes.base import BaseShape


class ConstantArrivalRate(BaseShape):
    """Open loop at a fixed mean rate."""

    kind: Literal["constant-arrival-rate"] = "constant-arrival-rate"
    rate_per_s: float = Field(gt=0, description="mean requests per second")
    arrival: str = "poisson"
    burstiness: float = Field(1.0, gt=0, description="shape k of the arrival process (gamma, weibull)")

    @field_validator("arrival")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_arrival(v)

    @property
    def mean_rate(self) -> float:
        return self.rate_per_s

    def arrivals(self, rng: np.random.Generator) -> Iterator[float]:
        for u in operational_times(self.arrival, self.burstiness, rng):
            yield u / self.rate_per_s

    def rate_at(self, t: float) -> float:
        return self.rate_per_s

    def describe(self) -> str:
        extra = f", k={self.burstiness:g}" if self.arrival in SHAPED else ""
        return f"open loop, {self.rate_per_s:g} req/s ({self.arrival}{extra})"
