"""A reasoning model's thinking in simulated runs: ``simulate --reasoning-tokens N|MEAN,STDEV,MIN,MAX``.

Promise: the first ``r`` generated tokens of each request are thinking, as the emulator streams
them (:mod:`infermeter.engines.emulator.reasoning`: ``max_tokens`` bounds thinking and answer
together). They are generated tokens like any other -- the twin decodes them, KV grows, each costs
its step -- so only the records change: ``reasoning_tokens = min(r, completion_tokens)``,
``answer_tokens`` the rest and ``first_answer_at`` the time of token ``r + 1`` (none when the
thinking used every token), from which the summary's ``ttfo_ms`` follows. ``r`` is drawn per
request from the length distribution with a generator seeded by ``(seed, request_id)``, so a
request thinks the same however the run is windowed::

    >>> t = Thinking.parse("300")
    >>> t.tokens(np.array([0, 1])).tolist(), t.describe()
    ([300, 300], '300')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from infermeter.workload.lengths import LengthDist

FLAG = "--reasoning-tokens"


@dataclass(frozen=True, slots=True)
class Thinking:
    """Thinking tokens per request: a length distribution and the run's seed."""

    dist: LengthDist
    seed: int = 0

    @classmethod
    def parse(cls, text: str | int | None, seed: int = 0) -> Thinking | None:
        """``None`` for no thinking (``None``, ``""`` or ``0``); ConfigError naming the flag when malformed."""
        if text is None or (isinstance(text, str) and text.strip() in ("", "0")) or text == 0:
            return None
        return cls(LengthDist.parse(text, flag=FLAG), seed)

    def describe(self) -> str:
        return self.dist.label()

    def tokens(self, rids: np.ndarray) -> np.ndarray:
        """Thinking tokens of each request id (int64)."""
        d = self.dist
        if d.stdev == 0 or d.min == d.max:
            return np.full(len(rids), min(max(d.mean, d.min), d.max), dtype=np.int64)
        z = np.array([np.random.default_rng([self.seed, 30, int(r)]).standard_normal() for r in rids])
        return np.clip(np.rint(d.mean + d.stdev * z), d.min, d.max).astype(np.int64)

    def columns(self, rids: np.ndarray, completion: np.ndarray, ok: np.ndarray,
                token_times: Sequence[Sequence[float] | None]) -> dict[str, pa.Array]:
        """``first_answer_at``, ``reasoning_tokens`` and ``answer_tokens`` of one window's rows (ok rows only)."""
        r = np.minimum(self.tokens(rids), completion)
        first = [float(tt[k]) if o and tt is not None and k < len(tt) else None
                 for k, o, tt in zip(r.tolist(), ok.tolist(), token_times)]
        mask = ~ok
        return {"first_answer_at": pa.array(first, pa.float64()),
                "reasoning_tokens": pa.array(r, pa.int64(), mask=mask),
                "answer_tokens": pa.array(completion - r, pa.int64(), mask=mask)}


__all__ = ["FLAG", "Thinking"]
