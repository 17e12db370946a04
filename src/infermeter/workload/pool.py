"""Exact-length prompt text, cut from a corpus without tokenising on the hot path.

A :class:`TextPool` tokenises its corpus once. It splits the text into *units*
at "word boundaries" -- a single space followed by a letter, after a
non-space -- where BPE, SentencePiece and WordPiece pre-tokenizers all start a
new piece, so a unit's token count does not depend on its neighbours. A prompt
of ``n`` tokens is then a slice of whole units whose counts sum to ``n``,
topped up with one-token filler words: exact by construction, found with one
bisection on a prefix sum::

    pool = TextPool(load_corpus("prose"), tokenizer, max_tokens=12_000)
    text = pool.take(start=17, n=300)        # begins at a sentence; exactly 300 tokens
    tail = pool.take_mid(unit=4_001, n=40)   # begins with " word"; appends to any take()
    tokenizer.count(text + tail) == 340      # True when pool.additive

At build time the pool checks that every unit boundary is a token boundary in
the tokenised corpus and re-tokenises sample prompts. A tokenizer that fails
(``pool.additive`` is False) still works: :meth:`exact` then measures each
prompt and corrects its length, at the cost of tokenising on the hot path.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable

import numpy as np

from infermeter.errors import ConfigError
from infermeter.workload.corpus import Corpus
from infermeter.workload.tokenizer import Tokenizer

_SEP = "\n\n"
_MAX_FIX_TRIES = 8
_MAX_FIRST_CHARS = 256  # a start point whose first piece is longer is not used
_FILL_CACHE = 64  # filler strings kept ready for remainders up to this many tokens


_BOUNDARY = re.compile(r"(?<=\S) (?=[^\W\d_])")


def _boundaries(text: str) -> np.ndarray:
    """Offsets i with text[i] == ' ', text[i+1] a letter and text[i-1] not whitespace."""
    return np.fromiter((m.start() for m in _BOUNDARY.finditer(text)), dtype=np.int64)


def _to_array(values: np.ndarray) -> array[int]:
    arr = array("q")
    arr.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return arr


class TextPool:
    """Unit boundaries and prefix sums over ``reps`` copies of a corpus, for one tokenizer."""

    def __init__(self, corpus: Corpus, tokenizer: Tokenizer, *, max_tokens: int) -> None:
        self.corpus = corpus
        self.tokenizer = tokenizer
        period = corpus.text + _SEP
        plen = len(period)
        b = _boundaries(period)
        if len(b) < 8:
            raise ConfigError(f"text source {corpus.name!r} is too short to build prompts from")
        # Tokenise one period plus the head of the next, so the unit that wraps is counted in context.
        wrap = period + period[: int(b[1]) + 1]
        starts = np.asarray(tokenizer.token_starts(wrap), dtype=np.int64)
        ext = np.concatenate([b, [b[0] + plen]])  # unit j spans [ext[j], ext[j+1])
        unit_of = np.searchsorted(ext, starts, side="right") - 1
        keep = (unit_of >= 0) & (unit_of < len(b))
        counts = np.bincount(unit_of[keep], minlength=len(b)).astype(np.int64)
        aligned = bool(np.all(np.isin(ext, starts) | np.isin(ext + 1, starts)))
        period_tokens = int(counts.sum())
        self.period_tokens = period_tokens
        reps = 2 + -(-(max_tokens + 1) // max(1, period_tokens))
        self.reps = reps
        self._text = period * reps
        self._bounds = _to_array(np.concatenate([b + r * plen for r in range(reps)] + [[reps * plen]]))
        csum = np.concatenate([[0], np.cumsum(np.tile(counts, reps))])
        self._csum = _to_array(csum)
        self._units = len(self._bounds) - 1
        # Start points (all in the first copy): first piece runs to the next boundary.
        sp = np.asarray(corpus.starts, dtype=np.int64)
        nxt = np.searchsorted(b, sp, side="right")
        ok = (nxt < len(b)) & (b[np.minimum(nxt, len(b) - 1)] - sp <= _MAX_FIRST_CHARS)
        sp, nxt = sp[ok], nxt[ok]
        if not len(sp):
            raise ConfigError(f"text source {corpus.name!r}: found no place to start a prompt")
        pieces = [period[int(s) : int(b[k])] for s, k in zip(sp, nxt, strict=True)]
        fc = tokenizer.count_batch(pieces)
        self._sp_char = [int(s) for s in sp]
        self._sp_unit = [int(k) for k in nxt]
        self._sp_fc = [int(c) for c in fc]
        self._one_token_starts = [i for i, c in enumerate(self._sp_fc) if c == 1]
        # One-token words (" word") for topping up a prompt to its exact length.
        words: list[str] = []
        seen: set[str] = set()
        for j in range(len(b) - 1):
            if counts[j] == 1:
                w = period[int(b[j]) : int(b[j + 1])]
                if w[1:].isalpha() and w not in seen:
                    seen.add(w)
                    words.append(w)
                    if len(words) == 64:
                        break
        if not words:
            raise ConfigError(f"text source {corpus.name!r}: no one-token words for tokenizer {tokenizer.name}")
        self._fill_words = words
        self.openings: tuple[list[int], list[int]] | None = None  # compose.openings(), cached here
        self._fill = [""]
        self._grow_fill(_FILL_CACHE)
        self.additive = aligned and self._verify()

    # -- sizes ---------------------------------------------------------------------------
    @property
    def num_starts(self) -> int:
        return len(self._sp_char)

    @property
    def num_units(self) -> int:
        """Units in one period of the corpus (valid ``unit`` arguments: 0 .. num_units-1)."""
        return self._units // self.reps

    def exact_runs(self, n: int) -> list[int]:
        """Units ``j`` (of one period) from which whole units add up to exactly ``n`` tokens: the first ``n``
        tokens of ``take_mid(j, m)`` are then the same text for every ``m >= n`` (no filler word among them)."""
        csum = np.frombuffer(self._csum, dtype=np.int64)
        j = np.arange(self.num_units, dtype=np.int64)
        target = csum[j] + n
        q = np.minimum(np.searchsorted(csum, target), len(csum) - 1)
        return [int(x) for x in j[csum[q] == target]]

    def _grow_fill(self, upto: int) -> None:
        words = self._fill_words
        while len(self._fill) <= upto:
            k = len(self._fill)
            self._fill.append(self._fill[-1] + words[(k - 1) % len(words)])

    def _filler(self, r: int) -> str:
        if r < len(self._fill):
            return self._fill[r]
        words = self._fill_words
        return "".join(words[k % len(words)] for k in range(r))

    # -- building text -------------------------------------------------------------------
    def take(self, start: int, n: int) -> str:
        """Text of ``n`` tokens beginning at start point ``start`` (taken modulo the count)."""
        i = start % len(self._sp_char)
        fc = self._sp_fc[i]
        if fc > n:
            ones = self._one_token_starts
            if not ones:
                raise ConfigError(f"cannot build a {n}-token prompt from text source {self.corpus.name!r}")
            i = ones[start % len(ones)]
            fc = 1
        k = self._sp_unit[i]
        return self._text[self._sp_char[i] : self._bounds[k]] + self._span(k, n - fc)

    def take_mid(self, unit: int, n: int) -> str:
        """Text of ``n`` tokens that begins with " word" at ``unit`` (modulo ``num_units``)."""
        return self._span(unit % self.num_units, n)

    def _span(self, k: int, n: int) -> str:
        if n <= 0:
            return ""
        csum = self._csum
        target = csum[k] + n
        if target > csum[-1]:
            raise ConfigError(f"a {n}-token prompt is longer than this pool holds; build it with a larger max_tokens")
        q = bisect.bisect_right(csum, target, lo=k) - 1
        r = target - csum[q]
        return self._text[self._bounds[k] : self._bounds[q]] + self._filler(r)

    def exact(self, build: Callable[[int], str], n: int) -> tuple[str, int]:
        """``(text, tokens)`` where ``text = build(m)`` and, when the pool is additive, tokens == n.

        Non-additive tokenizers: measure, steer ``m`` towards ``n``, then search
        nearby lengths and one-word endings; if ``n`` is still missed, return the
        closest text with its true count.
        """
        if self.additive:
            return build(n), n
        count = self.tokenizer.count
        seen: dict[int, tuple[str, int]] = {}

        def at(m: int) -> tuple[str, int]:
            m = max(1, m)
            if m not in seen:
                text = build(m)
                seen[m] = (text, count(text))
            return seen[m]

        m = n
        for _ in range(_MAX_FIX_TRIES):
            got = at(m)[1]
            if got == n:
                return seen[m]
            m += n - got
        for m2 in range(m - 4, m + 5):
            if at(m2)[1] == n:
                return seen[m2]
        for text, got in list(seen.values()):
            if got == n - 1:
                for word in self._fill_words[:16]:
                    if count(text + word) == n:
                        return text + word, n
        return min(seen.values(), key=lambda tg: abs(tg[1] - n))

    def mid_count(self, text: str) -> int:
        """Tokens ``text`` (which begins with " word") adds when appended to a unit boundary."""
        if len(text) < 2 or text[0] != " " or not text[1].isalpha():
            raise ValueError(f"mid text must begin with a space and a letter: {text[:20]!r}")
        anchor = self._text[self._sp_char[0] : self._bounds[self._sp_unit[0]]]
        return self.tokenizer.count(anchor + text) - self.tokenizer.count(anchor)

    @property
    def capacity(self) -> int:
        """Longest text (tokens) any start point can still supply."""
        return (self.reps - 1) * self.period_tokens

    def _verify(self) -> bool:
        tok = self.tokenizer
        rng = np.random.default_rng(12345)
        lengths = [n for n in (1, 2, 3, 5, 8, 17, 64, 129, 500, 1000) if n <= self.period_tokens]
        for n in lengths:
            start = int(rng.integers(self.num_starts))
            unit = int(rng.integers(self.num_units))
            head = self.take(start, n)
            if tok.count(head) != n:
                return False
            both = head + self.take_mid(unit, n)
            if tok.count(both) != 2 * n:
                return False
        return True

    def describe(self) -> dict[str, object]:
        return {**self.corpus.describe(), "period_tokens": self.period_tokens, "length_method": self.method}

    @property
    def method(self) -> str:
        return "additive-units" if self.additive else "measured-and-corrected"
