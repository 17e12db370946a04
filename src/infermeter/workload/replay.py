"""Turning dataset entries into request specs: conversations, single requests, length-only rows.

::

    player = EntryPlayer(ctx, pool, DatasetOptions(), default_output=128)
    specs = player.play_loop(entries, outs=None, seed=0)          # endless, entries cycled
    specs = player.play_trace(entries, offsets, outs=None, seed=0)  # once, arrival_s = offsets[i]

A conversation yields one request per user turn carrying all earlier turns;
the assistant turn after it in the file (or, when there is none, written text
of the turn's ``max_tokens``) joins the history for the next turn. Length-only
rows get prose of exactly their length; Mooncake ``hash_ids`` map each id to
one fixed block of text, so equal ids mean equal prefix blocks. Token counts
of file text are measured once per distinct string and cached.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from infermeter.errors import DataError
from infermeter.workload.compose import TextMaker
from infermeter.workload.context import BuildContext
from infermeter.workload.datafiles import Entry
from infermeter.workload.lengths import LengthSampler
from infermeter.workload.pool import TextPool
from infermeter.workload.spec import RequestSpec

Message = dict[str, str]


class EntryPlayer:
    """Expands entries into specs for one dataset workload."""

    def __init__(self, ctx: BuildContext, pool: TextPool | None, options: Any, *, default_output: int) -> None:
        self.ctx = ctx
        self.pool = pool
        self.opts = options
        self.default_output = default_output
        self._counts: dict[str, int] = {}

    # -- counting ------------------------------------------------------------------------
    def _count(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            n = self._counts[text] = self.ctx.tokenizer.count(text)
        return n

    def _out(self, outs: LengthSampler | None, reply: str | None, entry: Entry) -> int:
        if outs is not None:
            return outs.draw()
        if reply:
            return max(1, self._count(reply))
        return entry.max_tokens or self.default_output

    def _emit(
        self, index: int, messages: list[Message], tokens: int, max_tokens: int, cid: int | None, arrival: float | None
    ) -> RequestSpec:
        if self.ctx.chat:
            return RequestSpec(index, None, tuple(messages), max_tokens, tokens, cid, None, arrival)
        if len(messages) == 1:
            return RequestSpec(index, messages[0]["content"], None, max_tokens, tokens, cid, None, arrival)
        prompt = "\n\n".join(m["content"] for m in messages)
        return RequestSpec(index, prompt, None, max_tokens, self._count(prompt), cid, None, arrival)

    # -- text synthesis ------------------------------------------------------------------
    def _synth(self, maker: TextMaker | None, key: int, n: int) -> tuple[str, int]:
        assert self.pool is not None and maker is not None  # a maker exists exactly when the pool does
        return self.pool.exact(lambda m: maker.first(key, m), n)

    def _blocks(self, maker: TextMaker | None, entry: Entry) -> tuple[str, int]:
        assert self.pool is not None and maker is not None and entry.hash_ids and entry.input_tokens
        size, ids, n = self.opts.block_tokens, entry.hash_ids, entry.input_tokens
        last = n - size * (len(ids) - 1)
        if last < 1:
            raise DataError(f"{entry.where}: input_length {n} is too short for {len(ids)} hash_ids of {size} tokens")
        parts = []
        for pos, h in enumerate(ids):
            m = size if pos < len(ids) - 1 else min(last, size)
            parts.append(maker.first(2 * h, m) if pos == 0 else maker.mid(2 * h, m))
        covered = size * (len(ids) - 1) + min(last, size)
        if n > covered:
            parts.append(maker.mid(2 * (n + 7919 * len(ids)) + 1, n - covered))
        text = "".join(parts)
        return text, (n if self.pool.additive else self.ctx.tokenizer.count(text))

    # -- one entry -----------------------------------------------------------------------
    def _single(self, e: Entry, maker: TextMaker | None, key: int, outs: LengthSampler | None) -> tuple[list[Message], int, int]:
        """(messages, input tokens, max_tokens) of an entry sent as one request."""
        if e.kind == "lengths":
            text, n = self._blocks(maker, e) if e.hash_ids else self._synth(maker, 2 * key + 1, e.input_tokens or 1)
            return [{"role": "user", "content": text}], n, self._out(outs, None, e)
        if e.prompt is not None:
            return [{"role": "user", "content": e.prompt}], self._count(e.prompt), self._out(outs, None, e)
        turns = list(e.messages)
        while turns and turns[-1][0] == "assistant":
            turns.pop()
        if not turns:
            raise DataError(f"{e.where}: no user message to send")
        msgs = [{"role": r, "content": c} for r, c in turns]
        return msgs, sum(self._count(c) for _, c in turns), self._out(outs, None, e)

    def _conversation(
        self, e: Entry, maker: TextMaker | None, keys: Iterator[int], outs: LengthSampler | None
    ) -> Iterator[tuple[list[Message], int, int]]:
        opts, turns = self.opts, e.messages
        history: list[Message] = []
        tokens, j = 0, 0
        while j < len(turns):
            role, content = turns[j]
            j += 1
            if role != "user":
                history.append({"role": role, "content": content})
                tokens += self._count(content)
                continue
            n_user = self._count(content)
            reply = turns[j][1] if j < len(turns) and turns[j][0] == "assistant" else None
            if reply is not None:
                j += 1
            max_tokens = self._out(outs, reply, e)
            total = tokens + n_user
            if opts.max_input_tokens is not None and total > opts.max_input_tokens:
                return
            history.append({"role": "user", "content": content})
            if total >= opts.min_input_tokens:
                yield list(history), total, max_tokens
            if opts.turns == "first":
                return
            if reply is None:
                reply, got = self._synth(maker, 2 * next(keys) + 1, max_tokens)
            else:
                got = self._count(reply)
            history.append({"role": "assistant", "content": reply})
            tokens = total + got

    def _expand(
        self, e: Entry, maker: TextMaker | None, keys: Iterator[int], outs: LengthSampler | None
    ) -> Iterator[tuple[list[Message], int, int]]:
        if e.kind == "conversation":
            yield from self._conversation(e, maker, keys, outs)
            return
        msgs, n, max_tokens = self._single(e, maker, next(keys), outs)
        hi = self.opts.max_input_tokens
        if n >= self.opts.min_input_tokens and (hi is None or n <= hi):
            yield msgs, n, max_tokens

    # -- streams -------------------------------------------------------------------------
    def _maker(self, seed: int) -> TextMaker | None:
        return TextMaker(self.pool, self.ctx.text_rng(seed)) if self.pool is not None else None

    def play_trace(
        self, entries: list[Entry], offsets: list[float], outs: LengthSampler | None, *, seed: int
    ) -> Iterator[RequestSpec]:
        maker = self._maker(seed)
        for i, (e, t) in enumerate(zip(entries, offsets, strict=True)):
            msgs, n, max_tokens = self._single(e, maker, i, outs)
            yield self._emit(i, msgs, n, max_tokens, None, t)

    def play_loop(self, entries: list[Entry], outs: LengthSampler | None, *, seed: int) -> Iterator[RequestSpec]:
        maker = self._maker(seed)
        order_rng = np.random.default_rng([seed, 7])
        pick = np.random.default_rng([seed, 4])
        keys = iter(range(1 << 62))
        multi = self.opts.turns == "all" and any(e.kind == "conversation" for e in entries)
        width = self.opts.active_conversations if multi else 1

        def order() -> Iterator[int]:
            while True:
                idx = order_rng.permutation(len(entries)) if self.opts.shuffle else range(len(entries))
                yield from (int(i) for i in idx)

        source = order()
        slots: list[tuple[int, Iterator[tuple[list[Message], int, int]]]] = []
        cid = 0
        barren = 0  # entries in a row that gave no request
        index = 0
        while True:
            while len(slots) < width:
                e = entries[next(source)]
                slots.append((cid if e.kind == "conversation" else -1, self._expand(e, maker, keys, outs)))
                cid += 1
            s = int(pick.integers(len(slots))) if width > 1 else 0
            conv, gen = slots[s]
            item = next(gen, None)
            if item is None:
                slots.pop(s)
                barren += 1
                if barren > 2 * len(entries) + width:
                    raise DataError("no request in this dataset passes the min_input_tokens/max_input_tokens options")
                continue
            barren = 0
            msgs, n, max_tokens = item
            yield self._emit(index, msgs, n, max_tokens, conv if conv >= 0 else None, None)
            index += 1
