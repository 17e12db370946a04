"""Reading request files: JSON arrays, JSONL and CSV, every entry tagged with its line.

One reader for every local format ``--dataset`` accepts::

    entries = read_entries(Path("sharegpt.json"))    # ShareGPT / inference-benchmarker / OpenAI style
    entries[0].line, entries[0].kind                   # (2, 'conversation')

An object (a JSON array element or a JSONL line) is one of:

* a conversation -- ``{"conversations": [{"from": "human", "value": ...}, ...]}``
  (ShareGPT) or ``[{"role": "user", "content": ...}, ...]`` (HF
  inference-benchmarker's ``share_gpt_turns.json``, ``classification.json``,
  ``github_code.json``);
* one request -- ``{"prompt": ...}`` or ``{"messages": [...]}``, optional
  ``max_tokens``;
* a trace row -- any of the above, or just ``input_length`` (and Mooncake's
  ``hash_ids``), plus an arrival time: ``arrival_s`` (seconds), ``arrival_ms``,
  or ``timestamp`` (milliseconds in JSON, as Mooncake writes it).

CSV files need a header; see :mod:`infermeter.workload.traces` for the columns.
Anything malformed raises :class:`DataError` naming the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.errors import DataError
from infermeter.workload.lengths import TOKENS_MAX

ROLES = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
    "bard": "assistant", "bing": "assistant", "model": "assistant", "system": "system",
}
MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens", "output_tokens", "output_length")
INPUT_LEN_KEYS = ("input_tokens", "input_length", "prompt_tokens")


@dataclass(frozen=True, slots=True)
class Entry:
    """One object of a request file; ``kind`` is 'conversation', 'request' or 'lengths'."""

    where: str
    kind: str
    messages: tuple[tuple[str, str], ...] = ()
    prompt: str | None = None
    max_tokens: int | None = None
    input_tokens: int | None = None
    hash_ids: tuple[int, ...] | None = None
    arrival: float | None = None


def _int(obj: dict[str, Any], keys: tuple[str, ...], where: str, *, minimum: int) -> int | None:
    for key in keys:
        if key in obj and obj[key] is not None:
            v = obj[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not minimum <= v <= TOKENS_MAX \
                    or v != int(v):  # NaN fails the range, so int() sees only finite numbers
                raise DataError(f"{where}: {key!r} must be a whole number from {minimum} to {TOKENS_MAX:,}, got {v!r}")
            return int(v)
    return None


def _turns(raw: Any, where: str, key: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise DataError(f"{where}: {key!r} must be a list of turns")
    out = []
    for i, turn in enumerate(raw):
        at = f"{where} ({key}[{i}])"
        if not isinstance(turn, dict):
            raise DataError(f"{at}: a turn must be an object")
        role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise DataError(f"{at}: unknown or missing role {role!r} (expected one of {', '.join(sorted(ROLES))})")
        if not isinstance(content, str):
            raise DataError(f"{at}: missing text ('content' or 'value')")
        out.append((ROLES[role.lower()], content))
    return tuple(out)


def parse_object(obj: Any, where: str, *, time_key_ms: bool) -> Entry:
    """Turn one JSON object into an :class:`Entry`; DataError names ``where`` (file:line)."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    arrival = None
    if "arrival_s" in obj:
        arrival = _number(obj["arrival_s"], "arrival_s", where)
    elif "arrival_ms" in obj:
        arrival = _number(obj["arrival_ms"], "arrival_ms", where) / 1000.0
    elif "timestamp" in obj:
        t = _number(obj["timestamp"], "timestamp", where)
        arrival = t / 1000.0 if time_key_ms else t
    max_tokens = _int(obj, MAX_TOKEN_KEYS, where, minimum=1)
    if "conversations" in obj:
        turns = _turns(obj["conversations"], where, "conversations")
        return Entry(where, "conversation", turns, max_tokens=max_tokens, arrival=arrival)
    if "messages" in obj:
        turns = _turns(obj["messages"], where, "messages")
        if not turns:
            raise DataError(f"{where}: 'messages' is empty")
        return Entry(where, "request", turns, max_tokens=max_tokens, arrival=arrival)
    for key in ("prompt", "text"):
        if key in obj:
            if not isinstance(obj[key], str) or not obj[key]:
                raise DataError(f"{where}: {key!r} must be a non-empty string")
            return Entry(where, "request", prompt=obj[key], max_tokens=max_tokens, arrival=arrival)
    n_in = _int(obj, INPUT_LEN_KEYS, where, minimum=1)
    if n_in is not None:
        hashes = obj.get("hash_ids")
        if hashes is not None and (
            not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)
        ):
            raise DataError(f"{where}: 'hash_ids' must be a list of integers")
        return Entry(
            where, "lengths", max_tokens=max_tokens, input_tokens=n_in,
            hash_ids=tuple(hashes) if hashes else None, arrival=arrival,
        )
    raise DataError(
        f"{where}: no request in this object; expected 'conversations', 'messages', 'prompt' or 'input_length'"
    )


def _number(v: Any, key: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:
        raise DataError(f"{where}: {key!r} must be a number >= 0, got {v!r}")
    return float(v)


def _json_array(text: str, name: str) -> list[tuple[str, Any]]:
    """Top-level array elements with the line each starts on."""
    dec = json.JSONDecoder()
    n = len(text)
    pos = _skip(text, 0)
    if pos >= n or text[pos] != "[":
        raise DataError(f"{name}:{text.count(chr(10), 0, pos) + 1}: expected a JSON array of objects")
    pos, line, last = pos + 1, 1 + text.count("\n", 0, pos + 1), pos + 1
    out: list[tuple[str, Any]] = []
    while True:
        pos = _skip(text, pos)
        if pos < n and text[pos] == "]" and not out:
            break
        line += text.count("\n", last, pos)
        last = pos
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(f"{name}:{exc.lineno}: invalid JSON ({exc.msg}, column {exc.colno})") from None
        out.append((f"{name}:{line}", obj))
        pos = _skip(text, pos)
        if pos < n and text[pos] == ",":
            pos += 1
            continue
        if pos < n and text[pos] == "]":
            break
        raise DataError(f"{name}:{text.count(chr(10), 0, pos) + 1}: expected ',' or ']' after an array element")
    if _skip(text, pos + 1) < n:
        raise DataError(f"{name}:{text.count(chr(10), 0, pos + 1) + 1}: unexpected text after the JSON array")
    return out


def _skip(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _jsonl(text: str, name: str) -> list[tuple[str, Any]]:
    out = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append((f"{name}:{i}", json.loads(raw)))
        except json.JSONDecodeError as exc:
            raise DataError(f"{name}:{i}: invalid JSON ({exc.msg}, column {exc.colno})") from None
    return out


def read_entries(path: Path, *, time_unit: str | None = None) -> tuple[list[Entry], str]:
    """All entries of a JSON/JSONL/CSV file and the format name.

    ``time_unit`` ("s" or "ms") sets the unit of a ``timestamp`` field; by
    default it is milliseconds in JSON (Mooncake) and seconds in CSV (BurstGPT).
    """
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{name}: cannot read ({exc.strerror})") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        from infermeter.workload.traces import read_csv

        return read_csv(text, name, timestamp_ms=time_unit == "ms"), "csv"
    if suffix in (".jsonl", ".ndjson") or (suffix != ".json" and text.lstrip()[:1] == "{"):
        objs, fmt = _jsonl(text, name), "jsonl"
    elif text.lstrip()[:1] == "[":
        objs, fmt = _json_array(text, name), "json"
    elif text.lstrip()[:1] == "{":
        objs, fmt = _jsonl(text, name), "jsonl"
    else:
        raise DataError(f"{name}:1: expected a JSON array, JSON lines or a CSV file with a header")
    if not objs:
        raise DataError(f"{name}: holds no requests")
    ms = time_unit != "s"
    return [parse_object(obj, where, time_key_ms=ms) for where, obj in objs], fmt
