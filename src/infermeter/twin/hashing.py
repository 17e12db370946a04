"""Block-content keys for the twin's prefix cache: same leading content, same keys.

vLLM keys a full 16-token block by a hash of (parent block's hash, the block's token
ids), so two prompts share cached blocks exactly as far as their tokens agree. The
twin has no tokenizer on the hot path, so it keys blocks in one of two ways:

- :func:`token_block_keys` when token ids are known (exact, as vLLM);
- :func:`text_block_keys` otherwise: the prompt text is cut into chunks of
  ``CHARS_PER_BLOCK`` characters (16 tokens x ~4 characters per token), each key a
  chained hash of the previous key and the chunk. At most ``prompt_tokens // 16``
  keys are made (only full blocks are cached) and no more than the text has whole
  chunks. Two prompts sharing their first ``n`` characters share their first
  ``n // CHARS_PER_BLOCK`` keys; prompts that differ in the first chunk share none.
  A text-derived hit of ``k`` blocks counts as ``16 k`` tokens, so hits are exact in
  blocks and approximate in tokens when a tokenizer packs more or fewer than four
  characters per token.

Keys are 63-bit non-negative ints from Python's ``hash`` (C speed). It is salted per
process, so keys are only ever compared inside one process (one simulation, one
emulator); results do not depend on their values, only on their equality::

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


def text_block_keys(text: str, prompt_tokens: int, *, chars_per_block: int = CHARS_PER_BLOCK) -> list[int]:
    """Chained keys of the prompt's full blocks, derived from text chunks (see module docstring)."""
    n = min(prompt_tokens // BLOCK_SIZE, len(text) // chars_per_block)
    keys: list[int] = []
    parent = 0
    for i in range(n):
        parent = hash((parent, text[i * chars_per_block : (i + 1) * chars_per_block])) & _MASK
        keys.append(parent)
    return keys


def token_block_keys(token_ids: Sequence[int]) -> list[int]:
    """Chained keys of every full 16-token block of ``token_ids`` (exact, as vLLM)."""
    keys: list[int] = []
    parent = 0
    for i in range(len(token_ids) // BLOCK_SIZE):
        parent = hash((parent, tuple(token_ids[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]))) & _MASK
        keys.append(parent)
    return keys


def private_key(request_id: int, block: int) -> int:
    """A key only request ``request_id`` can hit (its own block ``block``)."""
    return hash(("private", request_id, block)) & _MASK


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


def spec_keys(spec: Any, chars_per_block: int = CHARS_PER_BLOCK) -> list[int]:
    """Prefix-cache keys of a workload spec's prompt."""
    n = spec.input_tokens
    if n < 16:
        return []
    return text_block_keys(spec_text(spec), n, chars_per_block=chars_per_block)


def calibrate_chars_per_block(specs: Iterator[Any], n: int = 256) -> int:
    """16 x the workload's characters per token, from its first ``n`` specs (text keys' chunk size).

    Keys cut on a fixed character count; sized from the workload, a shared prefix of
    ``T`` tokens hits about ``T`` tokens (with 4 characters per token assumed, prose at
    ~4.8 would over-count by 20%).
    """
    chars = tokens = 0
    for _, spec in zip(range(n), specs):
        chars += len(spec_text(spec))
        tokens += spec.input_tokens
    if tokens == 0 or chars == 0:
        return CHARS_PER_BLOCK
    return max(1, round(16 * chars / tokens))


def workload_chars_per_block(**workload_args: Any) -> int:
    """:func:`calibrate_chars_per_block` for ``build_workload(**workload_args)`` (default: the
    default synthetic workload), e.g. for the live backend's ``chars_per_block``."""
    return calibrate_chars_per_block(iter(build_workload(**workload_args).requests()))
