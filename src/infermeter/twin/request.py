"""One request inside the twin: what it asks for and where the engine has got to.

Hot-path data (a slotted class, no validation). Times are seconds on the
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

from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import Any

from infermeter.twin.state import set_state, state_of

# request states
WAITING = 0
PREFILL = 1  # running, prompt (or recompute) not finished
DECODE = 2  # running, one token per step
FINISHED = 3
REJECTED = 4
ABORTED = 5  # the client went away (live)
CANCELLED = 6  # still in flight when the run gave up on it (``grace_s`` after the duration)
TIMED_OUT = 7  # its client gave up (first-token or total timeout): the record's copy; the engine aborts it


class SimRequest:
    """One request (module docstring). A plain slotted class with an explicit ``__init__``: the compiled
    build (setup.py) makes it a native class, whose construction a dataclass's generated ``__init__`` would
    slow down."""

    __slots__ = (
        "rid", "arrival", "prompt_tokens", "max_tokens", "keys", "intended_at", "conversation_id",
        "prefix_group", "tag", "replica", "lane", "timed_out", "state", "num_tokens", "computed", "outputs",
        "blocks", "held", "keyed", "cursor", "own", "next_reg", "g0", "c0", "o0", "epoch", "scheduled_at",
        "first_token_at", "ended_at", "cached_tokens", "preemptions", "token_times", "error", "error_class",
    )

    def __init__(self, rid: int, arrival: float, prompt_tokens: int, max_tokens: int, keys: Any = (),
                 intended_at: float | None = None, conversation_id: int | None = None,
                 prefix_group: int | None = None, tag: Any = None, replica: int = -1, lane: int = -1,
                 timed_out: bool = False) -> None:
        self.rid = rid
        self.arrival = arrival  # reached the engine
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens  # output tokens it will generate (the twin has no EOS)
        self.keys = keys  # content keys of full prompt blocks: a list, tuple or int64 array of ints
        self.intended_at = intended_at  # load schedule's intended send time (records)
        self.conversation_id = conversation_id
        self.prefix_group = prefix_group
        self.tag = tag  # caller's handle (the live backend's stream)
        self.replica = replica  # the replica a stream-decided router sent it to (-1: route at send)
        self.lane = lane  # the engine it was added to (-1: not yet, or never)
        self.timed_out = timed_out  # its client gave up; the engine still holds it until it aborts it
        self.num_tokens = prompt_tokens
        self.state: int = WAITING
        self.computed: int = 0
        self.outputs: int = 0
        self.blocks: int = 0  # blocks held while waiting/prefilling (decoding: implicit)
        self.held: list[Any] = []  # [cache group, blocks of it held] (twin.kvcache)
        self.keyed: int = 0  # of its blocks, those it holds in cache groups (the rest are anonymous)
        self.cursor: Any = None  # the cache group its content was last found in (registration goes on from there)
        self.own: Any = None  # the cache group it registered last
        self.next_reg: int = 0  # next prompt block to register in the cache
        self.g0: int = 0
        self.c0: int = 0
        self.o0: int = 0
        self.epoch: int = 0  # bumps each time it leaves decode early (preempted, aborted, cancelled)
        self.scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.ended_at: float | None = None
        self.cached_tokens: int | None = None  # prefix-cache hit at first admission
        self.preemptions: int = 0
        self.token_times: list[float] | None = None  # per-token times when the engine keeps them
        self.error: str | None = None  # rejection (or timeout) reason
        self.error_class: str | None = None  # a record's error class when not a rejection (http_4xx)

    def __copy__(self) -> SimRequest:
        """Every attribute the same (the record of a request its client gave up on; copy.copy calls this:
        pickling's generic route costs ten times more, and saturated runs time out many requests)."""
        c = SimRequest(self.rid, self.arrival, self.prompt_tokens, self.max_tokens, self.keys, self.intended_at,
                       self.conversation_id, self.prefix_group, self.tag, self.replica, self.lane, self.timed_out)
        c.num_tokens, c.state, c.computed, c.outputs = self.num_tokens, self.state, self.computed, self.outputs
        c.blocks, c.held, c.keyed, c.cursor, c.own = self.blocks, self.held, self.keyed, self.cursor, self.own
        c.next_reg, c.g0, c.c0, c.o0, c.epoch = self.next_reg, self.g0, self.c0, self.o0, self.epoch
        c.scheduled_at, c.first_token_at, c.ended_at = self.scheduled_at, self.first_token_at, self.ended_at
        c.cached_tokens, c.preemptions, c.token_times = self.cached_tokens, self.preemptions, self.token_times
        c.error, c.error_class = self.error, self.error_class
        return c

    def __reduce__(self) -> tuple[Any, ...]:  # checkpoints, copies; both builds (twin.state)
        return (type(self), (self.rid, self.arrival, self.prompt_tokens, self.max_tokens), state_of(self))

    def __setstate__(self, state: dict[str, Any]) -> None:
        set_state(self, state)

    def __repr__(self) -> str:
        return (f"SimRequest(rid={self.rid}, arrival={self.arrival}, prompt_tokens={self.prompt_tokens}, "
                f"max_tokens={self.max_tokens}, state={self.state}, outputs={self.outputs})")

    @property
    def done(self) -> bool:
        return self.state >= FINISHED


def from_columns(rids: Iterable[int], at: list[float], pt: list[int], mt: list[int], conv: list[int] | None,
                 grp: list[int] | None, ends: list[int] | None, kflat: Any) -> Iterator[SimRequest]:
    """SimRequests from columns (lists): arrival (also the intended send), prompt and max tokens,
    conversation and prefix group (-1: none), each request's end offset in ``kflat`` (an int64 array of
    every request's keys, flat); ``None`` for ``conv``, ``grp`` or ``ends``: none for every request (a
    keyless stream). Short key lists become lists (cheaper to index), long ones their own
    small int64 array (less memory). The requests are made as they are taken (a ``map``: no Python frame
    per request but the constructor's)."""
    n = len(at)
    keys: Iterable[Any]
    if ends is None or not n or ends[n - 1] == 0:  # a keyless stream
        keys = repeat(())
    else:
        # mostly short lists: one conversion per batch (slicing a list is cheap, an array's is not); mostly
        # long ones: the few short ones converted each (converting every key would cost more than the copies)
        flat: list[int] | None = kflat.tolist() if ends[n - 1] <= 32 * n else None
        klist: list[Any] = []
        pos = 0
        for end in ends:
            klist.append(() if end <= pos else kflat[pos:end].copy() if end - pos > 32 else
                         flat[pos:end] if flat is not None else kflat[pos:end].tolist())
            pos = end
        keys = klist
    convs: Iterable[int | None] = (repeat(None) if conv is None or not n or max(conv) < 0
                                   else [None if c < 0 else c for c in conv])
    grps: Iterable[int | None] = (repeat(None) if grp is None or not n or max(grp) < 0
                                  else [None if g < 0 else g for g in grp])
    return map(SimRequest, rids, at, pt, mt, keys, at, convs, grps)


def columns_of(buf: list[SimRequest]) -> tuple[list[Any], ...]:
    """What a record needs of each request, as columns: request id, intended send, send, first token, end,
    prompt tokens, outputs, cached tokens, max tokens, conversation, prefix group, state, error."""
    rid: list[Any] = []
    intended: list[Any] = []
    sent: list[Any] = []
    first: list[Any] = []
    ended: list[Any] = []
    n_in: list[Any] = []
    n_out: list[Any] = []
    cached: list[Any] = []
    max_t: list[Any] = []
    conv: list[Any] = []
    grp: list[Any] = []
    state: list[Any] = []
    error: list[Any] = []
    for r in buf:
        rid.append(r.rid)
        intended.append(r.arrival if r.intended_at is None else r.intended_at)
        sent.append(r.arrival)
        first.append(r.first_token_at)
        ended.append(r.ended_at)
        n_in.append(r.prompt_tokens)
        n_out.append(r.outputs)
        cached.append(r.cached_tokens)
        max_t.append(r.max_tokens)
        conv.append(r.conversation_id)
        grp.append(r.prefix_group)
        state.append(r.state)
        error.append(r.error)
    return rid, intended, sent, first, ended, n_in, n_out, cached, max_t, conv, grp, state, error
