"""Property tests of the stream and usage handling, through ``OpenAIClient.send`` with a fake aiohttp session
(the fast HTTP client's reads are split the same ways in tests/client/test_fasthttp.py): a valid
stream gives the same tokens and per-chunk timestamps however its bytes are split into reads (plain or
gzip-compressed), and absurd usage values never raise and always leave a recordable record."""

import asyncio
import json
import zlib

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infermeter.client.openai import COMPLETION_SLACK, ClientConfig, OpenAIClient
from infermeter.records.record import ERROR_CLASSES, RequestRecord, records_to_table
from infermeter.workload.spec import RequestSpec

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=8, input_tokens=1)


class _Content:
    def __init__(self, reads):
        self._reads = reads
        self._left = list(reads)

    async def readany(self):
        return self._left.pop(0) if self._left else b""

    async def read(self, n=-1):
        return b"".join(self._reads)[:n] if n >= 0 else b"".join(self._reads)


class _Resp:
    def __init__(self, reads, headers):
        self.status = 200
        self.headers = headers
        self.content = _Content(reads)

    async def read(self):
        return b"".join(self.content._reads)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Session:
    def __init__(self, reads, headers):
        self.reads, self.headers = reads, headers

    def post(self, url, data, headers):
        return _Resp(self.reads, self.headers)


def send(reads, *, encoding=None):
    """One request whose response arrives as ``reads``; the clock ticks once per read (and per call)."""
    ticks = iter(range(10**6))
    headers = {"Content-Type": "text/event-stream"}
    if encoding:
        headers["Content-Encoding"] = encoding
    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m"), _Session(reads, headers),
                          clock=lambda: float(next(ticks)), http_client="aiohttp")  # the fake session is aiohttp's
    rec = RequestRecord(request_id=0)
    asyncio.run(client.send(SPEC, rec))
    return rec


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def event(obj) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


words = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6),
                 min_size=1, max_size=12)
line_end = st.sampled_from(["\n", "\r\n", "\r"])


def stream(texts, nl="\n", claim=None):
    body = event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    body += "".join(event({"choices": [{"delta": {"content": t}, "finish_reason": None}]}) for t in texts)
    body += event({"choices": [{"delta": {}, "finish_reason": "length"}]})
    body += event({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": len(texts) if claim is None else claim}})
    body += "data: [DONE]\n\n"
    return body.replace("\n", nl).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=words, nl=line_end, cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=40))
def test_any_split_of_a_valid_stream_counts_the_same(texts, nl, cuts):
    data = stream(texts, nl)
    whole = send([data])
    split = send(splits(data, cuts))
    for rec in (whole, split):
        assert rec.outcome == "ok", rec.error_detail
        assert rec.stream_tokens == len(texts) == rec.completion_tokens == len(rec.chunk_times)
        assert rec.usage_source == "server" and rec.chunk_tokens == [1] * len(texts)
        assert rec.chunk_times == sorted(rec.chunk_times) and rec.first_token_at == rec.chunk_times[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=words, cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=20),
       encoding=st.sampled_from(["gzip", "deflate"]))
def test_any_split_of_a_compressed_stream_counts_the_same(texts, cuts, encoding):
    z = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
    data = z.compress(stream(texts)) + z.flush()
    rec = send(splits(data, cuts), encoding=encoding)
    assert rec.outcome == "ok", rec.error_detail
    assert rec.stream_tokens == len(texts) == rec.completion_tokens == len(rec.chunk_times)


absurd = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.none(), st.booleans(), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=words, completion=absurd, prompt=absurd, cached=absurd, cuts=st.lists(st.integers(0, 10**6), max_size=8))
def test_absurd_usage_never_raises_and_is_always_recordable(texts, completion, prompt, cached, cuts):
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "prompt_tokens_details": {"cached_tokens": cached}}
    try:
        u = json.dumps({"choices": [], "usage": usage}, allow_nan=True)
    except (TypeError, ValueError):
        return
    body = stream(texts).replace(b"data: [DONE]", b"data: " + u.encode() + b"\n\ndata: [DONE]")
    rec = send(splits(body, cuts))
    assert rec.outcome in ("ok", "error") and rec.ended_at is not None
    if rec.outcome == "error":
        assert rec.error_class in ERROR_CLASSES
    else:  # the last usage (absurd) wins or is rejected: never a count the stream could not carry
        carry = sum(len(t.encode()) for t in texts) + len(texts) + 3 + COMPLETION_SLACK
        assert rec.usage_source in ("server", "rejected")
        assert rec.completion_tokens is not None and 0 <= rec.completion_tokens <= carry
        if rec.usage_source == "rejected":
            assert rec.completion_tokens == len(texts) and rec.error_detail.startswith("usage rejected")
    orjson.dumps(rec.to_row())
    records_to_table([rec])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=st.lists(st.binary(max_size=64) | st.sampled_from(
    [b"data: ", b"\n\n", b"data: [DONE]\n\n", b'{"choices":[', b'{"usage":', b"\r", b"\xff\xfe", b"null", b"}]}"]),
    max_size=20), encoding=st.sampled_from([None, "gzip", "deflate", "br"]))
def test_any_bytes_end_in_one_classified_record(garbage, encoding):
    rec = send(garbage, encoding=encoding)
    assert rec.ended_at is not None
    assert (rec.outcome == "ok") != (rec.error_class in ERROR_CLASSES)
    orjson.dumps(rec.to_row())
    records_to_table([rec])
