"""Block-content keys for the twin's prefix cache: same leading content, same keys.

vLLM keys a full block (``block_size`` tokens, 16 by default) by a hash of (parent block's
hash, the block's token ids), so two prompts share cached blocks exactly as far as their
tokens agree; only full blocks are cached, so a prompt shorter than a block never hits. The
twin has no tokenizer on the hot path, so it keys blocks in one of two ways:

- :func:`token_block_keys` when token ids are known (exact, as vLLM);
- :func:`text_block_keys` otherwise: the prompt text is cut into chunks of
  ``chars_per_block`` characters (default ``CHARS_PER_BLOCK``: 16 tokens x ~4 characters per
  token), each key chained from the previous key and its chunk's hash. At most
  ``prompt_tokens // block_size`` keys are made (only full blocks are cached) and no more than
  the text has whole chunks. Two prompts sharing their first ``n`` characters share their first
  ``n // chars_per_block`` keys; prompts that differ in the first chunk share none.
  A text-derived hit of ``k`` blocks counts as ``block_size x k`` tokens, so hits are exact in
  blocks and approximate in tokens when a tokenizer packs more or fewer characters per token.

The keys are array arithmetic, not a Python loop per chunk, so that a batch of requests is keyed
at once (:meth:`KeyMaker.batch`; the simulator's request feeder keys 8,192 at a time):

- a chunk's hash ``h`` is a sum over the 64-bit words of its UTF-8 bytes (zero-padded to a
  whole word) of ``mix(word * R_w)``, where ``R_w`` is a fixed odd constant per word position
  and ``mix`` the xor-shift-multiply finaliser of splitmix64, plus its byte length times a
  constant; all-ASCII text (the usual case) is cut as one byte array;
- key ``j`` is ``k_j = (k_{j-1} * M + h_j) mod 2**63`` (``k_{-1} = 0``, ``M`` odd), whose closed
  form ``k_j = M**j * sum_{i<=j} M**-i * h_i`` (mod 2**64) is one cumulative sum.

Keys are the same in every process and every run (no salted ``hash``). Results depend only on
which keys are equal; two different chunks collide with a chance of about 2**-63 per pair.

:class:`KeyMaker` keys a request stream; a turn of a conversation that resends the previous
turn's history (the same message objects, or a prompt that starts with the previous prompt)
continues that turn's chain, so only its new text is hashed::

    >>> a = text_block_keys("S" * 128 + "question one", prompt_tokens=40)
    >>> b = text_block_keys("S" * 128 + "another question", prompt_tokens=40)
    >>> len(a), a == b
    (2, True)
    >>> text_block_keys("x" * 128, prompt_tokens=40)[0] == a[0]
    False

:func:`private_key` names a block only its own request can hit: the twin gives those
to a preempted request's computed blocks so that its recompute finds them if they were
not evicted (vLLM hashes output blocks too; the twin's output content is not modelled
otherwise).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from infermeter.twin.kvcache import BLOCK_SIZE
from infermeter.workload import build_workload

CHARS_PER_BLOCK = 4 * BLOCK_SIZE
_MASK = (1 << 63) - 1
_PRIVATE = -0x5EED_B10C  # tags private keys (a tuple of ints hashes the same in every process)
KEY_CACHE = 256  # conversations whose last prompt KeyMaker remembers
KEY_SCHEME = "utf8-words-splitmix-linear-1"  # how text keys are made; a checkpoint of another scheme cannot resume

_M = 0x9E37_79B9_7F4A_7C15  # the chain's multiplier (odd: invertible mod 2**64)
_MIX1, _MIX2 = np.uint64(0xBF58_476D_1CE4_E5B9), np.uint64(0x94D0_49BB_1331_11EB)  # splitmix64's finaliser
_LEN = np.uint64(0xD6E8_FEB8_6659_FD93)  # weighs a chunk's byte length
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_MASK_U = np.uint64(_MASK)
_BLOCK_WORDS = 1 << 15  # words hashed per block (256 KiB of uint64)
_BLOCK_CHARS = 1 << 18  # characters of text joined and hashed at a time
_NO_KEYS = np.zeros(0, np.int64)
_word_weights = np.zeros(0, np.uint64)  # R_w (see _weights), grown on demand
_powers = [np.ones(1, np.uint64), np.ones(1, np.uint64)]  # M**j and M**-j mod 2**64, j = 0, 1, ...


def _weights(words: int) -> np.ndarray:
    """``R_w`` for word positions ``0 .. words-1``: splitmix64 of the position, made odd (a formula: the same
    constants however many are asked for, in every process)."""
    global _word_weights
    if len(_word_weights) < words:
        z = (np.arange(max(words, 64), dtype=np.uint64) + np.uint64(1)) * np.uint64(_M)
        z = (z ^ (z >> _S30)) * _MIX1
        z = (z ^ (z >> _S27)) * _MIX2
        _word_weights = (z ^ (z >> _S31)) | np.uint64(1)
    return _word_weights[:words]


def _mix_words(words: np.ndarray, nbytes: np.ndarray | int) -> np.ndarray:
    """Chunk hashes (uint64) of ``words`` (chunks x words, uint64): see the module docstring. Worked through
    in blocks that stay in the CPU's cache (fresh large temporaries cost more in page faults than in arithmetic)."""
    n, w = words.shape
    r = _weights(w)
    h = np.empty(n, np.uint64)
    rows = max(1, _BLOCK_WORDS // max(1, w))
    x = np.empty((min(n, rows), w), np.uint64)
    y = np.empty_like(x)
    for a in range(0, n, rows):
        b = min(n, a + rows)
        xs, ys = x[: b - a], y[: b - a]
        np.multiply(words[a:b], r, out=xs)
        for shift, mult in ((_S30, _MIX1), (_S27, _MIX2)):
            np.right_shift(xs, shift, out=ys)
            xs ^= ys
            xs *= mult
        np.right_shift(xs, _S31, out=ys)
        xs ^= ys
        xs.sum(axis=1, dtype=np.uint64, out=h[a:b])
    h += np.asarray(nbytes, np.uint64) * _LEN
    return h


def _chunk_hashes(text: str, cpb: int) -> np.ndarray:
    """The hash of each ``cpb``-character chunk of ``text`` (its length a multiple of ``cpb``), as uint64."""
    n = len(text) // cpb
    if text.isascii():  # one byte per character: the chunks are rows of one array
        w = -(-cpb // 8)
        raw = np.frombuffer(text.encode("ascii"), np.uint8).reshape(n, cpb)
        if cpb % 8:
            padded = np.zeros((n, 8 * w), np.uint8)
            padded[:, :cpb] = raw
            raw = padded
        return _mix_words(np.ascontiguousarray(raw).view("<u8"), cpb)
    out = np.zeros(n, np.uint64)
    by_words: dict[int, tuple[list[int], list[bytes], list[int]]] = {}
    for i in range(n):
        b = text[i * cpb : (i + 1) * cpb].encode("utf-8", "surrogatepass")
        w = -(-len(b) // 8)
        rows, data, sizes = by_words.setdefault(w, ([], [], []))
        rows.append(i)
        data.append(b.ljust(8 * w, b"\0"))
        sizes.append(len(b))
    for w, (rows, data, sizes) in by_words.items():
        words = np.frombuffer(b"".join(data), "<u8").reshape(len(rows), w)
        out[np.array(rows)] = _mix_words(words, np.array(sizes, np.uint64))
    return out


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``M**j`` and ``M**-j`` (mod 2**64) for ``j < n`` at least (grown by doubling)."""
    up, down = _powers
    if len(up) < n:
        size = max(n, 2 * len(up), 1024)
        ones = np.ones(1, np.uint64)
        up = np.cumprod(np.concatenate([ones, np.full(size - 1, _M, np.uint64)]))
        down = np.cumprod(np.concatenate([ones, np.full(size - 1, pow(_M, -1, 1 << 64), np.uint64)]))
        _powers[:] = [up, down]
    return up, down


def _chain(h: np.ndarray, j: np.ndarray, first: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keys (int64) of chunks with hashes ``h`` at positions ``j`` of their texts, laid out text by text (each
    text's chunks in order, text ``t``'s from index ``first[t]``); ``base``: each text's running sum
    (``sum M**-i * h_i``) before its first chunk here. Also returns each text's running sum after its last."""
    up, down = _power_tables(int(j.max()) + 1)
    cs = np.cumsum(h * down[j], dtype=np.uint64)
    before = np.zeros(len(first), np.uint64)
    before[1:] = cs[first[1:] - 1]
    offset = base - before
    total = cs + np.repeat(offset, np.diff(np.append(first, len(h))))
    last = np.append(first[1:], len(h)) - 1
    keys: np.ndarray = ((up[j] * total) & _MASK_U).view(np.int64)
    return keys, total[last]


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i] - 1`` of every range, in order (int64)."""
    lengths = lengths.astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.cumsum(lengths) - lengths
    out: np.ndarray = np.arange(total, dtype=np.int64) + np.repeat(starts.astype(np.int64) - offsets, lengths)
    return out


def text_block_keys(text: str, prompt_tokens: int, *, chars_per_block: int = CHARS_PER_BLOCK,
                    block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained keys of the prompt's full blocks, derived from text chunks (see module docstring)."""
    n = min(prompt_tokens // block_size, len(text) // chars_per_block)
    if n <= 0:
        return []
    keys, _ = _chain(_chunk_hashes(text[: n * chars_per_block], chars_per_block), np.arange(n),
                     np.zeros(1, np.int64), np.zeros(1, np.uint64))
    out: list[int] = keys.tolist()
    return out


def token_block_keys(token_ids: Sequence[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained keys of every full block of ``token_ids`` (exact, as vLLM)."""
    keys: list[int] = []
    parent = 0
    for i in range(len(token_ids) // block_size):
        parent = hash((parent, tuple(token_ids[i * block_size : (i + 1) * block_size]))) & _MASK
        keys.append(parent)
    return keys


def private_key(request_id: int, block: int) -> int:
    """A key only request ``request_id`` can hit (its own block ``block``); the same in every process."""
    return hash((_PRIVATE, request_id, block)) & _MASK


def chat_text(messages: Sequence[dict[str, object]]) -> str:
    """The text the twin hashes for a chat request: message contents joined by newlines.

    The same text the emulator server hands its backend for a chat request, so offline
    and live key a conversation's turns alike (they share keys as far as their
    messages agree).
    """
    try:  # the usual case: every content a string
        return "\n".join([m["content"] for m in messages])  # type: ignore[misc]  # a TypeError if not
    except (KeyError, TypeError):
        pass
    parts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content))
    return "\n".join(parts)


def spec_text(spec: Any) -> str:
    """The prompt text the emulator server would see for a workload spec."""
    return spec.prompt if spec.prompt is not None else chat_text(spec.messages or ())


def spec_keys(spec: Any, chars_per_block: int = CHARS_PER_BLOCK, block_size: int = BLOCK_SIZE) -> list[int]:
    """Prefix-cache keys of a workload spec's prompt."""
    n = spec.input_tokens
    if n < block_size:
        return []
    return text_block_keys(spec_text(spec), n, chars_per_block=chars_per_block, block_size=block_size)


class _Text:
    """One growing text keyed chunk by chunk: a request's prompt, or a conversation's history so far."""

    __slots__ = ("length", "tail", "done", "keys", "total", "msgs", "prompt", "kept")

    def __init__(self, text: str, msgs: tuple[Any, ...] | None, prompt: str | None) -> None:
        self.length = len(text)  # characters so far
        self.tail = text  # the characters after the ``done`` chunks handed to hashing
        self.done = 0  # chunks handed to hashing
        self.keys: np.ndarray = _NO_KEYS  # the keys of those chunks, once their batch is hashed
        self.total = 0  # the chain's running sum after its last hashed chunk (mod 2**64)
        self.msgs = msgs  # a chat history: its message objects
        self.prompt = prompt  # a completions prompt: the whole text
        self.kept: Any = None  # the conversation it is remembered for (None: no later turn continues it)


_EMPTY = _Text("", None, None)  # a prompt shorter than a block


class KeyMaker:
    """:func:`spec_keys` for a stream of specs, a batch at a time (see the module docstring).

    A turn of a conversation (``conversation_id``) whose messages start with the previous turn's
    very message objects (the chat profile appends to its history), or whose prompt starts with
    the previous turn's prompt, continues that turn's text: only its new characters are hashed.
    The keys are identical to :func:`spec_keys`'; only the work differs. ``cache``: conversations
    remembered (the least recently used leaves first)."""

    def __init__(self, chars_per_block: int = CHARS_PER_BLOCK, block_size: int = BLOCK_SIZE,
                 cache: int = KEY_CACHE) -> None:
        if chars_per_block < 1:
            raise ValueError(f"chars_per_block {chars_per_block}: expected 1 or more")
        self.cpb = chars_per_block
        self.block_size = block_size
        self.cache = cache
        self._last: dict[Any, _Text] = {}

    def __call__(self, spec: Any) -> list[int]:
        return self.lists((spec,))[0]

    def lists(self, specs: Sequence[Any]) -> list[list[int]]:
        """:meth:`batch` as one list of keys per spec."""
        counts, flat = self.batch(specs)
        keys, out, pos = flat.tolist(), [], 0
        for n in counts.tolist():
            out.append(keys[pos : pos + n])
            pos += n
        return out

    def batch(self, specs: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Keys of many specs: each one's key count (int64) and all their keys in order, flat (int64)."""
        bs, cpb = self.block_size, self.cpb
        texts: list[_Text] = []
        counts: list[int] = []
        pieces: list[str] = []  # the characters to hash: a whole number of chunks per piece
        owners: list[_Text] = []  # each piece's text
        firsts: list[int] = []  # each piece's first chunk (its position in its text)
        fresh = True  # every keyed request a new text keyed whole here: its keys are its piece's, in order
        for spec in specs:
            n_tok = spec.input_tokens
            if n_tok < bs:
                texts.append(_EMPTY)
                counts.append(0)
                continue
            t = self._text(spec)
            n = min(n_tok // bs, t.length // cpb)
            done = t.done
            if n > done:
                cut = (n - done) * cpb
                pieces.append(t.tail[:cut])
                t.tail = t.tail[cut:]
                owners.append(t)
                firsts.append(done)
                t.done = n
                fresh = fresh and done == 0 and t.kept is None
            elif n:
                fresh = False
            texts.append(t)
            counts.append(n)
        if pieces:
            keys = self._hash(pieces, owners, firsts, fresh)
            if fresh:  # (a prompt without a conversation: nothing to keep, nothing to slice)
                return np.array(counts, np.int64), keys
        flat = [t.keys[:n] for t, n in zip(texts, counts) if n]
        keys = np.concatenate(flat) if len(flat) > 1 else flat[0].copy() if flat else _NO_KEYS.copy()
        return np.array(counts, np.int64), keys

    def _text(self, spec: Any) -> _Text:
        """The text ``spec`` sends: its conversation's text so far extended, or a new one."""
        cid = spec.conversation_id
        prompt = spec.prompt
        msgs = None if prompt is not None else tuple(spec.messages or ())
        t = self._last.pop(cid, None) if cid is not None else None
        if t is not None:
            add: str | None = None
            if msgs is not None and t.msgs is not None:
                k = len(t.msgs)
                if len(msgs) >= k and all(map(operator.is_, t.msgs, msgs)):
                    add = ("\n" if k else "") + chat_text(msgs[k:]) if len(msgs) > k else ""
            elif prompt is not None and t.prompt is not None and prompt.startswith(t.prompt):
                add = prompt[len(t.prompt) :]
            if add is None:
                t = None
            else:
                t.tail += add
                t.length += len(add)
                t.msgs, t.prompt = msgs, prompt
        if t is None:
            t = _Text(prompt if prompt is not None else chat_text(msgs or ()), msgs, prompt)
        if cid is not None:
            t.kept = cid
            last = self._last
            last[cid] = t
            if len(last) > self.cache:
                del last[next(iter(last))]
        return t

    def _hash(self, pieces: list[str], owners: list[_Text], firsts: list[int], fresh: bool) -> np.ndarray:
        """Hash the pieces at once and chain each text's keys; append them to its text, or (``fresh``: every piece
        a whole new text, kept nowhere) return them in the pieces' order."""
        cpb = self.cpb
        sizes = np.array([len(p) for p in pieces], np.int64) // cpb
        hashes, a, chars = [], 0, 0
        for b, p in enumerate(pieces):  # a few hundred kilobytes of text at a time (see _mix_words)
            chars += len(p)
            if chars >= _BLOCK_CHARS:
                hashes.append(_chunk_hashes("".join(pieces[a : b + 1]), cpb))
                a, chars = b + 1, 0
        if a < len(pieces):
            hashes.append(_chunk_hashes("".join(pieces[a:]), cpb))
        h = np.concatenate(hashes) if len(hashes) > 1 else hashes[0]
        if fresh:
            keys, _ = _chain(h, ranges(np.zeros(len(sizes), np.int64), sizes), np.cumsum(sizes) - sizes,
                             np.zeros(len(sizes), np.uint64))
            return keys
        j = ranges(np.array(firsts, np.int64), sizes)
        index: dict[int, int] = {}
        group = [index.setdefault(id(t), len(index)) for t in owners]
        texts = list({id(t): t for t in owners}.values())  # in the order of their first piece
        if len(texts) < len(owners):  # a text with several pieces here: its chunks together, in order
            order = np.argsort(np.repeat(np.array(group, np.int64), sizes), kind="stable")
            h, j = h[order], j[order]
            per = np.bincount(np.array(group, np.int64), weights=sizes, minlength=len(texts)).astype(np.int64)
        else:
            per = sizes
        first = np.cumsum(per) - per
        keys, totals = _chain(h, j, first, np.array([t.total for t in texts], np.uint64))
        ends = (first + per).tolist()
        for g, t in enumerate(texts):
            new = keys[int(first[g]) : ends[g]]
            t.keys = np.concatenate((t.keys, new)) if len(t.keys) else new
            t.total = int(totals[g])
        return keys


def calibrate_chars_per_block(specs: Iterator[Any], n: int = 256, block_size: int = BLOCK_SIZE) -> int:
    """``block_size`` x the workload's characters per token, from its first ``n`` specs (text keys' chunk size).

    Keys cut on a fixed character count; sized from the workload, a shared prefix of
    ``T`` tokens hits about ``T`` tokens (with 4 characters per token assumed, prose at
    ~4.8 would over-count by 20%).
    """
    chars = tokens = 0
    for _, spec in zip(range(n), specs):
        chars += len(spec_text(spec))
        tokens += spec.input_tokens
    if tokens == 0 or chars == 0:
        return 4 * block_size
    return max(1, round(block_size * chars / tokens))


def workload_chars_per_block(block_size: int = BLOCK_SIZE, **workload_args: Any) -> int:
    """:func:`calibrate_chars_per_block` for ``build_workload(**workload_args)`` (default: the
    default synthetic workload), e.g. for the live backend's ``chars_per_block``."""
    return calibrate_chars_per_block(iter(build_workload(**workload_args).requests()), block_size=block_size)
