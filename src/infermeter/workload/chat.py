"""The ``chat`` profile: multi-turn conversations that resend their growing history.

Turn ``t`` of a conversation sends every earlier user message and assistant
reply plus a new user message, so turn ``t``'s input is turn ``t-1``'s input
with two messages appended -- exactly what a prefix cache can reuse::

    wl = ChatWorkload(ChatParams(), ctx, seed=0)
    a, b = ...  # two consecutive turns of one conversation
    b.messages[: len(a.messages)] == a.messages       # True: the history is resent verbatim
    b.messages[len(a.messages)]["role"] == "assistant"

``active_conversations`` conversations are open at once and the stream picks
one at random for each request, so turns of one conversation are spread out
as real users' are. A finished conversation (``turns`` drawn per conversation,
or the next input would pass ``max_context_tokens``) is replaced by a new one.
The assistant replies in the history are text of ``reply_tokens`` (default: the
turn's ``max_tokens``) written by the workload, not the server's answers.
With ``--api completions`` the history is flattened into one prompt string.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infermeter.errors import ConfigError
from infermeter.workload.compose import TextMaker
from infermeter.workload.context import BuildContext
from infermeter.workload.lengths import LengthSampler
from infermeter.workload.profiles import ChatParams
from infermeter.workload.spec import RequestSpec

_SYSTEM_INDEX = 10**12


@dataclass(slots=True)
class _Conversation:
    cid: int
    turns: int
    turn: int = 0
    tokens: int = 0
    messages: list[dict[str, str]] = field(default_factory=list)
    flat: str = ""


class ChatWorkload:
    """Interleaved multi-turn conversations with the full history resent each turn."""

    def __init__(self, params: ChatParams, ctx: BuildContext, *, seed: int) -> None:
        self.params = params
        self.ctx = ctx
        self.seed = seed
        if params.system_tokens + params.user_tokens.min > params.max_context_tokens:
            raise ConfigError(
                f"profile 'chat': system_tokens {params.system_tokens} + the shortest user message "
                f"({params.user_tokens.min}) exceed max_context_tokens {params.max_context_tokens}"
            )
        longest = max(params.user_tokens.max, params.output_tokens.max, params.system_tokens)
        if params.reply_tokens is not None:
            longest = max(longest, params.reply_tokens.max)
        self.pool = ctx.pool(params.source, longest)

    def describe(self) -> dict[str, Any]:
        return self.ctx.describe(
            profile="chat",
            parameters=self.params.model_dump(mode="json"),
            sources=[self.pool.describe()],
            seed=self.seed,
            shares_prefixes=True,  # by design: conversation history / documents are sent again
        )

    def requests(self) -> Iterator[RequestSpec]:
        p, ctx, pool = self.params, self.ctx, self.pool
        maker = TextMaker(pool, ctx.text_rng(self.seed))
        turns = LengthSampler(p.turns, np.random.default_rng([self.seed, 5]))
        users = LengthSampler(p.user_tokens, np.random.default_rng([self.seed, 1]))
        outs = LengthSampler(p.output_tokens, np.random.default_rng([self.seed, 3]))
        replies = LengthSampler(p.reply_tokens, np.random.default_rng([self.seed, 6])) if p.reply_tokens else None
        pick = np.random.default_rng([self.seed, 4])
        chat = ctx.chat
        system, system_n = "", 0
        if p.system_tokens:
            system, system_n = pool.exact(lambda m: maker.first(_SYSTEM_INDEX, m), p.system_tokens)
        texts = 0  # index into the maker's distinct texts

        def new(cid: int) -> _Conversation:
            conv = _Conversation(cid, turns.draw(), tokens=system_n)
            if system:
                conv.messages.append({"role": "system", "content": system})
                conv.flat = system
            return conv

        def segment(conv: _Conversation, n: int) -> tuple[str, int]:
            nonlocal texts
            texts += 1
            i = texts
            if chat or not conv.flat:
                return pool.exact(lambda m: maker.first(i, m), n)
            return pool.exact(lambda m: maker.mid(i, m), n)

        active = [new(c) for c in range(p.active_conversations)]
        next_cid = p.active_conversations
        index = 0
        while True:
            slot = int(pick.integers(len(active)))
            conv = active[slot]
            n_user = users.draw()
            if conv.turn > 0 and conv.tokens + n_user > p.max_context_tokens:
                conv = active[slot] = new(next_cid)
                next_cid += 1
            n_user = max(1, min(n_user, p.max_context_tokens - conv.tokens))
            text, got = segment(conv, n_user)
            conv.messages.append({"role": "user", "content": text})
            if not chat:  # the flattened history is a completions prompt; chat requests send the messages
                conv.flat += text
            conv.tokens += got
            max_tokens = outs.draw()
            if chat:
                yield RequestSpec(index, None, tuple(conv.messages), max_tokens, conv.tokens, conv.cid)
            else:
                tokens = conv.tokens if pool.additive else ctx.tokenizer.count(conv.flat)
                yield RequestSpec(index, conv.flat, None, max_tokens, tokens, conv.cid)
            index += 1
            conv.turn += 1
            if conv.turn >= conv.turns:
                active[slot] = new(next_cid)
                next_cid += 1
                continue
            reply, got = segment(conv, replies.draw() if replies else max_tokens)
            conv.messages.append({"role": "assistant", "content": reply})
            if not chat:
                conv.flat += reply
            conv.tokens += got
