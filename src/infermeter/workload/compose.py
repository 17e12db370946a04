"""Distinct prompt texts on demand: request ``i`` gets an opening no earlier request had.

Prefix caches reuse identical *openings*, so a profile that promises "no reuse"
must not repeat one. :class:`TextMaker` maps the request index through an
affine bijection onto (start, unit) pairs of a :class:`TextPool`: a short head
(``HEAD_TOKENS``) cut at one place, the rest cut at another. Only starts whose head
text is unique take part (a start whose first word is longer than the head falls back
to a one-token word, and a head may end in filler words), and only units from which
whole units make exactly ``OPENING_TOKENS - HEAD_TOKENS`` tokens, with that text unique
(a corpus repeats words, lines and passages; whole units: the same text however long
the prompt, no filler among them). On an additive pool, two of the first
``heads x tails`` texts (millions for the shipped corpora) never share their first
``OPENING_TOKENS`` tokens, a KV-cache block of vLLM's default size::

    maker = TextMaker(pool, np.random.default_rng(7))
    a = maker.first(0, 200)      # begins at a word/line start; exactly 200 tokens
    b = maker.mid(0, 50)         # begins with " word"; append it to any text
    maker.whole(3, 4096)         # one contiguous cut (code contexts), distinct start per i

So accidental prefix-cache hits stay out of "no reuse" profiles (texts of at least
``OPENING_TOKENS`` tokens; shorter ones fill no block).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from infermeter.workload.pool import TextPool

HEAD_TOKENS = 4
OPENING_TOKENS = 16  # the opening no two ``first`` texts share: vLLM's default block size


def _distinct(n: int, text_of: Callable[[int], str]) -> list[int]:
    """The indices below ``n`` whose text is the first of its kind."""
    seen: set[str] = set()
    keep: list[int] = []
    for j in range(n):
        t = text_of(j)
        if t not in seen:
            seen.add(t)
            keep.append(j)
    return keep


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


def openings(pool: TextPool) -> tuple[list[int], list[int]]:
    """The pool's start points with a head of their own and units with a continuation of their own (module
    docstring): computed once per pool, when it is built (``BuildContext.pool``), not at a run's first send."""
    cached = pool.openings
    if cached is None:
        heads = _distinct(pool.num_starts, lambda j: pool.take(j, HEAD_TOKENS))
        tail = OPENING_TOKENS - HEAD_TOKENS
        runs = pool.exact_runs(tail) or list(range(pool.num_units))  # (a corpus without such runs: none here)
        tails = [runs[k] for k in _distinct(len(runs), lambda k: pool.take_mid(runs[k], tail))]
        cached = pool.openings = (heads, tails)
    return cached


class TextMaker:
    """Prompt texts whose openings do not repeat, cut from one pool."""

    def __init__(self, pool: TextPool, rng: np.random.Generator) -> None:
        self.pool = pool
        s, u = pool.num_starts, pool.num_units
        self._s, self._u = s, u
        # openings: starts with a head of their own, units with a continuation of their own (module docstring)
        self._heads, self._tails = openings(pool)
        self._first = _Bijection(len(self._heads) * len(self._tails), rng)
        self._mid = _Bijection(u * u, rng)
        self._whole = _Bijection(s, rng)

    def first(self, i: int, n: int) -> str:
        """``n`` tokens that open a prompt or message (begins at a word or line start); no two of the first
        ``heads x tails`` share their first ``OPENING_TOKENS`` (module docstring)."""
        k = self._first(i)
        heads = self._heads
        head = min(n, HEAD_TOKENS)
        text = self.pool.take(heads[k % len(heads)], head)
        if n > head:
            text += self.pool.take_mid(self._tails[k // len(heads)], n - head)
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
