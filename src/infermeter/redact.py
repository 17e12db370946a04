"""What infermeter writes keeps secrets out: a command line with its secret values masked.

Promise: :func:`redact_args` returns a copy of a server's or emulator's arguments with the value of
every secret flag (``SECRET_FLAGS``: API keys and hub tokens, as ``--flag VALUE`` or
``--flag=VALUE``) replaced by ``***``; nothing else changes. Whatever records arguments
(``run.json``'s config and ``target.launch``, campaign and study reports) passes them through it::

    >>> redact_args(["--port", "8000", "--api-key", "sk-1", "--hf-token=hf_2"])
    ['--port', '8000', '--api-key', '***', '--hf-token=***']
"""

from __future__ import annotations

from collections.abc import Sequence

SECRET_FLAGS = ("--api-key", "--hf-token", "--token")


def redact_args(args: Sequence[str]) -> list[str]:
    out = [str(a) for a in args]
    for i, a in enumerate(out):
        if a in SECRET_FLAGS and i + 1 < len(out):
            out[i + 1] = "***"
        else:
            flag = a.split("=", 1)[0]
            if "=" in a and flag in SECRET_FLAGS:
                out[i] = f"{flag}=***"
    return out
