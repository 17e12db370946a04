"""A level over time (an engine's waiting queue), integrated into time buckets with bounded memory.

The engine calls :meth:`LevelSeries.set` whenever the level changes; the series keeps the
integral of the level per bucket of ``width`` seconds (the width doubles, merging pairs of
buckets, so that at most ``max_buckets`` exist). :meth:`mean` gives the time-weighted mean
over any interval (buckets partly inside count in proportion to their overlap), so the
start and end of a run can be compared once the run's span is known::

    >>> s = LevelSeries()
    >>> s.set(0.0, 2); s.set(10.0, 4); s.close(20.0)
    >>> s.mean(0.0, 10.0), s.mean(10.0, 20.0), s.mean(5.0, 15.0)
    (2.0, 4.0, 3.0)

Series of several engines are summed with :func:`sum_series` (coarsened to a common width,
added in the given order: the same engines in the same order give the same floats).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_BUCKETS = 1024


class LevelSeries:
    """Integral of a piecewise-constant level, per time bucket (see the module docstring)."""

    __slots__ = ("width", "sums", "t", "level", "max_buckets", "edge", "i")

    def __init__(self, width: float = 1.0 / 16, max_buckets: int = MAX_BUCKETS) -> None:
        if not (width > 0 and math.frexp(width)[0] == 0.5):
            raise ValueError(f"width {width!r}: a power of two is needed (bucket edges are then exact)")
        self.width = width
        self.sums: list[float] = []
        self.t = 0.0
        self.level = 0
        self.max_buckets = max_buckets
        # the bucket ``i`` of ``t`` while it is in ``sums``, and where it ends (else -inf: none known). With a
        # power-of-two width, ``t' < edge`` is exactly ``int(t' / width) == i``
        self.edge = -math.inf
        self.i = 0

    def set(self, t: float, level: int) -> None:
        """The level becomes ``level`` at time ``t`` (times never decrease)."""
        t0 = self.t
        if t > t0:
            if t < self.edge:  # within t0's bucket (the usual case)
                c = self.level
                if c:
                    self.sums[self.i] += c * (t - t0)
            else:
                self._move(t0, t, self.level)
            self.t = t
        self.level = level

    def _move(self, t0: float, t: float, c: int) -> None:
        """``set``'s other case: from ``t0`` to ``t`` in a later bucket (or one not in ``sums`` yet)."""
        if c:
            w = self.width
            i = int(t0 / w)
            if i == int(t / w) and i < len(self.sums):
                self.sums[i] += c * (t - t0)
            else:
                self._add(t0, t, c)
        w = self.width
        i = int(t / w)
        self.i = i
        self.edge = (i + 1) * w if i < len(self.sums) else -math.inf

    def close(self, t: float) -> None:
        """Integrate the current level up to ``t`` (the end of the run)."""
        self.set(t, self.level)

    def _add(self, a: float, b: float, c: int) -> None:
        w = self.width
        j = int(b / w)
        while j >= self.max_buckets:
            self._coarsen()
            w = self.width
            j = int(b / w)
        i = int(a / w)
        sums = self.sums
        if len(sums) <= j:
            sums.extend([0.0] * (j + 1 - len(sums)))
        if i == j:
            sums[i] += c * (b - a)
            return
        sums[i] += c * ((i + 1) * w - a)
        for k in range(i + 1, j):
            sums[k] += c * w
        sums[j] += c * (b - j * w)

    def _coarsen(self) -> None:
        s = self.sums
        self.sums = [s[k] + (s[k + 1] if k + 1 < len(s) else 0.0) for k in range(0, len(s), 2)]
        self.width *= 2

    def integral(self, lo: float, hi: float) -> float:
        return _integral(self.sums, self.width, lo, hi)

    def mean(self, lo: float, hi: float) -> float | None:
        """Time-weighted mean level over ``[lo, hi]`` (None for an empty interval)."""
        if not hi > lo:
            return None
        return self.integral(lo, hi) / (hi - lo)

    def state(self) -> tuple[float, list[float]]:
        """(width, sums): what :func:`sum_series` needs (picklable)."""
        return self.width, list(self.sums)


def _integral(sums: Sequence[float], w: float, lo: float, hi: float) -> float:
    if not sums or hi <= lo:
        return 0.0
    i0, i1 = max(0, int(math.floor(lo / w))), min(len(sums) - 1, int(math.floor(hi / w)))
    total = 0.0
    for k in range(i0, i1 + 1):
        a, b = max(lo, k * w), min(hi, (k + 1) * w)
        if b > a:
            total += sums[k] * (b - a) / w
    return total


def sum_series(states: Sequence[tuple[float, Sequence[float]]]) -> tuple[float, list[float]]:
    """The sum of several series' ``state()``, at the coarsest width among them (in the given order)."""
    width = max((w for w, _ in states), default=1.0 / 16)
    total: list[float] = []
    for w, sums in states:
        factor = int(round(width / w))
        for k, v in enumerate(sums):
            j = k // factor
            if j >= len(total):
                total.extend([0.0] * (j + 1 - len(total)))
            total[j] += v
    return width, total


def series_mean(state: tuple[float, Sequence[float]], lo: float, hi: float) -> float | None:
    """Time-weighted mean over ``[lo, hi]`` of a (summed) series state."""
    if not hi > lo:
        return None
    width, sums = state
    return _integral(sums, width, lo, hi) / (hi - lo)
