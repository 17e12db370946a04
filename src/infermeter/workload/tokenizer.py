"""Token counting in the served model's tokenizer, or a built-in approximation offline.

The one place that turns ``--tokenizer`` into something that counts tokens::

    tok = load_tokenizer(None)                      # built-in "infermeter-approx-v1"
    tok.count("Hello, world!")                      # 4
    tok = load_tokenizer("models/llama/tokenizer.json")   # exact, via `tokenizers`
    tok = load_tokenizer("Qwen/Qwen2.5-7B-Instruct")      # Hub id (extra "hf"; cache or online)
    tok = load_tokenizer("model-q4.gguf")                 # vocabulary stored in a GGUF file

Every tokenizer counts text *without* special tokens (no BOS, no chat
template): that is the part of the prompt the workload controls.

``--tokenizer`` accepts a ``tokenizer.json`` file, a Hugging Face model folder
(``tokenizer.json``, else ``transformers``), a ``.gguf`` file or a folder holding
one, or a Hub id. The default, :class:`ApproxTokenizer`, needs no files: it
splits text like byte-level BPE pre-tokenizers do (a word with its leading
space, digit groups of three, punctuation runs, whitespace runs) and counts a
word of up to 8 letters as one token. On English prose this lands near the
~4 characters per token of 100k+ vocabularies; it is an approximation, and
docs/workloads.md says how far it can be off.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from pathlib import Path
from typing import Any, Protocol

from infermeter.errors import ConfigError

APPROX_NAME = "infermeter-approx-v1"

# Word (letters and underscores) with an optional leading space, a contraction,
# groups of up to three digits, punctuation runs, line breaks with the
# whitespace before them, other whitespace runs (the last space before a word
# stays with the word), as in Llama-3/cl100k-style pre-tokenizers.
_PIECES = re.compile(r"'(?:s|t|re|ve|m|ll|d)\b| ?[^\W\d]+| ?\d{1,3}| ?[^\s\w]+|\s*[\r\n]+|\s+(?!\S)|\s+")


class Tokenizer(Protocol):
    """Counts tokens; ``token_starts`` gives the character offset where each token begins."""

    name: str

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: list[str]) -> list[int]: ...

    def token_starts(self, text: str) -> list[int]: ...

    def describe(self) -> dict[str, Any]: ...


def _approx_piece_tokens(piece: str) -> int:
    body = piece[1:] if piece[0] == " " and len(piece) > 1 else piece
    first = body[0]
    if first.isspace():
        return -(-len(body) // 8)
    if first.isdigit() or first == "'":
        return 1
    if first.isalpha() or first == "_":
        if body.isascii():
            return max(1, -(-len(body) // 8) + body.count("_") // 2)
        wide = sum(1 for ch in body if not ch.isascii())
        return max(1, wide + -(-(len(body) - wide) // 8))
    return -(-len(body) // 2)


class ApproxTokenizer:
    """Pure-Python, deterministic stand-in for a BPE tokenizer (no files, no downloads)."""

    name = APPROX_NAME

    def count(self, text: str) -> int:
        return sum(_approx_piece_tokens(m) for m in _PIECES.findall(text))

    def count_batch(self, texts: list[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def token_starts(self, text: str) -> list[int]:
        starts: list[int] = []
        for m in _PIECES.finditer(text):
            n = _approx_piece_tokens(m.group())
            starts.extend([m.start()] * n)
        return starts

    def encode(self, text: str) -> list[int]:
        """Stable ids (a hash of each piece) for hashing and tests; there is no decode."""
        ids: list[int] = []
        for piece in _PIECES.findall(text):
            ids.extend([zlib.crc32(piece.encode()) & 0x1FFFF] * _approx_piece_tokens(piece))
        return ids

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "approx", "source": None, "hash": None, "exact_for_model": False}


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` (what every fast HF tokenizer wraps); counts are exact."""

    def __init__(self, tok: Any, *, name: str, kind: str, source: str) -> None:
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        self.name = name
        self.kind = kind
        self.source = source
        self._hash: str | None = None
        self.extra: dict[str, Any] = {}

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def token_starts(self, text: str) -> list[int]:
        return [s for s, _ in self._tok.encode(text, add_special_tokens=False).offsets]

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def describe(self) -> dict[str, Any]:
        if self._hash is None:
            self._hash = hashlib.sha256(self._tok.to_str().encode()).hexdigest()[:16]
        out = {"name": self.name, "kind": self.kind, "source": self.source, "hash": self._hash, "exact_for_model": True}
        return {**out, **self.extra}


def _tokenizers_module(what: str) -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(
            f"--tokenizer {what}: reading it needs the 'tokenizers' package; install infermeter[hf]"
        ) from None
    return tokenizers


def _from_json(path: Path, what: str, kind: str = "tokenizer.json") -> HFTokenizer:
    tokenizers = _tokenizers_module(what)
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise ConfigError(f"--tokenizer {what}: {path} is not a valid tokenizer.json ({exc})") from None
    name = path.parent.name if path.name == "tokenizer.json" else path.stem
    return HFTokenizer(tok, name=name or str(path), kind=kind, source=str(path))


def _from_transformers(ref: str, what: str, kind: str) -> HFTokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError(
            f"--tokenizer {what}: no tokenizer.json there, and converting other formats needs "
            "'transformers'; install infermeter[hf]"
        ) from None
    try:
        hf = AutoTokenizer.from_pretrained(ref, use_fast=True)
    except Exception as exc:
        raise ConfigError(f"--tokenizer {what}: transformers could not load it ({exc})") from None
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(f"--tokenizer {what}: only a slow (Python) tokenizer exists; infermeter needs a fast one")
    return HFTokenizer(backend, name=Path(ref).name or ref, kind=kind, source=ref)


def _from_folder(path: Path, what: str) -> Tokenizer:
    if (path / "tokenizer.json").is_file():
        return _from_json(path / "tokenizer.json", what, kind="hf-folder")
    ggufs = sorted(path.glob("*.gguf"))
    if ggufs and not (path / "tokenizer_config.json").is_file():
        from infermeter.workload.gguf_vocab import load_gguf_tokenizer

        return load_gguf_tokenizer(ggufs[0], what)
    if (path / "tokenizer_config.json").is_file() or (path / "tokenizer.model").is_file():
        return _from_transformers(str(path), what, kind="hf-folder")
    raise ConfigError(f"--tokenizer {what}: folder has no tokenizer.json, tokenizer.model or .gguf file")


def _from_hub(repo: str) -> HFTokenizer:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ConfigError(f"--tokenizer {repo}: Hub ids need the 'hf' extra; install infermeter[hf]") from None
    try:
        path = hf_hub_download(repo, "tokenizer.json")
    except Exception as exc:
        kind = type(exc).__name__
        if kind in ("EntryNotFoundError", "RemoteEntryNotFoundError"):
            return _from_transformers(repo, repo, kind="hub")
        raise ConfigError(
            f"--tokenizer {repo}: could not get tokenizer.json from the Hugging Face Hub or its cache "
            f"({kind}); pass a local tokenizer.json, model folder or .gguf file when offline"
        ) from None
    tok = _from_json(Path(path), repo, kind="hub")
    tok.name, tok.source = repo, repo
    return tok


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def load_tokenizer(ref: str | None) -> Tokenizer:
    """Resolve ``--tokenizer``: None (built-in), a file, a folder or a Hub id."""
    if ref is None or ref in ("", "approx", APPROX_NAME):
        return ApproxTokenizer()
    path = Path(os.path.expanduser(ref))
    if path.is_dir():
        return _from_folder(path, ref)
    if path.is_file():
        if path.suffix == ".gguf":
            from infermeter.workload.gguf_vocab import load_gguf_tokenizer

            return load_gguf_tokenizer(path, ref)
        return _from_json(path, ref)
    if _HUB_ID.match(ref) and not ref.endswith((".json", ".gguf")):
        return _from_hub(ref)
    raise ConfigError(f"--tokenizer {ref}: no such file or folder, and not a Hugging Face Hub id (owner/name)")
