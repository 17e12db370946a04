"""How much of a request stream an ideal prefix cache could reuse, measured on the text itself.

A stand-in for a server's block prefix cache with unlimited room: each
request's text is cut into fixed blocks of characters, each block is keyed by
everything before it, and a block counts as reused when an earlier request
had the same key::

    specs = list(itertools.islice(build_workload(profile="classification").requests(), 400))
    ideal_prefix_reuse(specs)       # ~0.93 for the defaults; ~0.0 for profile="code"

Chat requests are flattened with role markers, as a chat template would.
The number is a property of the workload (an upper bound on any server's hit
rate for it), not a measurement of a server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from infermeter.workload.spec import RequestSpec


def request_text(spec: RequestSpec) -> str:
    """The text a server would see, with a role marker before each message."""
    if spec.prompt is not None:
        return spec.prompt
    return "".join(f"<|{m['role']}|>{m['content']}" for m in spec.messages or ())


def ideal_prefix_reuse(specs: Iterable[RequestSpec], *, block_chars: int = 64) -> float:
    """Fraction of characters (in whole blocks) an unlimited prefix cache would have seen before."""
    seen: set[bytes] = set()
    reused = total = 0
    for spec in specs:
        text = request_text(spec)
        total += len(text)
        h = hashlib.blake2b(digest_size=16)
        hit = True
        for start in range(0, len(text) - block_chars + 1, block_chars):
            h.update(text[start : start + block_chars].encode())
            key = h.digest()
            if hit and key in seen:
                reused += block_chars
            else:
                hit = False
                seen.add(key)
    return reused / total if total else 0.0
