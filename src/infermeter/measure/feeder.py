"""The request stream of a simulation: workload specs + schedule offsets -> :class:`SimRequest`.

Making a request (drawing lengths, cutting prompt text, hashing its blocks) costs
about as much as simulating it, so huge runs make the stream in a child process, on
the second core, and receive it in columnar batches; small runs make it in-process.
Both give the same requests in the same order (same seeds)::

    reqs = local_stream(shape, iter(workload.requests()), seed=0)   # in this process
    reqs = ChildStream(FeedSpec(workload={...}, shape=shape, seed=0))  # in a child
    next(reqs).arrival   # the intended send offset (s) from shape.schedule; 0.0 for closed loops
    reqs.close()

Prefix-cache keys come from the prompt text as the emulator server sees it
(``spec.prompt``, or the chat messages' contents; :mod:`infermeter.twin.hashing`),
cut into chunks of ``chars_per_block`` characters; :func:`calibrate_chars_per_block`
sizes them to one block (``block_size`` tokens) of the workload's own text, and a
:class:`~infermeter.twin.hashing.KeyMaker` keys a batch at a time, hashing only a conversation
turn's new text. Keys are a function of the text alone (array arithmetic, not Python's salted
``hash``), so a resumed run, a child and the parent all make the same keys for the same text.
Send times come from the shape's own ``schedule`` (a trace replay's included).

**Keyless streams.** A workload whose prompts share no cache block (:func:`needs_keys` is False:
``synthetic`` and ``fixed`` without a shared prefix) gets no keys at all, and its specs are made
without text: no key could ever match, so the simulation is the same, at about half the CPU
(a 72-hour stream of them) (:meth:`~infermeter.workload.synthetic.SingleTurnWorkload.text_optional`).
Where such a workload also reads its lengths in blocks and the shape's schedule is its arrivals (not
a trace), a child makes no spec at all: it draws send offsets and lengths as arrays, a block at a
time, the same numbers from the same seeds (:func:`length_columns`), and sends only those columns.
"""

from __future__ import annotations

import gc
import itertools
import pickle
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from infermeter.errors import UserError
from infermeter.load.shapes import BaseShape
from infermeter.measure.child import start_child
from infermeter.twin.hashing import CHARS_PER_BLOCK, KeyMaker
from infermeter.twin.kvcache import BLOCK_SIZE
from infermeter.twin.request import SimRequest, from_columns
from infermeter.workload import build_workload

BATCH = 8192  # requests per message of a child's stream
LOCAL_BATCH = 256  # requests keyed at a time in this process (a small run's first requests come soon)


def needs_keys(workload: Any) -> bool:
    """Whether a simulation of ``workload`` needs prefix-cache keys (and so its prompt text): False only for a
    workload that says its text can be left out (``text_optional``: no prompt shares a block with another)."""
    return not getattr(workload, "text_optional", False)


def workload_specs(workload: Any, keys: bool) -> Iterator[Any]:
    """``workload``'s specs; without ``keys``, made without text where the workload allows it (:func:`needs_keys`)."""
    if not keys and not needs_keys(workload):
        return iter(workload.requests(text=False))
    return iter(workload.requests())


def timed_specs(shape: BaseShape | None, specs: Iterator[Any], seed: int = 0) -> Iterator[tuple[float, Any]]:
    """``(send offset, spec)``: the open-loop ``shape``'s schedule (None or a closed loop: every offset 0.0)."""
    if shape is not None and shape.open_loop:
        return shape.schedule(np.random.default_rng(seed), specs)
    return ((0.0, spec) for spec in specs)


def local_stream(
    shape: BaseShape | None,
    specs: Iterator[Any],
    *,
    seed: int = 0,
    keys: bool = True,
    chars_per_block: int = CHARS_PER_BLOCK,
    block_size: int = BLOCK_SIZE,
) -> Iterator[SimRequest]:
    """SimRequests from specs, timed by the open-loop ``shape``'s schedule (None or a closed loop: 0.0)."""
    make = KeyMaker(chars_per_block, block_size) if keys else None
    return sim_requests(timed_specs(shape, specs, seed), make)


def sim_requests(timed: Iterator[tuple[float, Any]], make_keys: Any = None, first_rid: int = 0) -> Iterator[SimRequest]:
    """``(send offset, spec)`` -> SimRequests numbered from ``first_rid``, keyed by ``make_keys`` (a
    :class:`~infermeter.twin.hashing.KeyMaker`: keyed :data:`LOCAL_BATCH` at a time; or keyless)."""
    rid = first_rid
    if make_keys is None:
        for at, spec in timed:
            yield SimRequest(rid, at, spec.input_tokens, spec.max_tokens, (), at, spec.conversation_id,
                             spec.prefix_group)
            rid += 1
        return
    while True:
        chunk = list(itertools.islice(timed, LOCAL_BATCH))
        if not chunk:
            return
        for (at, spec), keys in zip(chunk, make_keys.lists([spec for _, spec in chunk])):
            yield SimRequest(rid, at, spec.input_tokens, spec.max_tokens, keys, at, spec.conversation_id,
                             spec.prefix_group)
            rid += 1


@dataclass(frozen=True)
class FeedSpec:
    """What a child process needs to rebuild the stream (picklable)."""

    workload: dict[str, Any]  # keyword arguments of infermeter.workload.build_workload
    shape: Any = None  # a load shape (pydantic, picklable); None or closed: every arrival at 0
    seed: int = 0
    limit: int | None = None  # requests in all (warmup included)
    duration_s: float | None = None
    keys: bool = True  # False: a keyless stream (module docstring), its specs made without text where possible
    chars_per_block: int = CHARS_PER_BLOCK
    block_size: int = BLOCK_SIZE
    skip: int = 0  # requests of the stream to pass over first (a resumed run)


def length_columns(workload: Any, shape: BaseShape | None, seed: int = 0
                   ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """``(send offsets, prompt tokens, max tokens)`` in aligned blocks: the keyless stream of ``workload`` on the
    open-loop ``shape`` without a spec per request, where the workload reads its lengths in blocks
    (``length_blocks``, a keyless one: :func:`needs_keys` is False) and the shape's schedule is its arrivals
    (``offsets_only``: not a trace). The same numbers as :func:`timed_specs` over
    ``workload.requests(text=False)``, from the same seeds; None where this does not apply."""
    if (needs_keys(workload) or not hasattr(workload, "length_blocks") or shape is None or not shape.open_loop
            or not shape.offsets_only):
        return None
    return _aligned(shape.arrival_blocks(np.random.default_rng(seed)), workload.length_blocks())


def _aligned(times: Iterator[np.ndarray], lengths: Iterator[tuple[np.ndarray, np.ndarray]]
             ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Blocks of times and of length pairs (of any sizes) cut to aligned blocks; ends with the shorter stream."""
    t = np.zeros(0)
    p = m = np.zeros(0, np.int64)
    while True:
        if not len(t):
            nt = next(times, None)
            if nt is None:
                return
            t = nt
        if not len(p):
            nl = next(lengths, None)
            if nl is None:
                return
            p, m = nl
        k = min(len(t), len(p))
        yield t[:k], p[:k], m[:k]
        t, p, m = t[k:], p[k:], m[k:]


def column_batches(cols: Iterator[tuple[np.ndarray, ...]], *, skip: int = 0, limit: int | None = None,
                   horizon: float = float("inf"), size: int = BATCH) -> Iterator[tuple[np.ndarray, ...]]:
    """:func:`length_columns`' blocks as batches of ``size`` rows (the last one shorter): the
    first ``skip`` rows passed over, then rows while the send offset (column 0) is before ``horizon``, up to
    ``limit`` rows in all (those skipped included), as :func:`produce` cuts a stream of specs."""
    n = 0  # rows of the stream passed so far (skipped or taken)
    held: list[tuple[np.ndarray, ...]] = []
    rows = 0
    for block in cols:
        if n < skip:
            drop = min(skip - n, len(block[0]))
            n += drop
            block = tuple(c[drop:] for c in block)
        late = np.flatnonzero(block[0] >= horizon)
        end = int(late[0]) if len(late) else len(block[0])
        if limit is not None:
            end = min(end, limit - n)
        done = end < len(block[0])
        block = tuple(c[:end] for c in block)
        n += end
        while len(block[0]):
            take = min(size - rows, len(block[0]))
            held.append(tuple(c[:take] for c in block))
            rows += take
            block = tuple(c[take:] for c in block)
            if rows == size:
                yield tuple(np.concatenate(cs) for cs in zip(*held))
                held, rows = [], 0
        if done:
            break
    if held:
        yield tuple(np.concatenate(cs) for cs in zip(*held))


def produce(spec: FeedSpec, conn: Any) -> None:
    """The child's side (:mod:`infermeter.measure.child`): the stream in columnar batches on ``conn``; a keyless
    stream whose lengths come in blocks (:func:`length_columns`) as send offsets, prompt and max tokens only
    (no conversation, prefix group or keys: ``None``)."""
    gc.disable()  # short-lived, cycle-free objects only
    try:
        wl = build_workload(**spec.workload)
        lengths = None if spec.keys else length_columns(wl, spec.shape, spec.seed)
        if lengths is not None:
            _produce_columns(lengths, spec, conn)
            return
        timed = timed_specs(spec.shape, workload_specs(wl, spec.keys), spec.seed)
        if spec.skip:
            timed = itertools.islice(timed, spec.skip, None)
        make = KeyMaker(spec.chars_per_block, spec.block_size) if spec.keys else None
        limit = spec.limit
        horizon = spec.duration_s if spec.duration_s is not None else float("inf")
        n = spec.skip
        done = False
        while not done:
            at: list[float] = []
            specs: list[Any] = []
            for t, s in timed:
                if t >= horizon:
                    done = True
                    break
                at.append(t)
                specs.append(s)
                n += 1
                if (limit is not None and n >= limit) or len(at) >= BATCH:
                    done = limit is not None and n >= limit
                    break
            else:
                done = True
            kcount, kflat = batch_keys(make, specs)
            cols = (np.array(at, dtype=np.float64), *spec_columns(specs), kcount, kflat)
            conn.send_bytes(pickle.dumps(("batch", cols), protocol=pickle.HIGHEST_PROTOCOL))
        conn.send_bytes(pickle.dumps(("end", None)))
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        report_error(conn, exc)
    finally:
        conn.close()


def _produce_columns(lengths: Iterator[tuple[np.ndarray, ...]], spec: FeedSpec, conn: Any) -> None:
    """:func:`produce` for a stream of :func:`length_columns`: send offsets, prompt and max tokens only."""
    horizon = spec.duration_s if spec.duration_s is not None else float("inf")
    for at, pt, mt in column_batches(lengths, skip=spec.skip, limit=spec.limit, horizon=horizon):
        conn.send_bytes(pickle.dumps(("batch", (at, pt, mt, None, None, None, None)), protocol=pickle.HIGHEST_PROTOCOL))
    conn.send_bytes(pickle.dumps(("end", None)))


def batch_keys(make: KeyMaker | None, specs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(key counts, keys flat)`` of a batch of specs (:meth:`KeyMaker.batch`); a keyless stream's: none."""
    if make is None:
        return np.zeros(len(specs), np.int64), np.zeros(0, np.int64)
    return make.batch(specs)


def spec_columns(specs: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prompt tokens, max tokens, conversation and prefix group (-1: none) of each spec, as int64 columns."""
    return (np.array([s.input_tokens for s in specs], np.int64), np.array([s.max_tokens for s in specs], np.int64),
            np.array([-1 if s.conversation_id is None else s.conversation_id for s in specs], np.int64),
            np.array([-1 if s.prefix_group is None else s.prefix_group for s in specs], np.int64))


def report_error(conn: Any, exc: BaseException) -> None:
    """Send a child's failure to its parent as ``("error", "Type: message")`` (the parent raises it); a parent
    already gone is no one to tell."""
    try:
        conn.send_bytes(pickle.dumps(("error", f"{type(exc).__name__}: {exc}")))
    except (BrokenPipeError, EOFError, OSError):
        pass


def unpack_requests(rids: Iterable[int], at: Any, pt: Any, mt: Any, conv: Any, grp: Any, kcount: Any,
                    kflat: Any) -> Iterator[SimRequest]:
    """SimRequests from the column arrays a child process sent (arrival, prompt and max tokens, conversation
    and prefix group (-1: none), key counts and the keys flat; None for a column: none for every request;
    :func:`infermeter.twin.request.from_columns`)."""
    return from_columns(rids, at.tolist(), pt.tolist(), mt.tolist(), None if conv is None else conv.tolist(),
                        None if grp is None else grp.tolist(),
                        None if kcount is None else np.cumsum(kcount).tolist(), kflat)


class ChildStream:
    """An iterator of SimRequests made by a child process (see the module docstring)."""

    def __init__(self, spec: FeedSpec) -> None:
        self._child = start_child("infermeter.measure.feeder:produce", spec, name="infermeter-feeder")
        self._conn = self._child.conn
        self._skip = spec.skip
        self._batches = self._received()
        self._gen: Iterator[SimRequest] = itertools.chain.from_iterable(self._batches)  # per request: no Python frame

    def _received(self) -> Generator[Iterator[SimRequest], None, None]:
        """The child's batches, each as an iterator of its SimRequests."""
        rid = self._skip
        while True:
            try:
                kind, payload = pickle.loads(self._conn.recv_bytes())
            except EOFError:
                raise UserError("the simulation's workload process ended unexpectedly") from None
            if kind == "end":
                return
            if kind == "error":
                raise UserError(f"workload process: {payload}")
            n = len(payload[0])
            yield unpack_requests(range(rid, rid + n), payload[0], payload[1], payload[2], payload[3], payload[4],
                                  payload[5], payload[6])
            rid += n

    def __iter__(self) -> Iterator[SimRequest]:
        return self._gen  # the chain itself: no per-item wrapper call

    def __next__(self) -> SimRequest:
        return next(self._gen)

    def close(self) -> None:
        self._batches.close()
        self._gen = iter(())  # nothing more, not even the rest of the batch in hand
        self._child.close()
