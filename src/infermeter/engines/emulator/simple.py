"""The simple timing backend of the emulated server, and the backend protocol.

A backend decides *when* tokens come out; the server (``engines.emulator.server``) turns
that into OpenAI-compatible HTTP. ``SimpleBackend`` has a fixed time to first
token, a fixed time per output token, and a limit on concurrently generating
requests (the rest queue, FIFO)::

    backend = SimpleBackend(ttft_s=0.05, itl_s=0.01, max_concurrency=64)
    async for k in backend.generate(GenRequest(prompt_tokens=200, max_tokens=64)):
        ...  # k tokens are due now

``ttft_s == itl_s == 0`` is the zero-delay mode: all tokens at once, for
measuring the client's own capacity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class GenRequest:
    """What the server tells a backend about one request."""

    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool = False
    prompt_text: str = ""
    prompt_token_ids: list[int] | None = None
    request_id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    model_name: str

    def describe(self) -> dict[str, Any]: ...

    def generate(self, req: GenRequest) -> AsyncIterator[int]:
        """Yield the number of tokens in each chunk, each at the time it is due."""
        ...

    def metrics_text(self) -> str | None: ...


class SimpleBackend:
    """Fixed TTFT, fixed per-token time, a concurrency limit; see the module docstring."""

    def __init__(self, *, ttft_s: float = 0.05, itl_s: float = 0.01, max_concurrency: int = 256,
                 model_name: str = "infermeter-emulator", speedup: float = 1.0) -> None:
        self.ttft_s = ttft_s / speedup
        self.itl_s = itl_s / speedup
        self.max_concurrency = max_concurrency
        self.model_name = model_name
        self._sem = asyncio.Semaphore(max_concurrency)
        self.running = 0
        self.waiting = 0

    def describe(self) -> dict[str, Any]:
        return {"backend": "simple", "ttft_s": self.ttft_s, "itl_s": self.itl_s, "max_concurrency": self.max_concurrency}

    @property
    def zero_delay(self) -> bool:
        return self.ttft_s == 0 and self.itl_s == 0

    async def generate(self, req: GenRequest) -> AsyncIterator[int]:
        n = max(0, req.max_tokens)
        if self.zero_delay:  # one chunk per token, all at once
            for _ in range(n):
                yield 1
            return
        self.waiting += 1
        await self._sem.acquire()
        self.waiting -= 1
        self.running += 1
        try:
            loop = asyncio.get_running_loop()
            t = loop.time() + self.ttft_s
            sent = 0
            while sent < n:
                delay = t - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                # Tokens that fell due while we slept leave in one chunk (as real servers do).
                due = 1
                if self.itl_s > 0:
                    late = loop.time() - t
                    if late > self.itl_s:
                        due = min(n - sent, 1 + int(late / self.itl_s))
                yield due
                sent += due
                t += self.itl_s * due
        finally:
            self.running -= 1
            self._sem.release()

    def metrics_text(self) -> str | None:
        return None

    def reset_prefix_cache(self) -> bool:
        return True  # no prefix cache: nothing to clear
