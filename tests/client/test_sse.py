"""SSE parser: the formats real servers send, split anywhere."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infermeter.client.sse import SSEError, SSEParser


def feed_all(parser: SSEParser, data: bytes, step: int | None = None) -> list:
    out = []
    if step is None:
        out += parser.feed(data)
    else:
        for i in range(0, len(data), step):
            out += parser.feed(data[i:i + step])
    return out + parser.close()


@pytest.mark.parametrize("step", [None, 1, 2, 3, 7])
def test_data_with_and_without_space_crlf_and_comments(step):
    raw = b'data: {"a":1}\n\ndata:{"a":2}\r\n\r\n: ping\n\nevent: x\ndata: [DONE]\r\r'
    events = feed_all(SSEParser(), raw, step)
    assert [e.data for e in events] == ['{"a":1}', '{"a":2}', "[DONE]"]
    assert events[2].event == "x"


def test_multibyte_utf8_split_across_reads():
    payload = json.dumps({"t": "é€𝄞日本"}, ensure_ascii=False).encode()
    raw = b"data: " + payload + b"\n\n"
    for cut in range(1, len(raw)):
        p = SSEParser()
        events = p.feed(raw[:cut]) + p.feed(raw[cut:])
        assert [json.loads(e.data)["t"] for e in events] == ["é€𝄞日本"]


def test_usage_chunk_with_empty_choices_and_multiline_data():
    raw = b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\ndata: line1\ndata: line2\n\n'
    events = feed_all(SSEParser(), raw)
    assert json.loads(events[0].data)["usage"]["completion_tokens"] == 3
    assert events[1].data == "line1\nline2"


def test_last_event_without_blank_line_is_returned_on_close():
    p = SSEParser()
    assert p.feed(b'data: {"x":1}\n') == []
    assert [e.data for e in p.close()] == ['{"x":1}']


def test_very_large_event_and_limit():
    big = "x" * 2_000_000
    raw = b"data: " + big.encode() + b"\n\n"
    assert feed_all(SSEParser(), raw, 65536)[0].data == big
    with pytest.raises(SSEError):
        feed_all(SSEParser(max_event_bytes=1000), raw, 4096)


def test_many_small_events_in_one_read():
    raw = b"".join(b'data: {"i":%d}\n\n' % i for i in range(500))
    assert [json.loads(e.data)["i"] for e in feed_all(SSEParser(), raw)] == list(range(500))


@pytest.mark.parametrize("step", [None, 1, 2, 3, 5, 7, 64])
def test_feed_data_gives_the_data_of_every_event_feed_gives(step):
    # the hot path's data-only feed must agree with feed() on every format and split
    raw = (b'data: {"a":1}\n\ndata:{"a":2}\r\n\r\n: ping\n\nevent: x\ndata: [DONE]\r\r'
           b'\n\ndata: line1\ndata: line2\n\ndata: \xc3\xa9\xe2\x82\xac\n\nid: 3\n\ndata: {"b":3}\n\ndata: tail')
    a, b = SSEParser(), SSEParser()
    full, data = [], []
    chunks = [raw] if step is None else [raw[i:i + step] for i in range(0, len(raw), step)]
    for c in chunks:
        full += a.feed(c)
        data += b.feed_data(c)
    full += a.close()
    data += [e.data for e in b.close()]
    assert data == [e.data for e in full]
    assert data == ['{"a":1}', '{"a":2}', "[DONE]", "line1\nline2", "é€", '{"b":3}', "tail"]


def test_feed_data_limits_event_size():
    p = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        p.feed_data(b"data: " + b"x" * 200)


_PIECES = [b'data: {"a":1}\n\n', b"data: x\n\n", b"data: \n\n", b"data:nospace\n\n", b"data: a\ndata: b\n\n",
           b": ping\n\n", b"\n", b"\n\n", b"event: e\ndata: y\n\n", b"data: \xc3\xa9\n\n", b"data: \xff\n\n",
           b"data: z", b"data:  two spaces\n\n", b"id: 1\n\n", b"data: data: \n\n", b"\n\ndata: q\n\n", b"\r\n"]


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=20), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_feed_data_agrees_with_feed_on_any_stream_split_anywhere(pieces, cuts):
    raw = b"".join(pieces)
    bounds = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    a, b = SSEParser(), SSEParser()
    full, data = [], []
    for x, y in zip(bounds, bounds[1:]):
        full += a.feed(raw[x:y])
        data += b.feed_data(raw[x:y])
    full += a.close()
    data += [e.data for e in b.close()]
    assert data == [e.data for e in full]
