"""``constant-arrival-rate``: an open loop at a fixed mean rate.

The arrival process (``--arrival``, :mod:`infermeter.load.shapes.arrivals`) gives unit-mean
points ``u_n``; the rate maps them to wall time, ``t_n = u_n / rate``::

    >>> import numpy as np
    >>> offsets = ConstantArrivalRate(rate_per_s=4.0, arrival="constant").arrivals(np.random.default_rng(0))
    >>> [round(next(offsets), 3) for _ in range(3)]
    [0.0, 0.25, 0.5]

``exact_over: N`` rescales the schedule so that ``N`` arrivals (the first ``N`` after
``exact_after``, e.g. after the warmup requests) span exactly ``(N - 1) / rate`` seconds: a step of ``N`` requests then *realizes* its label (a short Poisson schedule otherwise
differs from its mean rate by about ``1/sqrt(N)``, and the same seed gives every step the same
error). For Poisson arrivals this is the Poisson process conditioned on ``N - 1`` gaps filling
that span (normalized exponential gaps are uniform order statistics), so the arrivals stay
Poisson-like; arrivals after the ``N``-th continue at the same scale. ``None`` (the default)
leaves the schedule as drawn::

    >>> s = ConstantArrivalRate(rate_per_s=2.0, exact_over=100)
    >>> t = list(itertools.islice(s.arrivals(np.random.default_rng(0)), 100))
    >>> round(99 / (t[-1] - t[0]), 6)
    2.0
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from infermeter.load.shapes.arrivals import SHAPED, check_arrival, operational_blocks, operational_times
from infermeter.load.shapes.base import BaseShape
from infermeter.numbers import rate


class ConstantArrivalRate(BaseShape):
    """Open loop at a fixed mean rate."""

    kind: Literal["constant-arrival-rate"] = "constant-arrival-rate"
    rate_per_s: float = Field(gt=0, description="mean requests per second")
    arrival: str = "poisson"
    burstiness: float = Field(1.0, gt=0, description="shape k of the arrival process (gamma, weibull)")
    exact_over: int | None = Field(None, ge=2, description="rescale arrivals so N of them realize the mean rate "
                                   "exactly (N = the step's measured requests)")
    exact_after: int = Field(0, ge=0, description="with exact_over: the N arrivals start after this many "
                             "(the warmup requests)")

    @field_validator("arrival")
    @classmethod
    def _known(cls, v: str) -> str:
        return check_arrival(v)

    @property
    def mean_rate(self) -> float:
        return self.rate_per_s

    def arrivals(self, rng: np.random.Generator) -> Iterator[float]:
        n = self.exact_over
        if n is None:
            for block in self.arrival_blocks(rng):
                yield from block.tolist()
            return
        points = operational_times(self.arrival, self.burstiness, rng)
        a = self.exact_after
        head = np.fromiter(itertools.islice(points, a + n), dtype=float, count=a + n)
        span = float(head[-1] - head[a])
        scale = (n - 1) / span if span > 0 else 1.0  # unit mean over points a .. a+n-1
        for u in head:
            yield float(u) * scale / self.rate_per_s
        for u in points:  # later points keep their gaps, at the same scale
            yield u * scale / self.rate_per_s

    def arrival_blocks(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        if self.exact_over is not None:
            yield from super().arrival_blocks(rng)
            return
        for block in operational_blocks(self.arrival, self.burstiness, rng):
            yield block / self.rate_per_s  # t_n = u_n / rate, as one float division each

    def rate_at(self, t: float) -> float:
        return self.rate_per_s

    def describe(self) -> str:
        extra = f", k={self.burstiness:g}" if self.arrival in SHAPED else ""
        if self.exact_over is not None:
            extra += f", exact mean over {self.exact_over} requests" + (
                f" after {self.exact_after}" if self.exact_after else "")
        return f"open loop, {rate(self.rate_per_s)} ({self.arrival}{extra})"  # 8.426, never 8.42637
