"""What the load runner consumes: one :class:`RequestSpec` per request, from a :class:`Workload`.

A workload is a deterministic stream of request specs (same seed, same bytes)
plus a JSON-able ``describe()`` that the run records::

    wl = build_workload(profile="synthetic", input_tokens="200", output_tokens="100", seed=1)
    spec = next(iter(wl.requests()))
    spec.input_tokens      # 200: exact, counted in wl.describe()["tokenizer"]
    spec.messages          # ({"role": "user", "content": "..."},)   (api="chat")

``prompt`` is set for ``api="completions"``, ``messages`` for ``api="chat"``;
exactly one of them is not ``None``. ``input_tokens`` counts the text the
workload wrote (message contents, no special tokens, no chat template).
``arrival_s`` is set only by trace datasets: the offset of the request in the
trace, which ``--load replay --time-scale X`` turns into a send time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: its text, its requested output and where it sits in the workload."""

    index: int
    prompt: str | None
    messages: tuple[dict[str, str], ...] | None
    max_tokens: int
    input_tokens: int
    conversation_id: int | None = None
    prefix_group: int | None = None
    arrival_s: float | None = None


@runtime_checkable
class Workload(Protocol):
    """A reproducible stream of requests and a description of how it was made."""

    def describe(self) -> dict[str, Any]:
        """JSON-able facts: profile or dataset, parameters, content hash, tokenizer, seed."""
        ...

    def requests(self) -> Iterator[RequestSpec]:
        """A fresh iterator over the stream (endless for profiles); same seed, same specs."""
        ...
