"""The client against odd servers: every request ends in exactly one classified record."""

import asyncio
import json

import pytest
from aiohttp import web

from infermeter.workload.spec import RequestSpec

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=3, input_tokens=1)


def chunk(delta, finish=None):
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


@pytest.fixture
def send(send_once):
    return lambda handler, **kw: asyncio.run(send_once(handler, SPEC, **kw))


def sse(body: str, wait_after_s: float = 0.0):
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body.encode())
        if wait_after_s:
            await asyncio.sleep(wait_after_s)
        return resp
    return handler


@pytest.mark.parametrize("body", [
    'data: {"choices":"abc"}\n\n',
    'data: {"choices":[{"delta":"hi"}]}\n\n',
    'data: {"choices":[{"delta":{"content":5}}]}\n\n',
])
def test_valid_json_of_the_wrong_shape_is_malformed_not_lost(body, send):
    rec = send(sse(chunk({"content": "a"}) + body + "data: [DONE]\n\n"))
    assert rec.outcome == "error" and rec.error_class == "malformed_response"
    assert rec.ended_at is not None


@pytest.mark.parametrize("usage", ['[1]', '{"prompt_tokens":"3","completion_tokens":2}',
                                   '{"prompt_tokens":1,"completion_tokens":-2}', '{"prompt_tokens":1,"completion_tokens":2.0}'])
def test_usage_that_is_not_counts_is_set_aside_and_the_stream_counted(usage, send):
    rec = send(sse(chunk({"content": "a"}) + chunk({"content": "b"}, "length") +
                   f'data: {{"choices":[],"usage":{usage}}}\n\n' + "data: [DONE]\n\n"))
    assert rec.outcome == "ok" and rec.usage_source == "rejected"
    assert rec.completion_tokens == 2 == rec.stream_tokens and rec.prompt_tokens == SPEC.input_tokens
    assert rec.error_detail.startswith("usage rejected: ")


def test_non_string_finish_reason_is_kept_as_text(send):
    rec = send(sse(chunk({"content": "a"}) + chunk({"content": "b"}, finish=1) + "data: [DONE]\n\n"))
    assert rec.outcome == "ok" and rec.finish_reason == "1"


def test_end_is_the_done_event_not_the_connection_close(send):
    body = chunk({"content": "a"}) + chunk({"content": "b"}) + chunk({}, "length") + \
        'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
    rec = send(sse(body, wait_after_s=1.0))
    assert rec.outcome == "ok" and rec.completion_tokens == 2
    assert rec.ended_at - rec.sent_at < 0.5


def test_a_plain_json_answer_has_no_token_timing(send):
    async def handler(request):
        return web.json_response({"choices": [{"message": {"content": "a b c"}, "finish_reason": "length"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 3}})
    rec = send(handler)
    assert rec.outcome == "ok" and rec.completion_tokens == 3
    assert rec.first_token_at is None and rec.chunk_times == []


def test_an_echoed_api_key_is_redacted(send):
    async def handler(request):
        return web.json_response({"error": f"bad key {request.headers['Authorization']}"}, status=401)
    rec = send(handler, api_key="sk-LEAKME")
    assert rec.error_class == "http_4xx"
    assert "sk-LEAKME" not in rec.error_detail and "***" in rec.error_detail


def test_redirect_is_not_a_server_error(send):
    async def handler(request):
        return web.Response(status=304)
    assert send(handler).error_class == "malformed_response"



def test_a_redirect_is_followed_with_the_request(send_once):
    """A 307 to another path is POSTed there again (aiohttp follows it; the fast client hands it to aiohttp)."""
    seen = []

    async def handler(request):
        if request.path == "/v1/chat/completions":
            raise web.HTTPTemporaryRedirect("/moved")
        seen.append((await request.json())["model"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
        return resp

    rec = asyncio.run(send_once(handler, SPEC, extra_paths=("/moved",)))
    assert rec.outcome == "ok" and rec.stream_tokens == 1 and seen == ["m"]
