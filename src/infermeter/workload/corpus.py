"""Offline text sources: shipped prose, Python's own documentation, and Python's own source code.

A :class:`Corpus` is a text plus the character offsets where a prompt may
begin (word starts for prose, non-blank line starts for code), and a content hash the run records::

    prose = load_corpus("prose")     # essays shipped in infermeter/data/prose/ (written for infermeter)
    code = load_corpus("code")       # .py files of this Python's standard library
    docs = load_corpus("docs")       # this Python's pydoc topic texts (the language reference)
    prose.sha256[:12], len(prose.starts)

``prose`` is identical on every machine. ``code`` and ``docs`` are read at run
time from the interpreter's standard library, so they follow the Python
version; the hash tells two runs apart. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sysconfig
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from infermeter.errors import ConfigError

SOURCES = ("prose", "code", "docs")

# Prose starts: every word (a letter after whitespace or at the start).
_PROSE_START = re.compile(r"(?:(?<=\s)|^)(?=[^\W\d_])")
# Code starts: every line that is not blank.
_CODE_START = re.compile(r"^(?=[ ]*\S)", re.M)

# Standard-library files read for the code corpus, in this order, up to _CODE_BYTES.
_CODE_BYTES = 1_000_000
_CODE_SKIP = (
    "test", "idlelib", "lib2to3", "turtledemo", "__phello__", "site-packages", "pydoc_data", "ensurepip",
    "encodings", "_sysconfigdata", "_compat_pickle", "_aix_support", "config-",
)


@dataclass(frozen=True, slots=True)
class Corpus:
    """A text, the offsets where prompts may start, and the text's hash."""

    name: str
    text: str
    starts: tuple[int, ...]
    sha256: str

    def describe(self) -> dict[str, object]:
        return {"source": self.name, "sha256": self.sha256, "chars": len(self.text)}


def _make(name: str, text: str, pattern: re.Pattern[str]) -> Corpus:
    starts = tuple(m.start() for m in pattern.finditer(text) if m.start() < len(text))
    if not starts:
        raise ConfigError(f"text source {name!r}: found no place to start a prompt")
    return Corpus(name, text, starts, hashlib.sha256(text.encode()).hexdigest())


def _prose() -> Corpus:
    folder = resources.files("infermeter").joinpath("data", "prose")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt"))
    parts = [folder.joinpath(n).read_text(encoding="utf-8").strip() for n in names]
    text = "\n\n".join(p for p in parts if p)
    return _make("prose", text, _PROSE_START)


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _code() -> Corpus:
    root = _stdlib()
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith(_CODE_SKIP))
    files += sorted(
        p for p in root.glob("*/*.py") if not p.parent.name.startswith(_CODE_SKIP) and "test" not in p.parent.name
    )
    chunks: list[str] = []
    total = 0
    for path in files:
        try:
            src = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        src = src.replace("\t", "    ").strip("\n")
        if len(src) < 200:
            continue
        chunks.append(f"# file: {path.relative_to(root).as_posix()}\n{src}\n")
        total += len(src)
        if total >= _CODE_BYTES:
            break
    if not chunks:
        raise ConfigError(f"text source 'code': no readable .py files under {root}")
    return _make("code", "\n".join(chunks), _CODE_START)


def _docs() -> Corpus:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise ConfigError("text source 'docs': this Python has no pydoc_data; use 'prose'") from None
    text = "\n\n".join(topics[k].strip() for k in sorted(topics))
    return _make("docs", text, _PROSE_START)


@functools.cache
def load_corpus(name: str) -> Corpus:
    """Load one of :data:`SOURCES` (cached per process)."""
    if name == "prose":
        return _prose()
    if name == "code":
        return _code()
    if name == "docs":
        return _docs()
    raise ConfigError(f"text source {name!r}: expected one of {', '.join(SOURCES)}")
