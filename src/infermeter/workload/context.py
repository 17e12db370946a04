"""What every workload shares: the tokenizer, the API shape, the text pools and ``describe()``.

::

    ctx = BuildContext(load_tokenizer(None), api="chat")
    pool = ctx.pool("prose", max_tokens=12_000)      # built once per source, grown on demand
    ctx.spec(0, "Hello there", max_tokens=64, input_tokens=2)
    # RequestSpec(index=0, prompt=None, messages=({'role': 'user', 'content': 'Hello there'},), ...)

``api="chat"`` puts text in one user message, ``api="completions"`` in
``prompt``; multi-turn workloads pass their own ``messages``. ``prompt_salt``
(0: none) changes which text the prompts are cut from, nothing else: the same
seed and another salt give prompts of the same lengths and the same sharing
structure that share no opening with the unsalted ones (a server's prefix cache
from an earlier run does not help).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from infermeter.errors import ConfigError
from infermeter.workload.compose import openings
from infermeter.workload.corpus import load_corpus
from infermeter.workload.pool import TextPool
from infermeter.workload.spec import RequestSpec
from infermeter.workload.tokenizer import Tokenizer

APIS = ("chat", "completions")


class BuildContext:
    """Tokenizer, API and pools for one workload build."""

    def __init__(self, tokenizer: Tokenizer, *, api: str = "chat", prompt_salt: int = 0) -> None:
        if api not in APIS:
            raise ConfigError(f"--api {api}: expected one of {', '.join(APIS)}")
        if not isinstance(prompt_salt, int) or isinstance(prompt_salt, bool) or prompt_salt < 0:
            raise ConfigError(f"--prompt-salt {prompt_salt!r}: expected a whole number >= 0")
        self.tokenizer = tokenizer
        self.api = api
        self.chat = api == "chat"
        self.prompt_salt = prompt_salt
        self._pools: dict[str, TextPool] = {}

    def text_rng(self, seed: int) -> np.random.Generator:
        """The generator that chooses prompt *text* (never lengths, arrivals or sharing): the seed's own,
        or another one per ``prompt_salt``, so two salts send different text of the same lengths."""
        return np.random.default_rng([seed, 2, self.prompt_salt] if self.prompt_salt else [seed, 2])

    def pool(self, source: str, max_tokens: int) -> TextPool:
        """The pool for ``source`` able to supply ``max_tokens``-token texts (cached)."""
        have = self._pools.get(source)
        if have is None or have.capacity < max_tokens + 64:
            have = TextPool(load_corpus(source), self.tokenizer, max_tokens=max_tokens + 64)
            openings(have)  # now, while the workload is built, not at a run's first send
            self._pools[source] = have
        return have

    def spec(
        self,
        index: int,
        text: str,
        max_tokens: int,
        input_tokens: int,
        *,
        prefix_group: int | None = None,
        conversation_id: int | None = None,
    ) -> RequestSpec:
        if self.chat:
            return RequestSpec(
                index, None, ({"role": "user", "content": text},), max_tokens, input_tokens,
                conversation_id, prefix_group,
            )
        return RequestSpec(index, text, None, max_tokens, input_tokens, conversation_id, prefix_group)

    def describe(self, *, sources: list[dict[str, Any]], seed: int, **fields: Any) -> dict[str, Any]:
        """The run's ``workload`` block: what made the requests, hashed (the seed and the prompt salt
        choose among equal workloads and are not part of the hash)."""
        tok = self.tokenizer.describe()
        out: dict[str, Any] = {"profile": None, "dataset": None, "prompt_salt": self.prompt_salt, **fields}
        out.update({"api": self.api, "seed": seed, "tokenizer": tok, "sources": sources})
        basis = {k: out[k] for k in ("profile", "dataset", "parameters", "api")} | {
            "sources": [s.get("sha256") for s in sources],
            "tokenizer": [tok.get("name"), tok.get("hash")],
        }
        out["content_hash"] = hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()
        return out
