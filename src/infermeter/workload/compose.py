"""Distinct prompt texts on demand: request ``i`` gets an opening no earlier request had.

Prefix caches reuse identical *openings*, so a profile that promises "no reuse"
must not repeat one. :class:`TextMaker` maps the request index through an
affine bijection onto (start, unit) pairs of a :class:`TextPool`: a short head
(``HEAD_TOKENS``) cut at one place, the rest cut at another. Openings repeat only
after ``starts x units`` texts (millions for the shipped corpora)::

    maker = TextMaker(pool, np.random.default_rng(7))
    a = maker.first(0, 200)      # begins at a word/line start; exactly 200 tokens
    b = maker.mid(0, 50)         # begins with " word"; append it to any text
    maker.whole(3, 4096)         # one contiguous cut (code contexts), distinct start per i

Two texts share at most ``HEAD_TOKENS`` (4) opening tokens, below any KV-cache
block size, so accidental prefix-cache hits stay out of "no reuse" profiles.
"""

from __future__ import annotations

import math

import numpy as np

from infermeter.workload.pool import TextPool

HEAD_TOKENS = 4


class _Bijection:
    """i -> (a*i + b) mod m, a coprime with m: distinct values for the first m indices."""

    __slots__ = ("a", "b", "m")

    def __init__(self, m: int, rng: np.random.Generator) -> None:
        self.m = max(1, m)
        a = int(rng.integers(self.m // 3 + 1, self.m + 1)) if self.m > 2 else 1
        while math.gcd(a, self.m) != 1:
            a += 1
        self.a = a
        self.b = int(rng.integers(self.m))

    def __call__(self, i: int) -> int:
        return (self.a * i + self.b) % self.m


class TextMaker:
    """Prompt texts whose openings do not repeat, cut from one pool."""

    def __init__(self, pool: TextPool, rng: np.random.Generator) -> None:
        self.pool = pool
        s, u = pool.num_starts, pool.num_units
        self._s, self._u = s, u
        self._first = _Bijection(s * u, rng)
        self._mid = _Bijection(u * u, rng)
        self._whole = _Bijection(s, rng)

    def first(self, i: int, n: int) -> str:
        """``n`` tokens that open a prompt or message (begins at a word or line start)."""
        k = self._first(i)
        head = min(n, HEAD_TOKENS)
        text = self.pool.take(k % self._s, head)
        if n > head:
            text += self.pool.take_mid(k // self._s, n - head)
        return text

    def mid(self, i: int, n: int) -> str:
        """``n`` tokens that continue a text (begins with a space and a letter)."""
        k = self._mid(i)
        head = min(n, HEAD_TOKENS)
        text = self.pool.take_mid(k % self._u, head)
        if n > head:
            text += self.pool.take_mid(k // self._u, n - head)
        return text

    def whole(self, i: int, n: int) -> str:
        """``n`` contiguous tokens from start point number ``bijection(i)`` (distinct for i < starts)."""
        return self.pool.take(self._whole(i), n)
