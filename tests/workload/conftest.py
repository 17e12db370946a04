"""Small real tokenizers, trained here with the `tokenizers` library on the shipped prose.

Each fixture saves a tokenizer.json so tests exercise the same path as
``--tokenizer path/to/tokenizer.json``. Kinds cover the pre-tokenizer
families used by served models: byte-level BPE (GPT-2), a Llama-3 style regex
split + byte-level BPE, SentencePiece-style Metaspace BPE and Unigram, and
BERT WordPiece.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from infermeter.workload.corpus import load_corpus  # noqa: E402

LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _train_text() -> list[str]:
    prose = load_corpus("prose").text
    return [p for p in prose.split("\n\n") if p]


def _byte_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _train_text(),
        trainers.BpeTrainer(vocab_size=1200, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    return tok


def _llama3_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _train_text(),
        trainers.BpeTrainer(vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    return tok


def _metaspace_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.train_from_iterator(
        _train_text(), trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>"], show_progress=False)
    )
    return tok


def _unigram() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(
        _train_text(),
        trainers.UnigramTrainer(vocab_size=700, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False),
    )
    return tok


def _wordpiece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        _train_text(), trainers.WordPieceTrainer(vocab_size=800, special_tokens=["[UNK]"], show_progress=False)
    )
    return tok


BUILDERS = {
    "byte-bpe": _byte_bpe,
    "llama3-bpe": _llama3_bpe,
    "metaspace-bpe": _metaspace_bpe,
    "unigram": _unigram,
    "wordpiece": _wordpiece,
}


@pytest.fixture(scope="session")
def tokenizer_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """kind -> path of a saved tokenizer.json (trained once per test session)."""
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for kind, build in BUILDERS.items():
        folder = root / kind
        folder.mkdir()
        path = folder / "tokenizer.json"
        build().save(str(path))
        out[kind] = path
    return out
