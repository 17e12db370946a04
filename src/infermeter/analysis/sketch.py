"""Bounded-memory distributions for huge simulated runs: exact moments, log-bucket percentiles.

A :class:`LogHistogram` takes numpy batches and answers with the same
:class:`~infermeter.analysis.results.Distribution` as an exact one (count, mean, stdev, min,
max, p50 ... p999; a percentile below its minimum sample count is None). Count, mean, stdev, min and max are exact; percentiles come from buckets
whose edges grow by 1% (``GROWTH``), reported at the bucket's geometric middle, so
each is within 0.5% of the exact value (values at or below 1 ns count as zero)::

    >>> h = LogHistogram()
    >>> h.add(np.array([0.010, 0.020, 0.030, 0.040]))
    >>> d = h.distribution(1000.0)
    >>> d.count, d.mean, d.max
    (4, 25.0, 40.0)
    >>> abs(d.p50 - 25.0) / 25.0 < 0.005
    True

Weights let one sample stand for many (a request's ``n - 1`` inter-token gaps). Memory
is a few thousand floats per histogram, whatever the number of samples.
"""

from __future__ import annotations

import math

import numpy as np

from infermeter.analysis.results import MIN_SAMPLES, Distribution

GROWTH = 1.01
_LO = 1e-9  # seconds (or any unit): smaller values are zero
_NB = int(math.ceil(math.log(1e9 / _LO) / math.log(GROWTH))) + 2
_PCTS = (50.0, 90.0, 95.0, 99.0, 99.9)


class LogHistogram:
    """Streaming distribution of non-negative values; see the module docstring."""

    __slots__ = ("counts", "zeros", "n", "s1", "s2", "lo", "hi")

    def __init__(self) -> None:
        self.counts = np.zeros(_NB, dtype=np.float64)
        self.zeros = 0.0
        self.n = 0.0
        self.s1 = 0.0
        self.s2 = 0.0
        self.lo = math.inf
        self.hi = -math.inf

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        v = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(v)
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            ok &= w > 0
            w = w[ok]
        v = v[ok]
        if v.size == 0:
            return
        if weights is None:
            w = np.ones(v.size)
        self.n += float(w.sum())
        self.s1 += float((w * v).sum())
        self.s2 += float((w * v * v).sum())
        self.lo = min(self.lo, float(v.min()))
        self.hi = max(self.hi, float(v.max()))
        small = v <= _LO
        if small.any():
            self.zeros += float(w[small].sum())
            v, w = v[~small], w[~small]
        idx = np.floor(np.log(v / _LO) / math.log(GROWTH)).astype(np.int64)
        np.clip(idx, 0, _NB - 1, out=idx)
        self.counts += np.bincount(idx, weights=w, minlength=_NB)

    def _at_rank(self, k: float, cum: np.ndarray) -> float:
        """Representative value of the k-th smallest sample (0-based)."""
        if k < self.zeros:
            return min(max(0.0, self.lo), self.hi)
        i = min(int(np.searchsorted(cum, k, side="right")), _NB - 1)
        return float(min(max(_LO * GROWTH ** (i + 0.5), self.lo), self.hi))

    def _quantile(self, q: float, cum: np.ndarray) -> float:
        """Value at rank q*(n-1), linear between neighbouring ranks (numpy's rule)."""
        rank = q * (self.n - 1)
        lo = math.floor(rank)
        v = self._at_rank(lo, cum)
        frac = rank - lo
        if frac <= 0:
            return v
        return float(v + frac * (self._at_rank(lo + 1, cum) - v))

    def distribution(self, scale: float = 1.0) -> Distribution:
        if self.n <= 0:
            return Distribution()
        mean = self.s1 / self.n
        var = max(self.s2 / self.n - mean * mean, 0.0)
        cum = np.cumsum(self.counts) + self.zeros
        n = int(round(self.n))
        pct = {key: self._quantile(p / 100.0, cum) * scale if n >= MIN_SAMPLES[key] else None
               for key, p in zip(("p50", "p90", "p95", "p99", "p999"), _PCTS)}
        return Distribution(count=n, mean=mean * scale, stdev=math.sqrt(var) * scale, min=self.lo * scale,
                            max=self.hi * scale, **pct)
