"""Dataset loaders: every format reads, traces keep their arrival times, malformed files name file and line."""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import types
from pathlib import Path

import pytest

from infermeter.errors import ConfigError, DataError
from infermeter.workload import build_workload
from infermeter.workload.tokenizer import ApproxTokenizer

TOK = ApproxTokenizer()


def take(n: int, path: Path, **kw):  # type: ignore[no-untyped-def]
    return list(itertools.islice(build_workload(dataset=str(path), **kw).requests(), n))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


SHAREGPT = [
    {"id": "a", "conversations": [
        {"from": "human", "value": "Hello there, how are you today?"},
        {"from": "gpt", "value": "I am fine, thank you. How can I help you?"},
        {"from": "human", "value": "Tell me a joke about bread."},
        {"from": "gpt", "value": "Why did the baker stop? He kneaded a break."},
    ]},
    {"id": "b", "conversations": [
        {"from": "system", "value": "You are terse."},
        {"from": "human", "value": "What is two plus two?"},
        {"from": "gpt", "value": "Four."},
    ]},
]


def test_sharegpt_all_turns(tmp_path: Path) -> None:
    path = write(tmp_path, "sg.json", json.dumps(SHAREGPT, indent=1))
    specs = take(4, path, overrides={"active_conversations": 1})
    a1, a2, b1, again = specs
    assert [m["content"] for m in a1.messages] == ["Hello there, how are you today?"]
    assert a1.max_tokens == TOK.count("I am fine, thank you. How can I help you?")  # the file's own reply
    assert [m["role"] for m in a2.messages] == ["user", "assistant", "user"]
    assert a2.messages[:1] == a1.messages and a2.messages[1]["content"].startswith("I am fine")
    assert a2.input_tokens == sum(TOK.count(m["content"]) for m in a2.messages)
    assert [m["role"] for m in b1.messages] == ["system", "user"] and b1.max_tokens == TOK.count("Four.")
    assert again.messages == a1.messages  # the file loops
    assert len({a1.conversation_id, a2.conversation_id}) == 1 and b1.conversation_id != a1.conversation_id
    first = take(3, path, overrides={"turns": "first"})
    assert [s.messages[-1]["content"] for s in first] == [
        "Hello there, how are you today?", "What is two plus two?", "Hello there, how are you today?",
    ]


def test_inference_benchmarker_format_gets_written_replies(tmp_path: Path) -> None:
    # share_gpt_turns.json / classification.json / github_code.json: role/content, user turns only.
    data = [{"id": "x", "conversations": [
        {"role": "user", "content": "Summarise the text below."},
        {"role": "user", "content": "Now say it in one sentence."},
    ]}]
    path = write(tmp_path, "share_gpt_turns.json", json.dumps(data))
    first, second = take(2, path, output_tokens="40", overrides={"active_conversations": 1})
    assert first.max_tokens == 40
    reply = second.messages[1]
    assert reply["role"] == "assistant" and TOK.count(reply["content"]) == 40
    assert second.input_tokens == first.input_tokens + 40 + TOK.count("Now say it in one sentence.")


def test_jsonl_requests(tmp_path: Path) -> None:
    path = write(tmp_path, "req.jsonl", "\n".join([
        json.dumps({"prompt": "Write a haiku about rain.", "max_tokens": 30}),
        "",
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}),
    ]))
    s1, s2, s3 = take(3, path)
    assert s1.messages == ({"role": "user", "content": "Write a haiku about rain."},) and s1.max_tokens == 30
    assert s1.input_tokens == TOK.count("Write a haiku about rain.")
    assert [m["role"] for m in s2.messages] == ["system", "user"] and s2.max_tokens == 128  # default
    assert s3.messages == s1.messages and s3.conversation_id is None
    c1, c2 = take(2, path, api="completions", output_tokens="7")
    assert c1.prompt == "Write a haiku about rain." and c1.messages is None and c1.max_tokens == 7
    assert c2.prompt == "Be brief.\n\nHi" and c2.input_tokens == TOK.count("Be brief.\n\nHi")


def test_json_array_of_prompts_and_shuffle(tmp_path: Path) -> None:
    prompts = [f"Question number {w} about the river." for w in ("one", "two", "three", "four", "five", "six")]
    path = write(tmp_path, "p.json", json.dumps([{"prompt": p} for p in prompts]))
    assert [s.messages[0]["content"] for s in take(6, path)] == prompts
    shuffled = [s.messages[0]["content"] for s in take(12, path, overrides={"shuffle": True}, seed=1)]
    assert sorted(shuffled[:6]) == sorted(prompts) and sorted(shuffled[6:]) == sorted(prompts)
    assert shuffled[:6] != prompts


def test_input_filters(tmp_path: Path) -> None:
    path = write(tmp_path, "f.jsonl", "\n".join(json.dumps({"prompt": "word " * k + "end"}) for k in (2, 20, 200)))
    kept = {s.input_tokens for s in take(6, path, overrides={"min_input_tokens": 10, "max_input_tokens": 100})}
    assert kept == {21}
    with pytest.raises(DataError, match="min_input_tokens/max_input_tokens"):
        take(1, path, overrides={"min_input_tokens": 5000})


def test_burstgpt_csv_trace(tmp_path: Path) -> None:
    path = write(tmp_path, "burst.csv", (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5.0,ChatGPT,120,30,150,Conversation log\n"
        "7.25,GPT-4,40,12,52,API log\n"
        "5.5,ChatGPT,300,0,300,Conversation log\n"
    ))
    specs = take(10, path)
    assert [s.arrival_s for s in specs] == [0.0, 0.5, 2.25]  # sorted, offsets from the first arrival
    assert [s.input_tokens for s in specs] == [120, 300, 40]
    assert [s.max_tokens for s in specs] == [30, 1, 12]  # a 0-token response becomes 1
    assert [TOK.count(s.messages[0]["content"]) for s in specs] == [120, 300, 40]
    d = build_workload(dataset=str(path)).describe()["dataset"]
    assert d["format"] == "csv" and d["trace"] is True and d["entries"] == 3
    assert d["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    ms = take(3, path, overrides={"time_unit": "ms"})
    assert [s.arrival_s for s in ms] == pytest.approx([0.0, 0.0005, 0.00225])


def test_csv_with_prompts_and_arrival_ms(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", 'arrival_ms,prompt,max_tokens\n1000,"Hello, world",5\n1250,Second one,6\n')
    a, b = take(5, path)
    assert (a.arrival_s, b.arrival_s) == (0.0, 0.25)
    assert a.messages[0]["content"] == "Hello, world" and a.input_tokens == 3 and b.max_tokens == 6


def test_mooncake_hash_ids_share_exact_blocks(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 1000, "input_length": 1200, "output_length": 20, "hash_ids": [7, 8, 9]},
        {"timestamp": 1500, "input_length": 1100, "output_length": 10, "hash_ids": [7, 8, 4]},
        {"timestamp": 2500, "input_length": 600, "output_length": 10, "hash_ids": [5, 6]},
    ]
    path = write(tmp_path, "mooncake.jsonl", "\n".join(json.dumps(r) for r in rows))
    a, b, c = take(5, path, overrides={"block_tokens": 512})
    assert [s.arrival_s for s in (a, b, c)] == [0.0, 0.5, 1.5]  # Mooncake timestamps are milliseconds
    ta, tb = a.messages[0]["content"], b.messages[0]["content"]
    assert [TOK.count(s.messages[0]["content"]) for s in (a, b, c)] == [1200, 1100, 600]
    n = 0
    while ta[n] == tb[n]:
        n += 1
    assert TOK.count(ta[:n].rstrip()) == 1024  # exactly the two shared blocks
    assert c.messages[0]["content"][:50] != ta[:50]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c",\n', "bad.jsonl:3: invalid JSON"),
        ("bad.json", '[\n {"conversations": [{"from": "human", "value": "x"}]},\n\n {"conversations": [\n'
         '   {"from": "human"}]}\n]', "bad.json:4 (conversations[0]): missing text"),
        ("role.json", '[{"conversations": [{"from": "robot", "value": "x"}]}]', "role.json:1 (conversations[0]): unknown"),
        ("syntax.json", '[\n {"prompt": "a"},\n {"prompt": "b"\n]', "syntax.json:4: invalid JSON"),
        ("trailing.json", '[{"prompt": "a"}] extra', "unexpected text after the JSON array"),
        ("nothing.jsonl", '{"prompt": "a"}\n{"foo": 1}\n', "nothing.jsonl:2: no request in this object"),
        ("maxtok.jsonl", '{"prompt": "a", "max_tokens": -3}\n', "maxtok.jsonl:1: 'max_tokens' must be a whole number"),
        ("huge.jsonl", '{"prompt": "a"}\n{"prompt": "a", "max_tokens": 1e300}\n',
         "huge.jsonl:2: 'max_tokens' must be a whole number from 1 to 10,000,000, got 1e+300"),
        ("inf.jsonl", '{"prompt": "a", "max_tokens": Infinity}\n', "inf.jsonl:1: 'max_tokens' must be a whole number"),
        ("nan.jsonl", '{"input_length": NaN}\n', "nan.jsonl:1: 'input_length' must be a whole number"),
        ("inf.csv", "input_tokens,output_tokens\n10,inf\n", "inf.csv:2: column 'output_tokens' must be a whole number"),
        ("big.csv", "input_tokens,output_tokens\n10,1e300\n", "big.csv:2: column 'output_tokens' must be a whole number"),
        ("empty.jsonl", "\n\n", "empty.jsonl: holds no requests"),
        ("cols.csv", "timestamp,input_tokens\n1,10\n2,20,30\n", "cols.csv:3: 3 columns, the header has 2"),
        ("num.csv", "Timestamp,Request tokens\n1,10\n2,ten\n", "num.csv:3: column 'request tokens' must be a number"),
        ("hdr.csv", "a,b\n1,2\n", "hdr.csv:1: the header needs an input length column"),
        ("mixed.jsonl", '{"arrival_s": 0, "prompt": "a"}\n{"prompt": "b"}\n', "mixed.jsonl:2: no arrival time"),
        ("prose.txt", "just some words", "prose.txt:1: expected a JSON array, JSON lines or a CSV"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(DataError) as err:
        build_workload(dataset=str(path))
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))


def test_not_utf8_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        build_workload(dataset=str(path))
    with pytest.raises(DataError, match="--dataset ./missing.jsonl: no such file"):
        build_workload(dataset="./missing.jsonl")


def test_mooncake_row_too_short_for_its_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1, 2, 3]}\n')
    with pytest.raises(DataError, match=r"m.jsonl:1: input_length 100 is too short for 3 hash_ids"):
        take(1, path)


def test_dataset_option_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "ok.jsonl", '{"prompt": "a"}\n')
    with pytest.raises(ConfigError, match="override 'questions': not a dataset option"):
        build_workload(dataset=str(path), overrides={"questions": 3})
    with pytest.raises(ConfigError, match="--input-tokens applies to profiles"):
        build_workload(dataset=str(path), input_tokens="100")
    with pytest.raises(ConfigError, match="turns"):
        build_workload(dataset=str(path), overrides={"turns": "some"})


# -- Hugging Face Hub --------------------------------------------------------------------


class FakeHubDataset(list):
    column_names = ["id", "problem", "solution", "answer", "url"]
    _fingerprint = "f00d"


def _fake_datasets(monkeypatch: pytest.MonkeyPatch, load) -> list:  # type: ignore[no-untyped-def]
    calls: list = []
    module = types.ModuleType("datasets")

    def load_dataset(name: str, split: str):  # type: ignore[no-untyped-def]
        calls.append((name, split))
        return load(name, split)

    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    return calls


def test_hub_dataset_like_aimo(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = FakeHubDataset([
        {"id": 1, "problem": "Find x if 2x = 10.", "solution": "Divide both sides by two, so x = 5.", "answer": "5", "url": ""},
        {"id": 2, "problem": "What is 3 + 4?", "solution": "Seven.", "answer": "7", "url": ""},
    ])
    calls = _fake_datasets(monkeypatch, lambda name, split: rows)
    wl = build_workload(dataset="AI-MO/aimo-validation-aime")
    s1, s2, s3 = itertools.islice(wl.requests(), 3)
    assert calls == [("AI-MO/aimo-validation-aime", "train")]
    assert s1.messages[0]["content"] == "Find x if 2x = 10." and s1.max_tokens == TOK.count(rows[0]["solution"])
    assert s2.max_tokens == TOK.count("Seven.") and s3.messages == s1.messages
    d = wl.describe()["dataset"]
    assert d["format"] == "hf-hub" and d["prompt_field"] == "problem" and d["sha256"] == "f00d"
    assert build_workload(dataset="hf:AI-MO/aimo-validation-aime", output_tokens="9").describe()["dataset"]["rows"] == 2


def test_hub_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(name: str, split: str):  # type: ignore[no-untyped-def]
        raise ConnectionError("Couldn't reach 'AI-MO/aimo-validation-aime' on the Hub (LocalEntryNotFoundError)")

    _fake_datasets(monkeypatch, offline)
    with pytest.raises(DataError) as err:
        build_workload(dataset="AI-MO/aimo-validation-aime")
    msg = str(err.value)
    assert msg.startswith("--dataset AI-MO/aimo-validation-aime: could not load split 'train'")
    assert "Hugging Face Hub" in msg and "ConnectionError" in msg and "local file" in msg


def test_hub_without_datasets_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
    with pytest.raises(DataError, match=r"need the 'datasets' package \(pip install 'infermeter\[hf\]'\)"):
        build_workload(dataset="AI-MO/aimo-validation-aime")


def test_hub_without_prompt_column(monkeypatch: pytest.MonkeyPatch) -> None:
    class Odd(list):
        column_names = ["a", "b"]

    _fake_datasets(monkeypatch, lambda name, split: Odd([{"a": 1, "b": 2}]))
    with pytest.raises(DataError, match="found no prompt column .* columns: a, b; set the prompt_field option"):
        build_workload(dataset="org/odd")
