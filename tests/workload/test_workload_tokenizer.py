"""Tokenizers: the built-in approximation, tokenizer.json files and folders, GGUF vocabularies, Hub ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from infermeter.errors import ConfigError
from infermeter.workload.corpus import load_corpus
from infermeter.workload.tokenizer import APPROX_NAME, ApproxTokenizer, load_tokenizer


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, world!", 4),  # Hello | , | ␣world | !
        ("internationalization", 3),  # 20 letters: ceil(20/8)
        ("x = 12345", 4),  # x | ␣= | ␣123 | 45
        ("don't", 2),  # don | 't
        ("    return x", 3),  # ␣␣␣ | ␣return | ␣x
        ("snake_case_name", 3),  # 15 chars -> 2, plus one per two underscores
        ("你好世界", 4),  # one per non-ASCII letter
        ("a\n\nb", 3),
        ("", 0),
    ],
)
def test_approx_counts(text: str, tokens: int) -> None:
    tok = ApproxTokenizer()
    assert tok.count(text) == tokens
    assert len(tok.token_starts(text)) == tokens
    assert len(tok.encode(text)) == tokens


def test_approx_is_additive_at_word_boundaries() -> None:
    tok = ApproxTokenizer()
    a, b = "The mill stopped (in 1901).", " Then the town"
    assert tok.count(a + b) == tok.count(a) + tok.count(b)


def test_approx_density_on_prose_is_bpe_like() -> None:
    # ~4-5 characters per token on English prose, as 100k+ BPE vocabularies give.
    text = load_corpus("prose").text
    assert 4.0 < len(text) / ApproxTokenizer().count(text) < 5.0


def test_default_is_approx() -> None:
    for ref in (None, "", "approx", APPROX_NAME):
        assert load_tokenizer(ref).name == APPROX_NAME
    assert load_tokenizer(None).describe()["exact_for_model"] is False


def test_json_file_and_folder(tokenizer_files: dict[str, Path]) -> None:
    path = tokenizer_files["byte-bpe"]
    ref = Tokenizer.from_file(str(path))
    text = "The keeper kept a log, and the log is almost all that remains."
    expected = len(ref.encode(text, add_special_tokens=False).ids)
    by_file = load_tokenizer(str(path))
    by_folder = load_tokenizer(str(path.parent))
    assert by_file.count(text) == by_folder.count(text) == expected
    assert by_folder.describe()["kind"] == "hf-folder"
    assert by_file.describe()["hash"] == by_folder.describe()["hash"]


def test_special_tokens_are_not_counted(tmp_path: Path, tokenizer_files: dict[str, Path]) -> None:
    from tokenizers import processors

    tok = Tokenizer.from_file(str(tokenizer_files["wordpiece"]))
    tok.add_special_tokens(["[CLS]", "[SEP]"])
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.enable_truncation(4)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    loaded = load_tokenizer(str(path))
    text = "the bees dance on the comb in the dark hive"
    assert loaded.count(text) == len(Tokenizer.from_file(str(tokenizer_files["wordpiece"])).encode(text).ids)
    assert loaded.count(text) > 4  # truncation from the file is switched off


def test_missing_path_names_it() -> None:
    with pytest.raises(ConfigError, match=r"--tokenizer ./nope/tokenizer.json: no such file"):
        load_tokenizer("./nope/tokenizer.json")


def test_broken_json_names_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="is not a valid tokenizer.json"):
        load_tokenizer(str(bad))


def test_empty_folder_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="folder has no tokenizer.json"):
        load_tokenizer(str(tmp_path))


def test_hub_id_offline_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")

    class LocalEntryNotFoundError(Exception):
        pass

    def offline(repo: str, filename: str) -> str:
        raise LocalEntryNotFoundError("Connection error, and we cannot find the file in the cache")

    monkeypatch.setattr(hub, "hf_hub_download", offline)
    with pytest.raises(ConfigError) as err:
        load_tokenizer("someorg/some-model")
    msg = str(err.value)
    assert msg.startswith("--tokenizer someorg/some-model:")
    assert "Hugging Face Hub" in msg and "offline" in msg


def test_hub_id_from_cache(monkeypatch: pytest.MonkeyPatch, tokenizer_files: dict[str, Path]) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub, "hf_hub_download", lambda repo, filename: str(tokenizer_files["unigram"]))
    tok = load_tokenizer("someorg/some-model")
    assert tok.describe()["kind"] == "hub" and tok.describe()["source"] == "someorg/some-model"


# -- GGUF -------------------------------------------------------------------------------


def _write_gguf(path: Path, kind: str, tokens: list[str], **kv: object) -> None:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(kind)
    if kv.get("pre"):
        w.add_tokenizer_pre(kv["pre"])
    w.add_token_list(tokens)
    if kv.get("merges") is not None:
        w.add_token_merges(kv["merges"])
    if kv.get("scores") is not None:
        w.add_token_scores(kv["scores"])
    if kv.get("types") is not None:
        w.add_token_types(kv["types"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _vocab(path: Path) -> tuple[list[str], list[str]]:
    model = json.loads(path.read_text())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, merges


@pytest.mark.parametrize(("kind", "pre"), [("byte-bpe", "default"), ("llama3-bpe", "llama-bpe")])
def test_gguf_bpe_vocab_counts_like_its_source(
    tmp_path: Path, tokenizer_files: dict[str, Path], kind: str, pre: str
) -> None:
    tokens, merges = _vocab(tokenizer_files[kind])
    path = tmp_path / "model.gguf"
    _write_gguf(path, "gpt2", tokens, merges=merges, pre=pre)
    ref = Tokenizer.from_file(str(tokenizer_files[kind]))
    tok = load_tokenizer(str(path))
    text = load_corpus("prose").text
    assert tok.count(text) == len(ref.encode(text, add_special_tokens=False).ids)
    assert tok.describe()["kind"] == "gguf" and tok.describe()["pre_tokenizer"] == pre
    assert load_tokenizer(str(tmp_path)).count(text) == tok.count(text)  # folder holding a .gguf


def test_gguf_sentencepiece_vocab(tmp_path: Path, tokenizer_files: dict[str, Path]) -> None:
    tokens, _ = _vocab(tokenizer_files["metaspace-bpe"])
    scores = [-float(i) for i in range(len(tokens))]  # merge order, as SentencePiece BPE scores are
    types = [2 if t == "<unk>" else 1 for t in tokens]
    path = tmp_path / "spm.gguf"
    _write_gguf(path, "llama", tokens, scores=scores, types=types)
    ref = Tokenizer.from_file(str(tokenizer_files["metaspace-bpe"]))
    tok = load_tokenizer(str(path))
    for para in load_corpus("prose").text.split("\n\n")[:12]:
        assert tok.count(para) == len(ref.encode(para, add_special_tokens=False).ids)


def test_gguf_unknown_kind_and_no_vocab(tmp_path: Path) -> None:
    path = tmp_path / "bert.gguf"
    _write_gguf(path, "bert", ["[UNK]", "a"])
    with pytest.raises(ConfigError, match="GGUF vocabulary kind 'bert' is not supported"):
        load_tokenizer(str(path))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ConfigError, match="not a readable GGUF file"):
        load_tokenizer(str(junk))
