"""The events of one read handled together (``OpenAIClient._on_events``, ``ReasoningSplit.plain``) give the same
record as handling them one at a time (``_on_event``, ``ReasoningSplit.chunk``), for any events split into any
reads: the usual token chunks take a shortcut there, everything else the one-by-one path."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infermeter.client.errors import RequestFailed
from infermeter.client.openai import ClientConfig, OpenAIClient, StreamTally
from infermeter.client.reasoning import ReasoningSplit
from infermeter.records.record import RequestRecord

texts = st.lists(st.sampled_from(["a", " ", "\n", "<think>", "</think>", "<th", "ink>", "</th", "é", "😀", "x y",
                                  "\ud800"]), min_size=1, max_size=3).map("".join)


def _cuts(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    bounds = sorted({0, n, *(c % (n + 1) for c in cuts)})
    return list(zip(bounds, bounds[1:]))


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.tuples(texts, st.booleans()), min_size=1, max_size=30),
       cuts=st.lists(st.integers(0, 100), max_size=6))
def test_plain_runs_flag_like_chunk_by_chunk(chunks, cuts):
    one, batched = ReasoningSplit(), ReasoningSplit()
    for text, field in chunks:
        one.chunk(text, "r" if field else "")
    for a, b in _cuts(len(chunks), cuts):  # each read: runs of plain chunks batched, a reasoning field one by one
        run = []
        for text, field in chunks[a:b]:
            if field:
                batched.plain(run) if run else None
                run = []
                batched.chunk(text, "r")
            else:
                run.append(text)
        if run:
            batched.plain(run)
    one.finish()
    batched.finish()
    assert batched.flags == one.flags and batched.first_answer() == one.first_answer()


def _event(kind: str, text: str) -> str:
    if kind == "content":
        return json.dumps({"choices": [{"delta": {"content": text}, "finish_reason": None}]})
    if kind == "reasoning":
        return json.dumps({"choices": [{"delta": {"reasoning_content": text}}]})
    if kind == "finish":
        return json.dumps({"choices": [{"delta": {"content": text}, "finish_reason": "stop"}]})
    if kind == "usage":
        return json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": len(text)}})
    if kind == "with_usage":
        return json.dumps({"choices": [{"delta": {"content": text}}], "usage": {"prompt_tokens": 1, "completion_tokens": 3}})
    if kind == "text":  # a completions-style choice in a chat stream: no delta
        return json.dumps({"choices": [{"text": text}]})
    if kind == "tool":
        return json.dumps({"choices": [{"delta": {"tool_calls": [{"id": text}]}}]})
    if kind == "error":
        return json.dumps({"error": {"message": "boom"}})
    if kind == "bad":
        return "{not json"
    if kind == "badutf8":  # not UTF-8: decoded with U+FFFD where a read's bytes go in as they are
        return b'{"choices": [{"delta": {"content": "a\xff"}}]}'
    if kind == "nonascii":  # UTF-8 text, unescaped
        return json.dumps({"choices": [{"delta": {"content": text}}]}, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "list":
        return "[1]"
    return {"done": "[DONE]", "empty": "", "nonstr": json.dumps({"choices": [{"delta": {"content": 5}}]})}[kind]


KINDS = ["content"] * 6 + ["reasoning", "finish", "usage", "with_usage", "text", "tool", "error", "bad", "list",
                           "done", "empty", "nonstr", "badutf8", "nonascii"]


def _run(datas_by_read, chat, batched):
    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m"), None, lambda: 0.0,  # type: ignore[arg-type]
                          http_client="aiohttp")
    rec, tally = RequestRecord(request_id=0), StreamTally()
    states, error = [], None
    try:
        for t, datas in enumerate(datas_by_read):
            now = float(t)
            if batched:  # as SSEParser.feed_raw gives them: text, or the usual block's payload in bytes
                states.append(client._on_events(datas, now, rec, tally, chat, rec.chunk_times))
            else:  # as SSEParser.feed_data gives them: text
                st_ = 0
                for d in datas:
                    d = d if isinstance(d, str) else d.decode("utf-8", errors="replace")
                    s = client._on_event(d, now, rec, tally, chat, rec.chunk_times)
                    if s == 2:
                        st_ = 2
                        break
                    st_ |= s
                states.append(st_)
            if states[-1] == 2:
                break
    except RequestFailed as exc:
        error = (exc.error_class, exc.detail)
    client._finish_tokens(rec, tally, 100)
    return (states, error, rec.to_row(), tally.char_lens, tally.bytes, tally.events, tally.split.flags)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.tuples(st.sampled_from(KINDS), texts), min_size=1, max_size=25),
       cuts=st.lists(st.integers(0, 100), max_size=6), chat=st.booleans())
def test_a_read_batched_counts_like_event_by_event(events, cuts, chat):
    datas = [_event(k, t) for k, t in events]
    datas = [d.encode() if isinstance(d, str) and k == "content" else d for d, (k, _) in zip(datas, events)]
    reads = [datas[a:b] for a, b in _cuts(len(datas), cuts)]
    assert _run(reads, chat, True) == _run(reads, chat, False)
