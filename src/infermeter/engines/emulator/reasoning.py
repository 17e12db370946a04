"""An emulated reasoning model: each request thinks for a drawn number of its output tokens first.

``--reasoning-tokens N`` (or a length distribution, ``mean[,stdev[,min,max]]`` as
``--output-tokens`` takes it) makes the emulated server stream the first N generated tokens of
each request as ``delta.reasoning_content`` (chat; vLLM's reasoning parsers) or inside
``<think> ... </think>`` (completions: the raw text), then the rest as the answer. The thinking
tokens are generated tokens like any other: the timing backend (the twin: KV grows, every step
costs its time; or the simple backend's time per token) produces them, so the thinking lasts N
inter-token gaps and ``ttfo - ttft = N x ITL``. As in vLLM, ``max_tokens`` bounds thinking and
answer together: a request whose thinking reaches ``max_tokens`` gets no answer. The usage counts
them all in ``completion_tokens`` (vLLM's usage has no reasoning split)::

    >>> plan = ThinkingPlan.parse("300")
    >>> plan.draw(), plan.describe()
    (300, '300')
"""

from __future__ import annotations

import numpy as np

from infermeter.workload.lengths import LengthDist, LengthSampler

FLAG = "--reasoning-tokens"


class ThinkingPlan:
    """Thinking tokens per request, drawn in request order from a seeded distribution."""

    __slots__ = ("dist", "_sampler")

    def __init__(self, dist: LengthDist, seed: int = 0) -> None:
        self.dist = dist
        self._sampler = LengthSampler(dist, np.random.default_rng([seed, 30]))

    @classmethod
    def parse(cls, text: str | int | None, seed: int = 0) -> ThinkingPlan | None:
        """The plan of a ``--reasoning-tokens`` value (None: no thinking); ConfigError names the flag."""
        if text is None or (isinstance(text, str) and text.strip() in ("", "0")) or text == 0:
            return None
        return cls(LengthDist.parse(text, flag=FLAG), seed)

    def draw(self) -> int:
        return self._sampler.draw()

    def describe(self) -> str:
        return self.dist.label()


def split(k: int, produced: int, thinking: int) -> tuple[int, int]:
    """Of ``k`` tokens following ``produced`` earlier ones, how many are thinking and how many answer."""
    r = min(k, max(0, thinking - produced))
    return r, k - r
