"""Reasoning streams: the thinking is told from the answer, and TTFO - TTFT is the thinking time.

A fake server (127.0.0.1, in the test's event loop) thinks for a known time, streaming
``reasoning_content`` (or ``reasoning``, or ``<think>`` tags in the content), then answers; the
record's ``first_answer_at - first_token_at`` must be that time (within 10 %, measured against the
server's own write times), and the summary's ``ttfo_ms - ttft_ms`` the same.
"""

import asyncio
import json

import pytest
from aiohttp import web

from infermeter.analysis.accumulator import build_summary
from infermeter.client.reasoning import ReasoningSplit
from infermeter.records.record import RequestRecord, records_to_table
from infermeter.workload.spec import RequestSpec

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=64, input_tokens=1)
THINK_S = 0.4


def _flags(chunks, fields=()):
    s = ReasoningSplit()
    for i, c in enumerate(chunks):
        s.chunk(c, "r" if i in fields else "")
    s.finish()
    return s.flags


@pytest.mark.parametrize("chunks, fields, want", [
    (["", "", "ans", "wer"], {0, 1}, [True, True, False, False]),  # reasoning fields, then content
    (["<think>", "hmm", "</think>", "\n\nYes"], set(), [True, True, True, False]),
    (["  <thi", "nk>hm", "m</th", "ink>Yes"], set(), [True, True, True, False]),  # tags split across chunks
    (["<think>a", "b</think>The"], set(), [True, False]),  # the answer arrives with the closing tag
    (["we think", " hard", "</think>", "Yes"], set(), [True, True, True, False]),  # only the closing tag
    (["<t", "able>", "x"], set(), [False, False, False]),  # not an opening tag after all
    (["<th"], set(), [False]),  # undecided to the end: answer text
    (["Hello", " world"], set(), [False, False]),
    (["", "see </think>", "x"], {0}, [True, False, False]),  # with fields, a tag in content is text
])
def test_chunks_are_told_thinking_or_answer(chunks, fields, want):
    assert _flags(chunks, fields) == want


def _event(delta, finish=None, usage=None):
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return ("data: " + json.dumps(obj) + "\n\n").encode() if usage is None else \
        ("data: " + json.dumps(obj) + "\n\n" + "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n").encode()


def _thinking_server(think, answer, writes, usage=None, think_s=THINK_S):
    """Streams the deltas of ``think`` spread over ``think_s`` seconds, then those of ``answer``."""
    async def handler(request):
        loop = asyncio.get_running_loop()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = loop.time()
        for i, d in enumerate(think):
            await asyncio.sleep(max(0.0, start + think_s * i / len(think) - loop.time()))
            writes.append(loop.time())
            await resp.write(_event(d))
        await asyncio.sleep(max(0.0, start + think_s - loop.time()))
        for i, d in enumerate(answer):
            writes.append(loop.time())
            last = i == len(answer) - 1
            await resp.write(_event(d, "stop" if last else None, usage if last else None))
            await asyncio.sleep(0.005)
        await resp.write(b"data: [DONE]\n\n")
        return resp
    return handler


async def _send(send_once, handler):
    loop = asyncio.get_running_loop()
    return await send_once(handler, SPEC, clock=loop.time)


THINK = [{"reasoning_content": w} for w in ("Let", " me", " think", " about", " it", " carefully", " now", ".")]
ANSWER = [{"content": w} for w in ("The", " answer", " is", " 42")]


@pytest.mark.parametrize("think, answer", [
    (THINK, ANSWER),
    ([{"reasoning": d["reasoning_content"]} for d in THINK], ANSWER),  # OpenRouter's field
    ([{"content": "<think>"}] + [{"content": d["reasoning_content"]} for d in THINK] + [{"content": "</think>"}],
     ANSWER),  # raw tags in the content
])
def test_ttfo_minus_ttft_is_the_thinking_time(send_once, think, answer):
    writes: list[float] = []
    rec = asyncio.run(_send(send_once, _thinking_server(think, answer, writes)))
    assert rec.outcome == "ok", rec.error_detail
    thought = writes[len(think)] - writes[0]  # the server's own first answer write minus its first thinking write
    assert thought >= THINK_S * 0.9
    assert rec.first_answer_at is not None and rec.first_token_at is not None
    assert abs((rec.first_answer_at - rec.first_token_at) - thought) <= 0.1 * thought
    assert rec.reasoning_tokens == len(think) and rec.answer_tokens == len(answer)
    assert rec.completion_tokens == len(think) + len(answer)

    summary = build_summary(records_to_table([rec]))
    assert summary.ttfo_ms is not None and summary.ttfo_ms.count == 1
    gap_ms = summary.ttfo_ms.mean - summary.ttft_ms.mean
    assert abs(gap_ms - thought * 1000) <= 0.1 * thought * 1000
    assert summary.reasoning_requests == 1
    assert summary.total_reasoning_tokens == len(think) and summary.total_answer_tokens == len(answer)
    assert set(summary.to_json()["ttfo_ms"]) == set(summary.to_json()["ttft_ms"])  # the same shape


def test_usage_reasoning_tokens_split_the_count_and_thinking_bytes_bound_the_usage(send_once):
    """A server counting 300 tokens for 8 thinking chunks of long text and 4 short answer words: the usage
    is plausible only with the thinking's bytes counted, and its reasoning_tokens is taken."""
    think = [{"reasoning_content": "x" * 40} for _ in range(8)]
    usage = {"prompt_tokens": 1, "completion_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 290}}
    writes: list[float] = []
    rec = asyncio.run(_send(send_once, _thinking_server(think, ANSWER, writes, usage=usage, think_s=0.05)))
    assert rec.outcome == "ok" and rec.usage_source == "server", rec.error_detail
    assert rec.completion_tokens == 300 and rec.reasoning_tokens == 290 and rec.answer_tokens == 10
    flags = [True] * len(think) + [False] * len(ANSWER)
    assert sum(k for k, f in zip(rec.chunk_tokens, flags) if f) == 290  # the thinking chunks carry the 290


def test_a_usage_reasoning_count_above_the_completion_is_not_taken(send_once):
    usage = {"prompt_tokens": 1, "completion_tokens": 12, "completion_tokens_details": {"reasoning_tokens": 99}}
    rec = asyncio.run(_send(send_once, _thinking_server(THINK, ANSWER, [], usage=usage, think_s=0.02)))
    assert rec.outcome == "ok" and rec.reasoning_tokens == len(THINK) and rec.answer_tokens == len(ANSWER)


def test_thinking_without_an_answer_has_no_first_answer(send_once):
    rec = asyncio.run(_send(send_once, _thinking_server(THINK, [{"reasoning_content": "."}], [], think_s=0.02)))
    assert rec.outcome == "ok" and rec.first_answer_at is None and rec.answer_tokens == 0
    summary = build_summary(records_to_table([rec]))
    assert summary.ttfo_ms is not None and summary.ttfo_ms.count == 0 and summary.ttft_ms.count == 1


def test_a_run_without_thinking_keeps_its_summary_keys():
    rec = RequestRecord(request_id=0, sent_at=0.0, first_token_at=0.1, ended_at=0.5, chunk_times=[0.1, 0.5],
                        chunk_tokens=[1, 1], completion_tokens=2, stream_tokens=2, prompt_tokens=1,
                        first_answer_at=0.1, reasoning_tokens=0, answer_tokens=2)
    data = build_summary(records_to_table([rec])).to_json()
    assert not {"ttfo_ms", "reasoning_requests", "total_reasoning_tokens", "mean_answer_tokens"} & set(data)


def test_records_without_the_new_columns_still_read():
    import pyarrow as pa

    from infermeter.records.record import ARROW_SCHEMA, conform

    rec = RequestRecord(request_id=0, sent_at=0.0, first_token_at=0.1, ended_at=0.5, completion_tokens=2)
    old = records_to_table([rec]).drop_columns(["first_answer_at", "reasoning_tokens", "answer_tokens"])
    table = conform(old)
    assert table.schema == ARROW_SCHEMA and table.column("first_answer_at").null_count == 1
    assert isinstance(table, pa.Table) and build_summary(table).ttft_ms.count == 1
