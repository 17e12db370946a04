"""What every workload shares: the tokenizer, the API shape, the text pools and ``describe()``.

::

    ctx = BuildContext(load_tokenizer(None), api="chat")
    pool = ctx.pool("prose", max_tokens=12_000)      # built once per source, grown on demand
    ctx.spec(0, "Hello there", max_tokens=64, input_tokens=2)
    # RequestSpec(index=0, prompt=None, messages=({'role': 'user', 'content': 'Hello there'},), ...)

``api="chat"`` puts text in one user message, ``api="completions"`` in
``prompt``; multi-turn workloads pass their own ``messages``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from infermeter.errors import ConfigError
from infermeter.workload.corpus import load_corpus
from infermeter.workload.pool import TextPool
from infermeter.workload.spec import RequestSpec
from infermeter.workload.tokenizer import Tokenizer

APIS = ("chat", "completions")


class BuildContext:
    """Tokenizer, API and pools for one workload build."""

    def __init__(self, tokenizer: Tokenizer, *, api: str = "chat") -> None:
        if api not in APIS:
            raise ConfigError(f"--api {api}: expected one of {', '.join(APIS)}")
        self.tokenizer = tokenizer
        self.api = api
        self.chat = api == "chat"
        self._pools: dict[str, TextPool] = {}

    def pool(self, source: str, max_tokens: int) -> TextPool:
        """The pool for ``source`` able to supply ``max_tokens``-token texts (cached)."""
        have = self._pools.get(source)
        if have is None or have.capacity < max_tokens + 64:
            have = TextPool(load_corpus(source), self.tokenizer, max_tokens=max_tokens + 64)
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
        """The run's ``workload`` block: what made the requests, hashed."""
        tok = self.tokenizer.describe()
        out: dict[str, Any] = {"profile": None, "dataset": None, **fields}
        out.update({"api": self.api, "seed": seed, "tokenizer": tok, "sources": sources})
        basis = {k: out[k] for k in ("profile", "dataset", "parameters", "api")} | {
            "sources": [s.get("sha256") for s in sources],
            "tokenizer": [tok.get("name"), tok.get("hash")],
        }
        out["content_hash"] = hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()
        return out
