"""Profiles: lengths match their specs (fixed seeds), prefixes are shared exactly as promised,
same seed gives byte-identical requests, and overrides are checked field by field.

Expected means below are of round(Normal(mean, sd)) clamped to [min, max], computed once from
the normal CDF: E = sum_k k * P(k - 1/2 < X < k + 1/2) with the clamped tails at the bounds.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from dataclasses import asdict
from typing import Any

import numpy as np
import pytest

from infermeter.errors import ConfigError
from infermeter.workload import build_workload
from infermeter.workload.reuse import ideal_prefix_reuse, request_text
from infermeter.workload.tokenizer import ApproxTokenizer

TOK = ApproxTokenizer()


def take(n: int, **kw):  # type: ignore[no-untyped-def]
    return list(itertools.islice(build_workload(**kw).requests(), n))


def test_synthetic_default_is_200_in_100_out() -> None:
    specs = take(500)
    assert {(s.input_tokens, s.max_tokens) for s in specs} == {(200, 100)}
    assert build_workload().describe()["profile"] == "synthetic"


def test_synthetic_lengths_follow_flags() -> None:
    specs = take(4000, input_tokens="512,128,1,1024", output_tokens="128,32,16,256", seed=1)
    ins = np.array([s.input_tokens for s in specs])
    outs = np.array([s.max_tokens for s in specs])
    assert abs(ins.mean() - 512) < 7 and abs(ins.std() - 128) < 6  # 3 standard errors
    assert abs(outs.mean() - 128) < 2 and abs(outs.std() - 32) < 2
    assert ins.min() >= 1 and ins.max() <= 1024 and outs.min() >= 16 and outs.max() <= 256


def test_fixed_profile() -> None:
    specs = take(3000, profile="fixed", seed=2)
    assert {s.input_tokens for s in specs} == {200}
    outs = np.array([s.max_tokens for s in specs])
    # Normal(800, 100) clamped to [50, 800]: E = 800 - 100/sqrt(2 pi) = 760.11; half the draws at 800.
    assert abs(outs.mean() - 760.11) < 4
    assert abs((outs == 800).mean() - 0.5) < 0.03


def test_code_profile_lengths_and_text() -> None:
    specs = take(500, profile="code", seed=3)
    ins = np.array([s.input_tokens for s in specs])
    # Normal(4096, 1000) clamped to [3000, 6000]: E = 4154.2; P(3000) = 0.1366.
    assert abs(ins.mean() - 4154.2) < 120
    assert abs((ins == 3000).mean() - 0.1366) < 0.05
    assert ins.min() == 3000 and ins.max() <= 6000
    outs = np.array([s.max_tokens for s in specs])
    assert abs(outs.mean() - 50.08) < 1.5 and outs.min() >= 30 and outs.max() <= 80
    text = specs[0].messages[0]["content"]
    assert text.rstrip().endswith("reply with code only.")
    assert "def " in "".join(s.messages[0]["content"] for s in specs[:20])


def test_classification_lengths() -> None:
    specs = take(
        1500, profile="classification", seed=4,
        overrides={"questions_per_document": 1, "question_tokens": "20"},
    )
    docs = np.array([s.input_tokens - 20 for s in specs])
    # Normal(10000, 5000) clamped to [8000, 12000]: symmetric, E = 10000, P(8000) = P(12000) = 0.3446.
    assert abs(docs.mean() - 10000) < 130
    assert abs((docs == 8000).mean() - 0.3446) < 0.04
    assert abs((docs == 12000).mean() - 0.3446) < 0.04
    questions = take(3000, profile="classification", seed=5, overrides={"document_tokens": "100"})
    q = np.array([s.input_tokens - 100 for s in questions])
    assert abs(q.mean() - 30.13) < 0.5 and q.min() >= 16 and q.max() <= 60  # E of (30, 8, 16, 60)
    outs = np.array([s.max_tokens for s in questions])
    assert abs(outs.mean() - 50.08) < 0.6


def test_classification_documents_are_asked_q_times() -> None:
    specs = take(400, profile="classification", seed=6, overrides={"document_tokens": "300", "questions_per_document": 7})
    by_doc = defaultdict(list)
    for s in specs:
        by_doc[s.prefix_group].append(request_text(s))
    complete = [texts for doc, texts in by_doc.items() if doc < 40]
    assert all(len(texts) == 7 for texts in complete)
    for texts in complete:
        asked = next(t for t in texts if " Question:" in t)
        doc = asked[: asked.index(" Question:")]
        assert all(t.startswith(doc) for t in texts)
        assert TOK.count(doc.removeprefix("<|user|>")) == 300


def test_chat_turns_and_history() -> None:
    specs = take(5000, profile="chat", seed=7)
    by_conv = defaultdict(list)
    for s in specs:
        by_conv[s.conversation_id].append(s)
    turns = np.array([len(by_conv[c]) for c in range(300)])
    assert abs(turns.mean() - 5.115) < 0.6 and turns.min() >= 1 and turns.max() <= 12
    users = np.array([TOK.count(s.messages[-1]["content"]) for s in specs])
    assert abs(users.mean() - 123.1) < 4  # E of (120, 80, 10, 600)
    for conv in list(by_conv.values())[:200]:
        for prev, nxt in itertools.pairwise(conv):
            k = len(prev.messages)
            assert nxt.messages[:k] == prev.messages  # history resent verbatim
            assert nxt.messages[k]["role"] == "assistant"
            assert TOK.count(nxt.messages[k]["content"]) == prev.max_tokens  # reply as long as asked
            assert nxt.input_tokens == prev.input_tokens + prev.max_tokens + TOK.count(nxt.messages[-1]["content"])


def test_chat_context_limit_and_system_prompt() -> None:
    specs = take(800, profile="chat", seed=8, overrides={"max_context_tokens": 1500, "system_tokens": 50})
    assert max(s.input_tokens for s in specs) <= 1500
    systems = {s.messages[0]["content"] for s in specs}
    assert len(systems) == 1 and TOK.count(systems.pop()) == 50


# -- shared prefixes ---------------------------------------------------------------------


def test_synthetic_prefix_groups_share_exactly_the_prefix() -> None:
    specs = take(1200, input_tokens="400", prefix_tokens=100, prefix_groups=4, seed=9, api="completions")
    groups = Counter(s.prefix_group for s in specs)
    assert set(groups) == {0, 1, 2, 3} and min(groups.values()) > 250
    prefixes = {}
    for s in specs:
        prefixes.setdefault(s.prefix_group, s.prompt)
        common = prefixes[s.prefix_group]
        n = 0
        while n < min(len(common), len(s.prompt)) and common[n] == s.prompt[n]:
            n += 1
        prefixes[s.prefix_group] = common[:n]
    for text in prefixes.values():
        assert TOK.count(text.rstrip()) in range(100, 104)  # the prefix, plus at most a shared word by chance
    heads = {p[:40] for p in prefixes.values()}
    assert len(heads) == 4
    # Shared-prefix fraction: P / mean input = 100 / 400.
    assert abs(ideal_prefix_reuse(specs) - 0.25) < 0.02


def test_reuse_matches_each_profile_spec() -> None:
    cls = take(1000, profile="classification", seed=10,
               overrides={"document_tokens": "2000", "question_tokens": "20", "questions_per_document": 5})
    assert abs(ideal_prefix_reuse(cls) - (4 / 5) * (2000 / 2020)) < 0.02  # (Q-1)/Q * D/(D+q)
    assert ideal_prefix_reuse(take(300, profile="code", seed=10)) < 0.01
    assert ideal_prefix_reuse(take(2000, profile="fixed", seed=10)) < 0.01
    assert ideal_prefix_reuse(take(1500, profile="chat", seed=10)) > 0.5


# -- reproducibility ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(profile="chat", overrides={"output_tokens": "50"}),
        dict(profile="classification", overrides={"document_tokens": "500"}),
        dict(input_tokens="300,50", prefix_tokens=50, prefix_groups=3, api="completions"),
    ],
)
def test_same_seed_gives_byte_identical_requests(kw: dict) -> None:
    def dump(seed: int) -> str:
        return json.dumps([asdict(s) for s in take(300, seed=seed, **kw)])

    a, b = dump(11), dump(11)
    assert a == b
    assert dump(12) != a
    wl = build_workload(seed=11, **kw)
    assert json.dumps([asdict(s) for s in itertools.islice(wl.requests(), 300)]) == a  # fresh iterator each call


def test_describe_records_what_made_the_requests() -> None:
    d = build_workload(profile="classification", seed=3).describe()
    json.dumps(d)
    assert d["profile"] == "classification" and d["dataset"] is None and d["seed"] == 3
    assert d["parameters"]["document_tokens"] == "10000,5000,8000,12000"
    assert d["tokenizer"]["name"] == "infermeter-approx-v1"
    assert d["sources"][0]["source"] == "prose" and len(d["sources"][0]["sha256"]) == 64
    assert d["sources"][0]["length_method"] == "additive-units"
    same = build_workload(profile="classification", seed=99).describe()
    other = build_workload(profile="classification", overrides={"questions_per_document": 3}).describe()
    assert same["content_hash"] == d["content_hash"] != other["content_hash"]


# -- overrides and errors ----------------------------------------------------------------


def test_flags_map_to_profile_fields() -> None:
    chat = build_workload(profile="chat", input_tokens="50", output_tokens="20")
    assert chat.describe()["parameters"]["user_tokens"] == "50"
    cls = build_workload(profile="classification", input_tokens="900")
    assert cls.describe()["parameters"]["document_tokens"] == "900"


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        (dict(profile="chat", overrides={"bogus": 1}), "override 'bogus': not a field of profile 'chat'"),
        (dict(profile="classification", overrides={"document_tokens": "x"}), "override document_tokens:"),
        (dict(profile="classification", overrides={"questions_per_document": 0}), "questions_per_document"),
        (dict(profile="chat", prefix_tokens=10), "--prefix-tokens does not apply to profile 'chat'"),
        (dict(input_tokens="100", prefix_tokens=100), "--prefix-tokens (100 tokens) leaves no room"),
        (dict(prefix_groups=4), "--prefix-groups needs --prefix-tokens"),
        (dict(profile="nope"), "--profile nope: unknown profile"),
        (dict(profile="chat", dataset="x.jsonl"), "give one or the other"),
        (dict(api="embeddings"), "--api embeddings"),
        (dict(input_tokens="1,2,3"), "--input-tokens:"),
        (dict(output_tokens="-5"), "--output-tokens:"),
        (dict(seed=-1), "--seed"),
        (dict(profile="chat", overrides={"system_tokens": 20000}), "exceed max_context_tokens 16384"),
    ],
)
def test_bad_input_is_named(kw: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_workload(**kw)
    assert fragment in str(err.value)


@pytest.mark.parametrize("kw", [{"input_tokens": "200,80", "output_tokens": "50,20"}, {"profile": "fixed"},
                                {"input_tokens": "32", "api": "completions"}])
def test_specs_without_text_have_the_same_lengths(kw: dict[str, Any]) -> None:
    wl = build_workload(seed=9, **kw)
    assert wl.text_optional  # type: ignore[attr-defined]
    full = list(itertools.islice(wl.requests(), 3000))
    bare = list(itertools.islice(wl.requests(text=False), 3000))  # type: ignore[call-arg]
    fields = [(s.index, s.input_tokens, s.max_tokens, s.prefix_group, s.conversation_id) for s in full]
    assert fields == [(s.index, s.input_tokens, s.max_tokens, s.prefix_group, s.conversation_id) for s in bare]
    assert len({(s.input_tokens, s.max_tokens) for s in full}) > 1 or kw.get("input_tokens") == "32"
    assert all((s.prompt or "") == "" and all(m["content"] == "" for m in s.messages or ()) for s in bare)


@pytest.mark.parametrize("kw", [{"input_tokens": "300", "prefix_tokens": 64, "prefix_groups": 2}, {"profile": "code"}])
def test_prompts_that_can_share_blocks_keep_their_text(kw: dict[str, Any]) -> None:
    wl = build_workload(seed=9, **kw)
    assert not wl.text_optional  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="cannot be left out"):
        wl.requests(text=False)  # type: ignore[call-arg]
