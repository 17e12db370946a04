"""A lying or careless server: its numbers are checked against what it streamed, an empty "success" is a
failure of its own, and a compressed stream is decoded (or its encoding named) -- each against a fake server."""

import asyncio
import gzip
import json
import zlib

import orjson
import pyarrow as pa
import pytest
from aiohttp import web

from infermeter.analysis.accumulator import build_summary
from infermeter.analysis.metrics import itl_samples
from infermeter.client.openai import COMPLETION_SLACK, _PIECE, _Decoder
from infermeter.records.record import ARROW_SCHEMA, ERROR_CLASSES, RequestRecord, conform, records_to_table
from infermeter.workload.spec import RequestSpec

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=3, input_tokens=1)


def chunk(delta, finish=None):
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


def usage(completion, prompt=1):
    return f'data: {{"choices":[],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion}}}}}\n\n'


STREAM = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hello"}) + chunk({"content": " world"}) + \
    chunk({}, "length")


def sse(body, *, encoding=None, seen=None, pieces=None):
    """An SSE handler sending ``body`` (``pieces``: one write each), compressed when ``encoding`` is given."""
    async def handler(request):
        if seen is not None:
            seen.append(request.headers.get("Accept-Encoding"))
        headers = {"Content-Type": "text/event-stream"}
        if encoding:
            headers["Content-Encoding"] = "deflate" if encoding == "rawdeflate" else encoding
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        parts = pieces if pieces is not None else [body]
        if encoding in ("gzip", "deflate", "rawdeflate"):
            z = zlib.compressobj(wbits={"gzip": 31, "deflate": 15, "rawdeflate": -15}[encoding])
            for p in parts:  # one flushed block per event, as a streaming proxy sends them
                await resp.write(z.compress(p.encode()) + z.flush(zlib.Z_SYNC_FLUSH))
                await asyncio.sleep(0.01)
            await resp.write(z.flush())
        else:
            for p in parts:
                await resp.write(p.encode())
        return resp
    return handler


@pytest.fixture
def send(send_once):
    return lambda handler, spec=SPEC, **kw: asyncio.run(send_once(handler, spec, **kw))


# -- usage claims -------------------------------------------------------------------------------
@pytest.mark.parametrize("claim", [2**31, 4_294_967_295, 20_000_000, 2**63 - 1])
def test_a_claim_beyond_what_the_stream_carried_is_rejected_and_the_stream_counted(claim, send):
    rec = send(sse(STREAM + usage(claim) + "data: [DONE]\n\n"))
    assert rec.outcome == "ok" and rec.usage_source == "rejected"
    assert rec.completion_tokens == rec.stream_tokens == 2 and rec.chunk_tokens == [1, 1]
    assert f"completion_tokens {claim}" in rec.error_detail
    orjson.dumps(rec.to_row())  # the journal can write it
    table = records_to_table([rec])  # and the parquet conversion holds it
    s = build_summary(table)
    assert s.usage_implausible == 1 and s.total_output_tokens == 2
    assert any(w.startswith("usage_implausible") for w in s.warnings)


def test_a_claim_the_text_could_carry_is_kept_and_spread_over_the_chunks(send):
    carry = len("Hello world") + 4 + COMPLETION_SLACK  # bytes + chunks with choices + slack
    rec = send(sse(STREAM + usage(carry) + "data: [DONE]\n\n"))
    assert rec.usage_source == "server" and rec.completion_tokens == carry and sum(rec.chunk_tokens) == carry
    rec = send(sse(STREAM + usage(carry + 1) + "data: [DONE]\n\n"))
    assert rec.usage_source == "rejected" and rec.completion_tokens == 2


def test_a_prompt_claim_beyond_the_request_is_rejected(send):
    rec = send(sse(STREAM + usage(2, prompt=10**9) + "data: [DONE]\n\n"))
    assert rec.usage_source == "rejected" and rec.prompt_tokens == SPEC.input_tokens and "prompt_tokens" in rec.error_detail


def test_cached_beyond_prompt_is_rejected(send):
    u = 'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":9}}}\n\n'
    rec = send(sse(STREAM + u + "data: [DONE]\n\n"))
    assert rec.usage_source == "rejected" and rec.cached_tokens is None


def test_itl_weights_are_not_expanded():
    # a record an older client wrote from a claim of 4,294,967,295 tokens: ITL must not allocate per token
    rec = RequestRecord(request_id=0, intended_at=0.0, sent_at=0.0, first_token_at=0.1, ended_at=0.3,
                        chunk_times=[0.1, 0.2, 0.3], chunk_tokens=[1, 1, 4_294_967_293], completion_tokens=4_294_967_295,
                        stream_tokens=3, usage_source="server", prompt_tokens=1)
    values, weights = itl_samples(records_to_table([rec]))
    assert values.size == 2 and weights.tolist() == [1, 4_294_967_293]
    s = build_summary(records_to_table([rec]))
    assert s.itl_ms.count == 4_294_967_294 and s.itl_ms.max == pytest.approx(100.0)


def test_old_files_with_32_bit_chunk_tokens_read_as_64_bit():
    old = pa.schema([pa.field(f.name, pa.list_(pa.int32())) if f.name == "chunk_tokens" else f for f in ARROW_SCHEMA])
    rec = RequestRecord(request_id=0, chunk_times=[0.1], chunk_tokens=[1], stream_tokens=1)
    t = records_to_table([rec]).cast(old)
    assert conform(t).schema == ARROW_SCHEMA and conform(t.drop_columns(["finish_reason"])).column("finish_reason").null_count == 1


# -- empty "successes" ---------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "data: [DONE]\n\n",
    usage(0) + "data: [DONE]\n\n",
    usage(7),  # a usage chunk alone ends the response
    chunk({"role": "assistant", "content": ""}) + chunk({}, "stop") + usage(1) + "data: [DONE]\n\n",
])
def test_a_response_without_any_token_is_empty_response(body, send):
    rec = send(sse(body))
    assert rec.outcome == "error" and rec.error_class == "empty_response" and "empty_response" in ERROR_CLASSES
    assert "without a token" in rec.error_detail


def test_an_empty_answer_to_max_tokens_0_is_ok(send):
    rec = send(sse(usage(0) + "data: [DONE]\n\n"), spec=RequestSpec(0, "hi", None, 0, 1))
    assert rec.outcome == "ok" and rec.completion_tokens == 0


def test_an_empty_plain_json_answer_is_empty_response(send):
    async def handler(request):
        return web.json_response({"choices": [{"message": {"content": ""}, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 0}})
    rec = send(handler)
    assert rec.error_class == "empty_response" and "JSON answer" in rec.error_detail


def test_a_tool_call_is_not_empty(send):
    tc = [{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]
    rec = send(sse(chunk({"tool_calls": tc}) + chunk({}, "tool_calls") + usage(6) + "data: [DONE]\n\n"))
    assert rec.outcome == "ok" and rec.usage_source == "server" and rec.completion_tokens == 6


# -- encodings ------------------------------------------------------------------------------------
EVENTS = [chunk({"content": w}) for w in ("a", "b", "c", "d")] + [chunk({}, "length"), usage(4), "data: [DONE]\n\n"]


def test_the_client_asks_for_identity(send):
    seen = []
    rec = send(sse("".join(EVENTS), seen=seen))
    assert rec.outcome == "ok" and seen == ["identity"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "rawdeflate"])
def test_a_compressed_stream_is_decoded_with_per_chunk_times(encoding, send):
    rec = send(sse("", encoding=encoding, pieces=EVENTS))  # rawdeflate: raw deflate under the name 'deflate'
    assert rec.outcome == "ok", rec.error_detail
    assert rec.stream_tokens == 4 and rec.completion_tokens == 4 and rec.usage_source == "server"
    assert len(set(rec.chunk_times)) == 4  # each event decoded as its bytes arrived, not all at the close


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br"])
def test_an_encoding_the_client_cannot_read_is_named(encoding, send):
    rec = send(sse("".join(EVENTS), encoding=encoding))
    assert rec.error_class == "malformed_response" and repr(encoding) in rec.error_detail


def test_a_compressed_error_body_is_decoded_into_the_detail(send):
    async def handler(request):
        return web.Response(status=500, body=gzip.compress(b'{"error": "engine fell over"}'),
                            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    rec = send(handler)
    assert rec.error_class == "http_5xx" and "engine fell over" in rec.error_detail


def test_an_unreadable_error_body_names_its_encoding(send):
    async def handler(request):
        return web.Response(status=503, body=b"\x1b\x02\x00\xf8", headers={"Content-Encoding": "br"})
    rec = send(handler)
    assert rec.error_class == "http_5xx" and rec.error_detail.startswith("HTTP 503") and "'br'" in rec.error_detail


def test_an_old_run_dir_with_32_bit_chunk_tokens_summarizes(tmp_path):
    import pyarrow.parquet as pq

    from infermeter.records.store import PARQUET, load_table

    old = pa.schema([pa.field(f.name, pa.list_(pa.int32())) if f.name == "chunk_tokens" else f for f in ARROW_SCHEMA])
    rec = RequestRecord(request_id=0, intended_at=0.0, sent_at=0.0, first_token_at=0.1, ended_at=0.3,
                        chunk_times=[0.1, 0.2, 0.3], chunk_tokens=[1, 1, 2], completion_tokens=4, stream_tokens=3,
                        usage_source="server", prompt_tokens=1)
    pq.write_table(records_to_table([rec]).cast(old), tmp_path / PARQUET)
    t = load_table(tmp_path)
    assert t.schema == ARROW_SCHEMA and build_summary(t).itl_ms.count == 3


def test_a_bomb_decodes_in_bounded_pieces():
    comp = zlib.compress(b"\0" * (5 * _PIECE + 7))
    pieces = list(_Decoder("deflate").decode(comp))
    assert sum(map(len, pieces)) == 5 * _PIECE + 7 and max(map(len, pieces)) <= _PIECE
