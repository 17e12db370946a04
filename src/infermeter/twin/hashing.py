"""Block-content keys for the twin's prefix cache: same leading content, same keys.

vLLM keys a full block (``block_size`` tokens, 16 by default) by a hash of (parent block's
hash, the block's token ids), so two prompts share cached blocks exactly as far as their
tokens agree; only full blocks are cached, so a prompt shorter than a block never hits. The
twin has no tokenizer on the hot path, so it keys blocks in one of two ways:

- :func:`token_block_keys` when token ids are known (exact, as vLLM);
- :func:`text_block_keys` otherwise: the prompt text is cut into chunks of
  ``chars_per_block`` characters (default ``CHARS_PER_BLOCK``: 16 tokens x ~4 characters per
  token), each key a chained hash of the previous key and the chunk. At most
  ``prompt_tokens // block_size`` keys are made (only full blocks are cached) and no more than
  the text has whole chunks. Two prompts sharing their first ``n`` characters share their first
  ``n // chars_per_block`` keys; prompts that differ in the first chunk share none.
  A text-derived hit of ``k`` blocks counts as ``block_size x k`` tokens, so hits are exact in
  blocks and approximate in tokens when a tokenizer packs more or fewer characters per token.

:class:`KeyMaker` makes the keys of a request stream and reuses, for a request of the same
conversation or prefix group as an earlier one, that one's keys over their common leading text
(the same keys, fewer hashes: a chat turn resends its whole history).

Keys are 63-bit non-negative ints from Python's ``hash`` (C speed). Text hashing is salted
per process, so keys are only compared among keys made by one process (one request stream,
one emulator); results do not depend on their values, only on their equality (processes
started with the same ``PYTHONHASHSEED`` make the same keys: the simulator's workers and
feeder are)::

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

from collections.abc import Iterator, Sequence
from typing import Any

from infermeter.twin.kvcache import BLOCK_SIZE
from infermeter.workload import build_workload

CHARS_PER_BLOCK = 4 * BLOCK_SIZE
_MASK = (1 << 63) - 1
_MIX = 1_000_003  # chains a chunk's hash onto its parent key (CPython's tuple-hash multiplier)
_PRIVATE = -0x5EED_B10C  # tags private keys (a tuple of ints hashes the same in every process)
KEY_CACHE = 256  # conversations / prefix groups whose last prompt KeyMaker remembers


def text_block_keys(text: str, prompt_tokens: int, *, chars_per_block: int = CHARS_PER_BLOCK,
                    block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained keys of the prompt's full blocks, derived from text chunks (see module docstring)."""
    n = min(prompt_tokens // block_size, len(text) // chars_per_block)
    return _chain(text, [], n, chars_per_block)


def _chain(text: str, keys: list[int], n: int, cpb: int) -> list[int]:
    """``keys`` (the first ones, known) extended to ``n``: each key mixes the previous one with the hash of
    its ``cpb``-character chunk (a multiply-xor, not a tuple hash: the same equalities, a third fewer
    allocations on the simulator's busiest path)."""
    parent = keys[-1] if keys else 0
    for h in [hash(text[i : i + cpb]) for i in range(len(keys) * cpb, n * cpb, cpb)]:
        parent = (parent * _MIX ^ h) & _MASK
        keys.append(parent)
    return keys


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


class KeyMaker:
    """:func:`spec_keys` for a stream of specs, reusing an earlier prompt's keys over shared leading text.

    Requests of one conversation (``conversation_id``) or one prefix group (``prefix_group``)
    usually share their leading text with the previous one: its keys over the longest common
    run of whole chunks are the same chained hashes, so they are copied, not recomputed. The
    keys are identical to :func:`spec_keys`'; only the work differs.
    """

    def __init__(self, chars_per_block: int = CHARS_PER_BLOCK, block_size: int = BLOCK_SIZE,
                 cache: int = KEY_CACHE) -> None:
        self.cpb = chars_per_block
        self.block_size = block_size
        self.cache = cache
        self._last: dict[Any, tuple[str, list[int]]] = {}

    def __call__(self, spec: Any) -> list[int]:
        n_tok = spec.input_tokens
        bs = self.block_size
        if n_tok < bs:
            return []
        cpb = self.cpb
        text = spec_text(spec)
        n = min(n_tok // bs, len(text) // cpb)
        cid, gid = spec.conversation_id, spec.prefix_group
        sid = cid if cid is not None else (None if gid is None else ("g", gid))
        keys: list[int] = []
        if sid is not None:
            prev = self._last.pop(sid, None)
            if prev is not None:
                keys = _shared(prev[0], prev[1], text, min(n, len(prev[1])), cpb)
        _chain(text, keys, n, cpb)
        if sid is not None and n:
            last = self._last
            last[sid] = (text, keys)
            if len(last) > self.cache:
                del last[next(iter(last))]
        return keys


def _shared(ptext: str, pkeys: list[int], text: str, m: int, cpb: int) -> list[int]:
    """The previous prompt's keys over the longest run of whole chunks ``text`` shares with it."""
    if m <= 0:
        return []
    if text.startswith(ptext[: m * cpb]):
        return pkeys[:m]
    lo, hi = 0, m - 1  # lo chunks shared; find the most (binary search on the prefix length)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text.startswith(ptext[: mid * cpb]):
            lo = mid
        else:
            hi = mid - 1
    return pkeys[:lo]


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
