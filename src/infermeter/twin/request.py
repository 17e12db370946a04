"""One request inside the twin: what it asks for and where the engine has got to.

Hot-path data (a slotted dataclass, no validation). Times are seconds on the
caller's clock (virtual offline, scaled real time live)::

    >>> r = SimRequest(rid=7, arrival=1.5, prompt_tokens=100, max_tokens=20)
    >>> r.num_tokens, r.outputs, r.done
    (100, 0, False)

Token bookkeeping follows vLLM: ``num_tokens`` = prompt + outputs so far;
``computed`` tokens have KV in the cache; when ``computed`` reaches ``num_tokens`` a
token is sampled (``outputs += 1``). A decoding request's ``computed``/``outputs``
are kept implicitly by the engine (see ``Engine.outputs_of``); the fields hold the
values at decode entry (``c0``, ``o0`` at step counter ``g0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# request states
WAITING = 0
PREFILL = 1  # running, prompt (or recompute) not finished
DECODE = 2  # running, one token per step
FINISHED = 3
REJECTED = 4
ABORTED = 5  # the client went away (live)
CANCELLED = 6  # still in flight when the run gave up on it (``grace_s`` after the duration)
TIMED_OUT = 7  # its client gave up (first-token or total timeout): the record's copy; the engine aborts it


@dataclass(slots=True, eq=False)
class SimRequest:
    rid: int
    arrival: float  # reached the engine
    prompt_tokens: int
    max_tokens: int  # output tokens it will generate (the twin has no EOS)
    keys: list[int] | tuple[int, ...] = ()  # content keys of full prompt blocks
    intended_at: float | None = None  # load schedule's intended send time (records)
    conversation_id: int | None = None
    prefix_group: int | None = None
    tag: Any = None  # caller's handle (the live backend's stream)
    replica: int = -1  # the replica a stream-decided router sent it to (-1: route at send)
    lane: int = -1  # the engine it was added to (-1: not yet, or never)
    timed_out: bool = False  # its client gave up; the engine still holds it until it aborts it

    state: int = WAITING
    num_tokens: int = 0
    computed: int = 0
    outputs: int = 0
    blocks: int = 0  # blocks held while waiting/prefilling (decoding: implicit)
    held: list[Any] = field(default_factory=list)  # [cache group, blocks of it held] (twin.kvcache)
    keyed: int = 0  # of its blocks, those it holds in cache groups (the rest are anonymous)
    cursor: Any = None  # the cache group its content was last found in (registration goes on from there)
    own: Any = None  # the cache group it registered last
    next_reg: int = 0  # next prompt block to register in the cache
    g0: int = 0
    c0: int = 0
    o0: int = 0
    epoch: int = 0  # bumps on preemption: stale heap entries are skipped
    scheduled_at: float | None = None
    first_token_at: float | None = None
    ended_at: float | None = None
    cached_tokens: int | None = None  # prefix-cache hit at first admission
    preemptions: int = 0
    token_times: list[float] | None = None  # per-token times when the engine keeps them
    error: str | None = None  # rejection (or timeout) reason
    error_class: str | None = None  # a record's error class when not a rejection (http_4xx)

    def __post_init__(self) -> None:
        self.num_tokens = self.prompt_tokens

    @property
    def done(self) -> bool:
        return self.state >= FINISHED
