"""Token-length distributions: ``mean[,stdev[,min,max]]``, a clamped, rounded normal.

The one parser for ``--input-tokens`` / ``--output-tokens`` and the per-profile
length fields::

    >>> LengthDist.parse("800,100,50,800", flag="--output-tokens")
    LengthDist(mean=800, stdev=100.0, min=50, max=800)
    >>> LengthDist.parse("200")                      # fixed length
    LengthDist(mean=200, stdev=0.0, min=200, max=200)
    >>> LengthDist.parse("1000,100").min, LengthDist.parse("1000,100").max   # mean -/+ 3 stdev
    (700, 1300)

A draw is ``round(Normal(mean, stdev))`` clamped to ``[min, max]`` (the
convention of HF inference-benchmarker, whose "variance" is a standard
deviation). :class:`LengthSampler` draws in blocks of 1024 from a numpy
Generator, so a draw costs well under a microsecond and the sequence depends
only on the seed. No length may exceed ``TOKENS_MAX`` (no model's context is
longer; a larger count could not be sent, recorded or pooled).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from infermeter.errors import ConfigError

_BLOCK = 1024
TOKENS_MAX = 10_000_000  # the largest token count a length (flag or request file) may ask for


@dataclass(frozen=True, slots=True)
class LengthDist:
    """Normal(mean, stdev) rounded to an integer and clamped to [min, max]; all in tokens."""

    mean: int
    stdev: float = 0.0
    min: int = 0
    max: int = 0

    def __post_init__(self) -> None:
        if self.min == 0 and self.max == 0:
            lo = max(1, math.floor(self.mean - 3 * self.stdev))
            object.__setattr__(self, "min", lo)
            object.__setattr__(self, "max", max(lo, math.ceil(self.mean + 3 * self.stdev)))

    @classmethod
    def parse(cls, text: str | int | LengthDist, *, flag: str = "length") -> LengthDist:
        """Parse ``mean[,stdev[,min,max]]``; ConfigError naming ``flag`` when malformed."""
        if isinstance(text, LengthDist):
            return text
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str):
            raise ConfigError(f"{flag}: expected 'mean[,stdev[,min,max]]', got {text!r}")
        parts = [p.strip() for p in text.split(",")]
        if len(parts) not in (1, 2, 4) or any(p == "" for p in parts):
            raise ConfigError(f"{flag}: expected 'mean[,stdev[,min,max]]' (1, 2 or 4 numbers), got {text!r}")
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            raise ConfigError(f"{flag}: expected numbers in 'mean[,stdev[,min,max]]', got {text!r}") from None
        if any(not math.isfinite(n) for n in nums):
            raise ConfigError(f"{flag}: numbers must be finite, got {text!r}")
        mean = nums[0]
        stdev = nums[1] if len(nums) > 1 else 0.0
        if mean < 1 or mean != int(mean):
            raise ConfigError(f"{flag}: mean must be a whole number of tokens >= 1, got {parts[0]!r}")
        if stdev < 0:
            raise ConfigError(f"{flag}: stdev must be >= 0, got {parts[1]!r}")
        if len(nums) == 4:
            lo, hi = nums[2], nums[3]
            if lo != int(lo) or hi != int(hi) or lo < 1:
                raise ConfigError(f"{flag}: min and max must be whole numbers >= 1, got {text!r}")
            if lo > hi:
                raise ConfigError(f"{flag}: min {int(lo)} is above max {int(hi)} in {text!r}")
            if not lo <= mean <= hi:
                raise ConfigError(f"{flag}: mean {int(mean)} is outside [min, max] = [{int(lo)}, {int(hi)}]")
            d = cls(int(mean), stdev, int(lo), int(hi))
        elif stdev == 0:
            d = cls(int(mean), 0.0, int(mean), int(mean))
        else:
            d = cls(int(mean), stdev)
        if d.max > TOKENS_MAX:
            raise ConfigError(f"{flag}: lengths up to {d.max:,} tokens are above the {TOKENS_MAX:,} allowed, "
                              f"in {text!r}")
        return d

    def label(self) -> str:
        """The flag syntax that gives back this distribution."""
        if self.stdev == 0 and self.min == self.max == self.mean:
            return str(self.mean)
        return f"{self.mean},{self.stdev:g},{self.min},{self.max}"

    def as_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "stdev": self.stdev, "min": self.min, "max": self.max}


class LengthSampler:
    """Draws lengths from a :class:`LengthDist` with a seeded Generator, one block at a time."""

    __slots__ = ("dist", "_rng", "_buf", "_pos")

    def __init__(self, dist: LengthDist, rng: np.random.Generator) -> None:
        self.dist = dist
        self._rng = rng
        self._buf: list[int] = []
        self._pos = 0

    def _refill(self) -> None:
        d = self.dist
        if d.stdev == 0 or d.min == d.max:
            self._buf = [min(max(d.mean, d.min), d.max)] * _BLOCK
        else:
            self._buf = self._block().tolist()
        self._pos = 0

    def _block(self) -> np.ndarray:
        """The next ``_BLOCK`` draws (int64)."""
        d = self.dist
        if d.stdev == 0 or d.min == d.max:
            return np.full(_BLOCK, min(max(d.mean, d.min), d.max), dtype=np.int64)
        draws = np.rint(self._rng.normal(d.mean, d.stdev, _BLOCK))
        return np.clip(draws, d.min, d.max).astype(np.int64)

    def blocks(self) -> Iterator[np.ndarray]:
        """The draws :meth:`draw` gives, from here on, as int64 arrays (a sampler is either drawn from or
        read in blocks: the first block starts at a block boundary)."""
        if self._pos:
            raise RuntimeError("LengthSampler.blocks() after draw(): read a fresh sampler")
        while True:
            yield self._block()

    def draw(self) -> int:
        if self._pos >= len(self._buf):
            self._refill()
        v = self._buf[self._pos]
        self._pos += 1
        return v
