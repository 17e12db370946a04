"""The tokenizer stored inside a GGUF model file, rebuilt as a ``tokenizers.Tokenizer``.

llama.cpp models carry their vocabulary in GGUF metadata; this reads it with
the ``gguf`` package (extra ``hf``) so ``--tokenizer model.gguf`` counts tokens
like the server that loaded the same file::

    tok = load_gguf_tokenizer(Path("qwen2.5-0.5b-q4_k_m.gguf"), "qwen2.5-0.5b-q4_k_m.gguf")
    tok.count("Hello world")

Two vocabulary kinds are supported:

* ``tokenizer.ggml.model = "gpt2"`` (byte-level BPE: Llama 3, Qwen, Mistral
  Nemo, GPT-2, ...): tokens and merges as stored; the pre-tokenizer regex is
  chosen from ``tokenizer.ggml.pre`` (known: gpt-2/default, llama-bpe/llama3,
  qwen2). An unknown ``pre`` falls back to the GPT-2 regex and is reported as
  ``"pre_tokenizer": "gpt-2 (fallback for ...)"`` in ``describe()``.
* ``"llama"`` (SentencePiece BPE: Llama 2, Mistral 7B, Gemma): merges are
  rebuilt from the token scores, spaces become "▁", a "▁" is prepended.

Other kinds raise ConfigError naming the file and the kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.workload.tokenizer import HFTokenizer, _tokenizers_module

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_REGEX = {
    "default": GPT2_REGEX,
    "gpt-2": GPT2_REGEX,
    "gpt2": GPT2_REGEX,
    "llama-bpe": LLAMA3_REGEX,
    "llama3": LLAMA3_REGEX,
    "smaug-bpe": LLAMA3_REGEX,
    "qwen2": QWEN2_REGEX,
}


def _field(reader: Any, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return None
    if hasattr(f, "contents"):
        return f.contents()
    # Older gguf releases: decode parts by hand.
    if len(f.data) == 1 and f.parts[f.data[0]].dtype.kind == "u" and f.parts[f.data[0]].dtype.itemsize == 1:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    values = [f.parts[i] for i in f.data]
    if values and values[0].dtype.kind == "u" and values[0].dtype.itemsize == 1 and len(f.data) > 1:
        return [bytes(v).decode("utf-8") for v in values]
    flat = [x for v in values for x in v.tolist()]
    return flat if len(flat) != 1 else flat[0]


def _bpe_gpt2(tk: Any, tokens: list[str], merges: list[str], pre: str | None) -> tuple[Any, str]:
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    model = tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    tok = tk.Tokenizer(model)
    regex = PRE_REGEX.get(pre or "default")
    label = pre or "default"
    if regex is None:
        regex, label = GPT2_REGEX, f"gpt-2 (fallback for {pre!r})"
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(regex), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = tk.decoders.ByteLevel()
    return tok, label


def _bpe_spm(tk: Any, tokens: list[str], scores: list[float], types: list[int] | None) -> Any:
    vocab = {t: i for i, t in enumerate(tokens)}
    # A merge (a, b) exists when a, b and a+b are all tokens; rank by the score of a+b (higher first).
    ranked = sorted(range(len(tokens)), key=lambda i: -scores[i])
    merges: list[tuple[str, str]] = []
    normal = set(range(len(tokens))) if types is None else {i for i, t in enumerate(types) if t in (1, 4)}
    for i in ranked:
        if i not in normal:
            continue
        piece = tokens[i]
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda ab: (vocab[ab[0]], vocab[ab[1]]))
        merges.extend(local)
    unk = next((i for i, t in enumerate(types or []) if t == 2), None)
    model = tk.models.BPE(
        vocab=vocab, merges=merges, unk_token=tokens[unk] if unk is not None else None,
        fuse_unk=True, byte_fallback=True,
    )
    tok = tk.Tokenizer(model)
    tok.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")])
    return tok


def load_gguf_tokenizer(path: Path, what: str) -> HFTokenizer:
    """Read the vocabulary of a GGUF file; ConfigError names the file when it cannot."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ConfigError(f"--tokenizer {what}: reading GGUF files needs the 'gguf' package; install infermeter[hf]") from None
    tk = _tokenizers_module(what)
    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:
        raise ConfigError(f"--tokenizer {what}: {path} is not a readable GGUF file ({exc})") from None
    kind = _field(reader, "tokenizer.ggml.model")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if not kind or not tokens:
        raise ConfigError(f"--tokenizer {what}: {path} holds no tokenizer (tokenizer.ggml.model/tokens missing)")
    if kind == "gpt2":
        merges = _field(reader, "tokenizer.ggml.merges") or []
        tok, label = _bpe_gpt2(tk, list(tokens), list(merges), _field(reader, "tokenizer.ggml.pre"))
    elif kind == "llama":
        scores = _field(reader, "tokenizer.ggml.scores")
        if not scores:
            raise ConfigError(f"--tokenizer {what}: {path} has a 'llama' vocabulary without scores")
        types = _field(reader, "tokenizer.ggml.token_type")
        tok, label = _bpe_spm(tk, list(tokens), [float(s) for s in scores], types), "sentencepiece"
    else:
        raise ConfigError(f"--tokenizer {what}: GGUF vocabulary kind {kind!r} is not supported (gpt2, llama are)")
    name = _field(reader, "general.name") or path.stem
    out = HFTokenizer(tok, name=str(name), kind="gguf", source=str(path))
    out.extra = {"gguf_model": kind, "pre_tokenizer": label}
    return out
