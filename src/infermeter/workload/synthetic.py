"""Single-turn profiles: ``synthetic`` (optionally with shared prefixes), ``fixed``, ``code`` and ``reasoning``.

Each request is one prompt of a drawn length; nothing is shared unless the
profile says so::

    wl = SingleTurnWorkload(SyntheticParams(prefix_tokens=800, prefix_groups=4, input_tokens="1000"),
                            ctx, seed=3)
    spec = next(wl.requests())    # prompt = group prefix (800 tokens) + distinct tail (200)

* ``synthetic``/``fixed``: prose (or ``source``) text; with ``prefix_tokens`` P
  and ``prefix_groups`` G, each request picks a group uniformly and starts
  with that group's P-token prefix, so the shared-prefix fraction is
  P / mean input length.
* ``code``: a contiguous cut of Python's standard-library source starting at a
  line (distinct per request), followed by a short instruction.
* ``reasoning``: prose (or ``source``) text, then an instruction to think step by
  step; long ``max_tokens`` (a reasoning model's thinking and answer).

A consumer that needs only lengths (a simulation: prompt text matters to the twin only through
the prefix-cache keys made from it) may ask for specs without text where
:attr:`SingleTurnWorkload.text_optional` holds: ``requests(text=False)`` gives the same
indices, lengths and groups with an empty prompt, at a fraction of the cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from infermeter.errors import ConfigError
from infermeter.workload.compose import TextMaker
from infermeter.workload.context import BuildContext
from infermeter.workload.lengths import LengthSampler
from infermeter.workload.profiles import CodeParams, FixedParams, ReasoningParams, SyntheticParams
from infermeter.workload.spec import RequestSpec

CODE_INSTRUCTION = " Continue the code above with the next function, and reply with code only."
REASONING_INSTRUCTION = " Think it through step by step, then answer: what follows from the text above, and why?"


class SingleTurnWorkload:
    """One prompt per request: the ``synthetic``, ``fixed``, ``code`` and ``reasoning`` profiles."""

    def __init__(self, params: SyntheticParams | FixedParams | CodeParams | ReasoningParams, ctx: BuildContext, *,
                 seed: int) -> None:
        self.params = params
        self.ctx = ctx
        self.seed = seed
        self.prefix_tokens = getattr(params, "prefix_tokens", 0)
        self.prefix_groups = getattr(params, "prefix_groups", 1) if self.prefix_tokens else 0
        self.pool = ctx.pool(params.source, params.input_tokens.max)
        self._suffix = ""
        self._suffix_tokens = 0
        if params.kind in ("code", "reasoning"):
            self._suffix = CODE_INSTRUCTION if params.kind == "code" else REASONING_INSTRUCTION
            self._suffix_tokens = self.pool.mid_count(self._suffix)
        lo = params.input_tokens.min
        need = self.prefix_tokens + self._suffix_tokens
        if need and lo <= need:
            what = "--prefix-tokens" if self.prefix_tokens else f"the {params.kind} instruction"
            raise ConfigError(
                f"{what} ({need} tokens) leaves no room in the shortest prompt "
                f"(--input-tokens min {lo}); raise the minimum input length above {need}"
            )

    def describe(self) -> dict[str, Any]:
        return self.ctx.describe(
            profile=self.params.kind,
            parameters=self.params.model_dump(mode="json"),
            sources=[self.pool.describe()],
            seed=self.seed,
            shares_prefixes=bool(self.prefix_tokens),  # no prompt shares a cache block with another
        )

    @property
    def text_optional(self) -> bool:
        """Whether the text can be left out without changing what a simulation of these requests gives.

        True for ``synthetic`` and ``fixed`` prompts without a shared prefix on an additive pool:
        no prompt shares a KV-cache block with another (no two of the first ``heads x tails``
        openings, millions, share their first ``compose.OPENING_TOKENS`` tokens; a repeat after that
        comes long after any cache evicted it), so prefix-cache keys never match; and each prompt's
        token count is the drawn length itself, with no text to count. Not for ``code`` (its cuts
        repeat after the pool's starts), shared prefixes or a tokenizer whose counts are measured on
        the text.
        """
        return not self.prefix_tokens and not self._suffix and self.pool.additive

    def requests(self, *, text: bool = True) -> Iterator[RequestSpec]:
        """The specs; ``text=False`` (only where :attr:`text_optional`): the same specs with an empty prompt."""
        if not text and not self.text_optional:
            raise ValueError(f"the {self.params.kind} profile's prompts cannot be left out (text_optional is False)")
        return self._requests(text)

    def length_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(prompt tokens, max tokens)`` of the specs ``requests(text=False)`` gives, in order, as int64 arrays
        (blocks of the samplers' draws, so a consumer of lengths alone makes no spec; only where
        :attr:`text_optional`)."""
        if not self.text_optional:
            raise ValueError(f"the {self.params.kind} profile's prompts cannot be left out (text_optional is False)")
        ins, outs = self._samplers()
        return zip(ins.blocks(), outs.blocks())

    def _samplers(self) -> tuple[LengthSampler, LengthSampler]:
        """The input and output length samplers, seeded (every request draws one length from each)."""
        params = self.params
        return (LengthSampler(params.input_tokens, np.random.default_rng([self.seed, 1])),
                LengthSampler(params.output_tokens, np.random.default_rng([self.seed, 3])))

    def _requests(self, with_text: bool) -> Iterator[RequestSpec]:
        params, ctx, pool = self.params, self.ctx, self.pool
        maker = TextMaker(pool, ctx.text_rng(self.seed))
        ins, outs = self._samplers()
        groups = np.random.default_rng([self.seed, 4])
        P, G = self.prefix_tokens, self.prefix_groups
        prefixes = [maker.first(10**9 + g, P) for g in range(G)] if P else []
        whole = params.kind == "code"
        suffix_n = self._suffix_tokens
        suffix = self._suffix
        i = 0
        while True:
            n = ins.draw()
            group = None
            if P:
                group = int(groups.integers(G))
                pre = prefixes[group]
                text, got = pool.exact(lambda m: pre + maker.mid(i, m - P), n)
            elif whole:
                text, got = pool.exact(lambda m: maker.whole(i, m - suffix_n) + suffix, n)
            elif suffix_n:  # reasoning: prose, then the instruction
                text, got = pool.exact(lambda m: maker.first(i, m - suffix_n) + suffix, n)
            elif not with_text:  # text_optional: the drawn length is the count (the text's generator is not drawn)
                text, got = "", n
            else:
                text, got = pool.exact(lambda m: maker.first(i, m), n)
            yield ctx.spec(i, text, outs.draw(), got, prefix_group=group)
            i += 1
