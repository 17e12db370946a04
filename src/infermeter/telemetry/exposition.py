"""Parse the Prometheus text exposition format into flat samples.

Promise: :func:`parse_exposition` turns the body of a ``/metrics`` response
(Prometheus text format 0.0.4, and the OpenMetrics subset servers actually
emit) into a list of :class:`Sample` — one per line, with the sample name
exactly as exposed (``vllm:num_preemptions_total``, ``..._bucket``), labels as
a dict and the value as a float. Comment lines (``# HELP``, ``# TYPE``,
``# EOF``) and blank lines are skipped; a line that cannot be parsed is skipped
and counted, never fatal, because a scraper must survive one odd metric.
The core package needs no ``prometheus_client`` for this.

    >>> s = parse_exposition('vllm:num_requests_running{engine="0"} 3.0\\n')
    >>> s.samples[0].name, s.samples[0].labels, s.samples[0].value
    ('vllm:num_requests_running', {'engine': '0'}, 3.0)

:func:`select` sums the series of one name whose labels match a filter —
the way servers with several engines/ranks are aggregated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposed sample: ``name{labels} value``."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(slots=True)
class Exposition:
    """The parsed body: samples in file order, plus how many lines were unparseable."""

    samples: list[Sample] = field(default_factory=list)
    bad_lines: int = 0

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == '{'``; return labels and the index after ``}``."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " ,":
            pos += 1
        if pos >= n:
            raise ValueError("unterminated label set")
        if line[pos] == "}":
            return labels, pos + 1
        m = _NAME.match(line, pos)
        if not m:
            raise ValueError("bad label name")
        key = m.group(0)
        pos = m.end()
        while pos < n and line[pos] == " ":
            pos += 1
        if line[pos : pos + 1] != "=":
            raise ValueError("expected =")
        pos += 1
        while pos < n and line[pos] == " ":
            pos += 1
        if line[pos : pos + 1] != '"':
            raise ValueError("expected a quoted label value")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise ValueError("unterminated label value")
            c = line[pos]
            if c == "\\" and pos + 1 < n:
                chars.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
            elif c == '"':
                pos += 1
                break
            else:
                chars.append(c)
                pos += 1
        labels[key] = "".join(chars)


def _parse_value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


def parse_line(line: str) -> Sample | None:
    """Parse one sample line; ``None`` for comments/blank lines; ``ValueError`` if malformed."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    m = _NAME.match(line)
    if not m:
        raise ValueError("bad metric name")
    name = m.group(0)
    pos = m.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos)
    rest = line[pos:].split()
    if not rest:
        raise ValueError("missing value")
    return Sample(name, labels, _parse_value(rest[0]))


def split_series(line: str) -> tuple[str, str]:
    """``'name{labels} value [ts]'`` -> ``('name{labels}', ' value [ts]')`` without parsing the labels
    (the series text up to the last ``}``, or up to the first blank): a cheap key for a series already
    seen. ``line`` is stripped, not a comment."""
    if "{" in line:
        end = line.rfind("}") + 1
        return line[:end], line[end:]
    parts = line.split(None, 1)
    return parts[0], (parts[1] if len(parts) > 1 else "")


def parse_value(rest: str) -> float:
    """The value of a sample from what follows its series (``' 3.0 1712345678'`` -> 3.0)."""
    parts = rest.split()
    if not parts:
        raise ValueError("missing value")
    return _parse_value(parts[0])


def parse_exposition(text: str) -> Exposition:
    """Parse a whole exposition body (see module docstring)."""
    out = Exposition()
    for raw in text.splitlines():
        try:
            sample = parse_line(raw)
        except (ValueError, IndexError):
            out.bad_lines += 1
            continue
        if sample is not None:
            out.samples.append(sample)
    return out


def select(
    exp: Exposition, name: str, where: dict[str, str] | None = None, rank0: tuple[str, ...] = ()
) -> float | None:
    """Sum of the values of all series named ``name`` whose labels include ``where``.

    Labels named in ``rank0`` must be ``"0"`` when present (take one rank of a
    server that repeats a value per tensor-parallel rank). ``None`` when no
    series matches (unavailable), so a missing metric is never confused with a
    zero. NaN values are ignored; a series set made only of NaN is unavailable.
    """
    total = 0.0
    found = False
    for s in exp.samples:
        if s.name != name or math.isnan(s.value):
            continue
        if where and any(s.labels.get(k) != v for k, v in where.items()):
            continue
        if any(s.labels.get(k, "0") != "0" for k in rank0):
            continue
        total += s.value
        found = True
    return total if found else None


def looks_like_exposition(text: str) -> bool:
    """True when ``text`` plausibly is Prometheus text (not JSON or HTML)."""
    head = text.lstrip()[:1]
    if head in ("{", "[", "<"):
        return False
    exp = parse_exposition(text[:20000])
    return bool(exp.samples)
