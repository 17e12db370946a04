"""Deterministic fault injection for the emulated server.

``FaultPlan.parse("429=0.05,500=0.02,cut=0.01")`` gives each request, in order
of arrival, at most one fault drawn from a seeded generator, so the same seed
and request order give the same faults. Kinds and what the client should see:

    429, 500, 503   an HTTP error with a JSON body      -> http_429 / http_5xx
    cut             stream ends after ``cut_after`` tokens, no finish -> stream_cut
    stall           headers, then silence for ``stall_s`` -> first_token_timeout
    malformed       an SSE event that is not JSON       -> malformed_response
    slow_first_byte headers only after ``slow_s``        (latency, not an error)
    reset           connection closed before any response -> connect_error
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

from infermeter.errors import ConfigError

KINDS = ("429", "500", "503", "cut", "stall", "malformed", "slow_first_byte", "reset")


class FaultKnobs(TypedDict, total=False):
    """The FaultPlan fields besides the rates and the seed (``parse`` passes them on)."""

    cut_after: int
    stall_s: float
    slow_s: float


@dataclass
class FaultPlan:
    rates: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    cut_after: int = 3
    stall_s: float = 30.0
    slow_s: float = 1.0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        total = sum(self.rates.values())
        if total > 1.0 + 1e-9:
            raise ConfigError(f"--faults: rates add up to {total:g} > 1")

    @classmethod
    def parse(cls, text: str | None, seed: int = 0, **kw: Unpack[FaultKnobs]) -> "FaultPlan":
        rates: dict[str, float] = {}
        for part in (p.strip() for p in (text or "").split(",") if p.strip()):
            kind, sep, val = part.partition("=")
            kind = kind.strip().lower()
            if not sep or kind not in KINDS:
                raise ConfigError(f"--faults: {part!r} is not KIND=RATE with KIND in {', '.join(KINDS)}")
            try:
                rate = float(val)
            except ValueError:
                raise ConfigError(f"--faults: rate {val!r} for {kind} is not a number") from None
            if not 0 <= rate <= 1:
                raise ConfigError(f"--faults: rate for {kind} must be within 0..1, got {rate:g}")
            rates[kind] = rate
        return cls(rates=rates, seed=seed, **kw)

    @property
    def active(self) -> bool:
        return any(self.rates.values())

    def draw(self) -> str | None:
        if not self.active:
            return None
        u = self._rng.random()
        acc = 0.0
        for kind in KINDS:
            acc += self.rates.get(kind, 0.0)
            if u < acc:
                return kind
        return None
