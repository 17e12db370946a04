"""What infermeter writes or prints keeps secrets out: one redaction path for arguments, texts and records.

Promise: nothing infermeter writes (``run.json``, ``requests.parquet``, ``summary.json``, the history
database, reports, campaign and study files) or prints carries an API key or token that passed
through here:

- :func:`redact_text` masks every key shape it knows in a free text (a server's error body, an
  exception message): ``sk-...`` keys, JWTs (``eyJ...``, also cut short), ``Bearer ...`` and
  ``Basic ...`` credentials, named values (``Authorization: ...``, ``x-api-key: ...``,
  ``"api_key": "..."``, ``?api_key=...`` / ``&token=...`` in URLs), and the literal value of every
  key infermeter was given (:func:`remember_secret`, plus ``OPENAI_API_KEY`` and the other
  variables in ``SECRET_ENV``), also where only its first 8 characters survive, or its first 4
  where a cut ended the text. Call it *before* cutting a text to length: :func:`clip` does both;
- :func:`redact_args` masks the value of every secret flag of a command line (a flag whose name
  ends in a word of ``SECRET_WORDS``: ``--api-key``, ``--hf-token``, ``--password``, ``--client-secret``,
  as ``--flag VALUE`` or ``--flag=VALUE``; not ``--api-key-file`` or ``--max-tokens``) and runs
  :func:`redact_text` over every argument;
- :func:`redact_obj` does both over a JSON-like value: a secret-named key's string value becomes
  ``***``, an ``argv`` list is :func:`redact_args`-ed, every other string :func:`redact_text`-ed.

::

    >>> redact_args(["--port", "8000", "--api-key", "sk-1", "--hf-token=hf_2"])
    ['--port', '8000', '--api-key', '***', '--hf-token=***']
    >>> redact_text('HTTP 401: {"auth": "Bearer abc.def"}')
    'HTTP 401: {"auth": "Bearer ***"}'

A key shorter than ``MIN_LITERAL`` characters is masked where it appears in a named place
(``Bearer X``, ``api_key=X``) but not as a bare literal: masking ``"42"`` everywhere would mangle
every text.

The writers that pass through here: a request's error detail (``client.errors.http_detail`` and
``RequestFailed`` clip, ``OpenAIClient._fail`` redacts with the client's key), ``run.json``'s header,
config and ``argv`` (``measure.header``, ``RunConfig.public``), the history database
(``report.history``), an engine's log copied into a run (``engines.target``), engine launch records
(``engines``), and everything the console prints (``terminal.SafeConsole``). Redacting a detail costs
tens of microseconds (``benchmarks/redact_cost.py``); repeated messages are cached.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

MASK = "***"
# the last word of a flag that holds a secret (--api-key, --hf-token, --client-secret; not --api-key-file,
# --first-token-timeout or --max-tokens)
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials",
                          "auth", "authorization"})
SECRET_ENV = ("OPENAI_API_KEY", "INFERMETER_EMULATOR_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_LITERAL = 4  # a remembered key this short or longer is masked wherever it appears
_PREFIX = 8  # ... and wherever its first 8 characters appear (the rest may have been cut off)

_remembered: set[str] = set()

_V = r"[^\s\"'`,;&}\[\]\)\\<>]+"  # a credential's characters: up to a quote, separator or closing bracket
_Q = r"\\?[\"']?"  # an optional (escaped) quote
_NAMED = re.compile(  # names that always hold a credential: as a header, a JSON key or a query parameter
    r"(?i)((?:authorization|x-api-key|api[-_]?key|(?:secret|private|access|subscription)[-_]?key"
    r"|(?:access|auth|refresh|id|bearer|session)[-_]?token|client[-_]?secret|password|passwd)"
    + _Q + r"\s*[:=]\s*" + _Q + r")((?:bearer|basic|token|apikey)\s+)?" + _V)
_WEAK = re.compile(  # words that hold one as a query parameter (?key=X), token=X, or a quoted key ("token": "X")
    r"(?i)([?&;](?:key|sig|signature)=|\b(?:token|secret)=|\\?[\"'](?:token|secret|key)\\?[\"']\s*:\s*" + _Q + ")"
    + _V)
def _basic(m: re.Match[str]) -> str:
    """``Basic <base64>`` masked, but not ``Basic Settings``: the value has a digit, ``+/=`` or a capital inside."""
    v = m.group(3)
    looks = any(c.isdigit() or c in "+/=" for c in v) or any(c.isupper() for c in v[1:])
    return m.group(1) + m.group(2) + MASK if looks else m.group(0)


# (what the lower-cased text must contain for the pattern to be worth running, pattern, replacement): most
# error texts hold none of these words, and a substring test costs far less than a regex scan
_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], Any], ...] = (
    (("auth", "key", "token", "secret", "passw"), _NAMED, r"\1\2" + MASK),
    (("token", "secret", "key", "sig"), _WEAK, r"\1" + MASK),
    (("bearer",), re.compile(r"(?i)\b(bearer)(\s+)" + _V), r"\1\2" + MASK),
    (("basic",), re.compile(r"\b(Basic|BASIC)(\s+)([A-Za-z0-9+/]{6,}={0,2})"), _basic),
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*){0,2}"), "eyJ" + MASK),  # a JWT, whole or cut
    (("sk-", "rk-", "pk-"), re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_-]{6,}"), r"\1-" + MASK),  # sk-proj-..., sk-ant-...
    (("hf_", "gh", "glpat", "xox"),  # hub, git and chat tokens (not a model id like hf-internal-testing/...)
     re.compile(r"\b(hf_|gh[pousr]_|glpat-|xox[abprs]-)[A-Za-z0-9_-]{20,}"),
     r"\1" + MASK),
    (("akia",), re.compile(r"\bAKIA[0-9A-Z]{12,}"), "AKIA" + MASK),
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_-]{12,}"), "AIza" + MASK),
)
_TRIGGERS = tuple(sorted({w for words, _, _ in _PATTERNS for w in words}))


def remember_secret(value: str | None) -> None:
    """Mask ``value`` from every text this process redacts from now on (the configured API key)."""
    if value and len(value) >= MIN_LITERAL:
        _remembered.add(value)


def _secrets(extra: Iterable[str | None]) -> list[str]:
    env = os.environ
    found = _remembered.union(v for v in (env.get(n) for n in SECRET_ENV) if v and len(v) >= MIN_LITERAL)
    found.update(v for v in extra if v and len(v) >= MIN_LITERAL)
    return sorted(found, key=len, reverse=True) if len(found) > 1 else list(found)


def _mask_literal(text: str, secret: str) -> str:
    """Every occurrence of ``secret``, or of its first ``_PREFIX`` characters and as much more as follows,
    masked; and a shorter start of it (``MIN_LITERAL`` characters or more) where a cut ended the text, or
    the quote of a ``repr`` of a cut text follows it."""
    head = secret[:MIN_LITERAL]
    if head not in text:
        return text
    full = min(_PREFIX, len(secret))
    out: list[str] = []
    i = 0
    start = 0
    while (j := text.find(head, start)) >= 0:
        k = j + len(head)
        while k < len(text) and k - j < len(secret) and text[k] == secret[k - j]:
            k += 1
        if k - j >= full or k == len(text) or text[k] in "'\"":
            out += [text[i:j], MASK]
            i = k
        start = k
    out.append(text[i:])
    return "".join(out)


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every credential masked (see the module's docstring); ``secrets`` adds literal values."""
    if not text:
        return text
    keys = tuple(_secrets(secrets))
    return _redact_cached(text, keys) if len(text) <= 4096 else _redact(text, keys)


def _redact(text: str, keys: tuple[str, ...]) -> str:
    for s in keys:
        text = _mask_literal(text, s)
    low = text.lower()
    if not any(w in low for w in _TRIGGERS):
        return text
    for words, pattern, repl in _PATTERNS:
        if any(w in low for w in words):
            text = pattern.sub(repl, text)
    return text


_redact_cached = functools.lru_cache(maxsize=2048)(_redact)  # a failing run repeats its few messages


def clip(text: str, n: int, secrets: Iterable[str | None] = ()) -> str:
    """``text`` redacted, then cut to ``n`` characters: a key straddling the cut never survives in part.

    Only a window past ``n`` is redacted (every pattern recognises a credential from its start, and a
    literal key from its first 8 characters), widened when masking shortened the text into it."""
    secrets = tuple(secrets)
    window = n + 256
    while True:
        out = redact_text(text[:window], secrets)
        if len(text) <= window or len(out) >= n + 64:
            return out[:n]
        window *= 4


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[-_.]+", name.lstrip("-").lower()) if w]


def secret_flag(flag: str) -> bool:
    """Whether ``--flag`` holds a secret: the last word of its name is in ``SECRET_WORDS``."""
    words = _words(flag)
    return flag.startswith("-") and bool(words) and words[-1] in SECRET_WORDS


def secret_field(name: str) -> bool:
    """Whether a JSON field holds a secret: ``api_key``, ``hf_token``, ``password``, but not a bare ``key``."""
    words = _words(name)
    return bool(words) and words[-1] in SECRET_WORDS and (words[-1] != "key" or len(words) > 1 and words[-2] in (
        "api", "secret", "private", "access", "subscription"))


def redact_args(args: Sequence[Any]) -> list[str]:
    """A command line with every secret flag's value masked, and every argument :func:`redact_text`-ed."""
    out = [str(a) for a in args]
    for i, a in enumerate(out):
        flag, eq, _ = a.partition("=")
        if eq and secret_flag(flag):
            out[i] = f"{flag}={MASK}"
        elif secret_flag(a) and i + 1 < len(out) and not out[i + 1].startswith("--"):
            out[i + 1] = MASK
    return [a if a == MASK else redact_text(a) for a in out]


def secret_values(args: Sequence[Any]) -> list[str]:
    """The values of the secret flags of a command line (to mask them in what that command writes)."""
    out = [str(a) for a in args]
    found = []
    for i, a in enumerate(out):
        flag, eq, value = a.partition("=")
        if eq and secret_flag(flag):
            found.append(value)
        elif secret_flag(a) and i + 1 < len(out):
            found.append(out[i + 1])
    return found


def redact_obj(obj: Any) -> Any:
    """A JSON-like value with secrets masked: secret-named keys, ``argv`` lists, and every string."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if k == "argv" and isinstance(v, list):
                out[k] = redact_args(v)
            elif isinstance(k, str) and isinstance(v, str) and v and v != MASK and secret_field(k):
                out[k] = MASK
            else:
                out[k] = redact_obj(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
