"""Request traces: CSV rows or JSON objects with arrival times, for ``--load replay``.

A trace says *when* each request arrived and how long it was; text is
synthesised at exactly that length unless the row carries its own prompt::

    entries = read_csv(open("burstgpt.csv").read(), "burstgpt.csv")
    arrivals = trace_offsets(entries)     # seconds from the first arrival, sorted

CSV columns (header names, case-insensitive):

===================  =====================================================================
arrival              ``arrival_s`` or ``timestamp`` or ``time`` (seconds), ``arrival_ms`` (ms)
input length         ``input_tokens``, ``input_length``, ``prompt_tokens``, ``request tokens``
output length        ``output_tokens``, ``output_length``, ``max_tokens``, ``completion_tokens``,
                     ``response tokens`` (0 -- a failed request in BurstGPT -- becomes 1)
text (optional)      ``prompt``
===================  =====================================================================

BurstGPT's ``Timestamp,Model,Request tokens,Response tokens,...`` files load
as they are. In JSON/JSONL traces ``timestamp`` is in milliseconds (Mooncake);
the ``time_unit`` option overrides either default. Mooncake ``hash_ids``
(one id per 512-token block, ``block_tokens``) become shared text blocks, so
requests that share ids share exactly those prefix blocks.
"""

from __future__ import annotations

import csv
import io

from infermeter.errors import DataError
from infermeter.workload.datafiles import Entry
from infermeter.workload.lengths import TOKENS_MAX

_ARRIVAL_S = ("arrival_s", "timestamp", "time")
_ARRIVAL_MS = ("arrival_ms", "timestamp_ms")
_INPUT = ("input_tokens", "input_length", "prompt_tokens", "request tokens", "request_tokens")
_OUTPUT = ("output_tokens", "output_length", "max_tokens", "completion_tokens", "response tokens", "response_tokens")


def _find(header: list[str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in header:
            return header.index(name)
    return None


def _num(raw: str, col: str, where: str, *, whole: bool) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise DataError(f"{where}: column {col!r} must be a number, got {raw!r}") from None
    if not 0 <= v < float("inf") or (whole and (v > TOKENS_MAX or v != int(v))):  # NaN fails the first test
        kind = f"a whole number from 0 to {TOKENS_MAX:,}" if whole else "a finite number >= 0"
        raise DataError(f"{where}: column {col!r} must be {kind}, got {raw!r}")
    return v


def read_csv(text: str, name: str, *, timestamp_ms: bool = False) -> list[Entry]:
    """Entries of a CSV request list or trace; DataError names file and line."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise DataError(f"{name}: empty CSV file") from None
    i_s, i_ms = _find(header, _ARRIVAL_S), _find(header, _ARRIVAL_MS)
    i_in, i_out, i_prompt = _find(header, _INPUT), _find(header, _OUTPUT), _find(header, ("prompt",))
    if i_in is None and i_prompt is None:
        raise DataError(f"{name}:1: the header needs an input length column ({', '.join(_INPUT)}) or 'prompt'")
    ms = i_s is None and i_ms is not None
    i_t = i_s if i_s is not None else i_ms
    if i_s is not None and header[i_s] == "timestamp" and timestamp_ms:
        ms = True
    out: list[Entry] = []
    for row in reader:
        where = f"{name}:{reader.line_num}"
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} columns, the header has {len(header)}")
        arrival = None
        if i_t is not None:
            arrival = _num(row[i_t].strip(), header[i_t], where, whole=False) / (1000.0 if ms else 1.0)
        max_tokens = None
        if i_out is not None:
            max_tokens = max(1, int(_num(row[i_out].strip(), header[i_out], where, whole=True)))
        if i_prompt is not None and row[i_prompt]:
            out.append(Entry(where, "request", prompt=row[i_prompt], max_tokens=max_tokens, arrival=arrival))
            continue
        if i_in is None:
            raise DataError(f"{where}: empty 'prompt' and no input length column")
        n_in = int(_num(row[i_in].strip(), header[i_in], where, whole=True))
        if n_in < 1:
            raise DataError(f"{where}: column {header[i_in]!r} must be at least 1, got {row[i_in]!r}")
        out.append(Entry(where, "lengths", max_tokens=max_tokens, input_tokens=n_in, arrival=arrival))
    if not out:
        raise DataError(f"{name}: holds no requests")
    return out


def trace_order(entries: list[Entry]) -> tuple[list[Entry], list[float]]:
    """Entries sorted by arrival (stable) and their offsets from the first arrival, in seconds.

    Every entry must have an arrival time once any has one.
    """
    missing = [e for e in entries if e.arrival is None]
    if missing:
        raise DataError(f"{missing[0].where}: no arrival time, but other rows of this trace have one")
    ordered = sorted(entries, key=lambda e: e.arrival or 0.0)  # every entry has one (checked above)
    t0 = ordered[0].arrival or 0.0
    return ordered, [(e.arrival or 0.0) - t0 for e in ordered]
