"""The fast HTTP client (``client.fasthttp``): responses read right however their bytes are split into reads,
each body chunk stamped with the read that brought it, connections reused only when that is safe, and every
failure a classified record.

The protocol is fed reads directly (every byte boundary, no sockets); the pool and ``OpenAIClient`` run
against raw servers on 127.0.0.1 that write exactly the bytes a test gives."""

import asyncio
import errno
import itertools

import pytest

from infermeter.client import fasthttp
from infermeter.client.fasthttp import BadResponse, Disconnected, FastPool, _Conn
from infermeter.client.openai import ClientConfig, OpenAIClient, http_client_for
from infermeter.client.session import make_session
from infermeter.errors import UserError
from infermeter.records.record import RequestRecord
from infermeter.workload.spec import RequestSpec

pytestmark = pytest.mark.skipif(not fasthttp.available(), reason="httptools is not installed")

SPEC = RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "hi"},), max_tokens=8, input_tokens=1)
BODY = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
LENGTH = HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
    b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (BODY[:20], BODY[20:21], BODY[21:])) + b"0\r\nX-Trailer: t\r\n\r\n"
UNTIL_CLOSE = HEAD + b"Connection: close\r\n\r\n" + BODY


class _Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.closed = self.paused = False
        self.written = b""

    def write(self, data):
        self.written += data

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False


def _conn():
    ticks = itertools.count(1)
    conn = _Conn(lambda: float(next(ticks)))  # read k is stamped k
    conn.connection_made(_Transport())
    conn.busy = True
    return conn


async def _read(conn):
    """(status, head_at, [(stamp, bytes)], error) of what was fed."""
    try:
        await conn.head()
        got = []
        while (c := await conn.next_chunk()) is not None:
            got.append(c)
        return conn.status, conn.head_at, got, None
    except (BadResponse, Disconnected) as exc:
        return conn.status, conn.head_at, [], type(exc)


def _feed(reads, *, eof=False):
    async def go():
        conn = _conn()
        for r in reads:
            conn.data_received(r)
        if eof:
            conn.connection_lost(None)
        return conn, await asyncio.wait_for(_read(conn), 5)
    return asyncio.run(go())


def _body_offsets(raw):
    """Offsets in ``raw`` of the bytes of its body (a chunked body: the chunks' data, not their framing)."""
    start = raw.index(b"\r\n\r\n") + 4
    if raw is not CHUNKED:
        return range(start, len(raw))
    out, i = [], start
    while True:
        line_end = raw.index(b"\r\n", i)
        n = int(raw[i:line_end].split(b";")[0], 16)
        if n == 0:
            return out
        out += range(line_end + 2, line_end + 2 + n)
        i = line_end + 2 + n + 2


def _splits(raw):
    yield [raw]
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]


@pytest.mark.parametrize("raw", [LENGTH, CHUNKED], ids=["content-length", "chunked"])
def test_a_response_split_at_every_byte_reads_the_same_and_is_stamped_by_its_reads(raw):
    for reads in _splits(raw):
        conn, (status, head_at, chunks, err) = _feed(reads)
        assert err is None and status == 200 and conn.done and conn.keep, reads
        assert b"".join(c for _, c in chunks) == BODY, reads
        # the head is stamped by the read that completed it; each chunk by the read that brought its bytes
        cut = len(reads[0])
        end_of_head = raw.index(b"\r\n\r\n") + 4
        assert head_at == (1.0 if cut >= end_of_head else 2.0), reads
        body_at = _body_offsets(raw)
        assert [t for t, _ in chunks] == [k for k, has in ((1.0, min(body_at) < cut), (2.0, max(body_at) >= cut)) if has]
        assert conn.headers["content-type"] == "text/event-stream"


def test_every_byte_in_its_own_read_still_gives_the_body_with_one_stamp_per_read_that_carried_body():
    conn, (status, _, chunks, err) = _feed([bytes([b]) for b in CHUNKED])
    assert err is None and status == 200 and b"".join(c for _, c in chunks) == BODY
    assert len({t for t, _ in chunks}) == len(chunks)  # never two entries for one read


def test_a_body_without_a_length_ends_when_the_server_closes():
    for reads in _splits(UNTIL_CLOSE):
        conn, (status, _, chunks, err) = _feed(reads, eof=True)
        assert err is None and status == 200 and conn.done and not conn.keep
        assert b"".join(c for _, c in chunks) == BODY


@pytest.mark.parametrize("raw", [LENGTH, CHUNKED], ids=["content-length", "chunked"])
def test_a_close_before_the_body_ends_is_disconnected_after_the_bytes_that_came(raw):
    async def go():
        conn = _conn()
        conn.data_received(raw[:-10])
        conn.connection_lost(None)
        await conn.head()
        got = b""
        with pytest.raises(Disconnected, match="before the response ended"):
            while (c := await conn.next_chunk()) is not None:
                got += c[1]
        return got
    got = asyncio.run(go())
    assert got and BODY.startswith(got)  # what arrived is given out before the error


def test_a_close_before_the_head_is_disconnected():
    for cut in (0, 5, len(HEAD)):
        _, (_, _, _, err) = _feed([LENGTH[:cut]] if cut else [], eof=True)
        assert err is Disconnected


@pytest.mark.parametrize("raw", [b"SPDY/9 200 OK\r\n\r\n", b"HTTP/1.1 2x0 OK\r\n\r\n",
                                 HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
                                 HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_what_is_not_http_is_a_bad_response(raw):
    conn, (_, _, _, err) = _feed([raw])
    assert err is BadResponse and conn.tr.closed


def test_a_head_larger_than_the_limit_is_refused_without_being_held(monkeypatch):
    monkeypatch.setattr(fasthttp, "MAX_HEAD", 1000)
    reads = [HEAD] + [b"X-Pad: " + b"a" * 90 + b"\r\n"] * 20
    conn, (_, _, _, err) = _feed(reads)
    assert err is BadResponse and conn.tr.closed
    conn, (_, _, _, err) = _feed([LENGTH])  # a normal head is fine under the same limit
    assert err is None


def test_an_interim_response_is_skipped():
    conn, (status, _, chunks, err) = _feed([b"HTTP/1.1 100 Continue\r\n\r\n", LENGTH])
    assert err is None and status == 200 and b"".join(c for _, c in chunks) == BODY


def test_connection_close_and_unasked_bytes_stop_reuse_but_not_the_response():
    conn, (_, _, chunks, err) = _feed([HEAD + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)])
    assert err is None and conn.done and not conn.keep
    conn, (_, _, chunks, err) = _feed([LENGTH + b"HTTP/1.1 200 OK\r\n"])  # a second response nobody asked for
    assert err is None and conn.done and not conn.keep and conn.tr.closed
    assert b"".join(c for _, c in chunks) == BODY


def _half_of_a_300_byte_body(monkeypatch, high_water):
    """A connection that has read the head and the first 150 bytes of a 300-byte body, with the given high water
    mark (low water 50); and the body."""
    monkeypatch.setattr(fasthttp, "HIGH_WATER", high_water)
    monkeypatch.setattr(fasthttp, "LOW_WATER", 50)
    conn, body = _conn(), b"x" * 300
    conn.data_received(HEAD + b"Content-Length: 300\r\n\r\n" + body[:150])
    return conn, body


def test_a_large_body_pauses_reading_until_it_is_read(monkeypatch):
    async def go():
        conn, body = _half_of_a_300_byte_body(monkeypatch, 100)
        assert conn.tr.paused
        await conn.head()
        assert (await conn.next_chunk())[1] == body[:150]
        assert not conn.tr.paused
        conn.data_received(body[150:])
        assert (await conn.next_chunk())[1] == body[150:]
        assert await conn.next_chunk() is None
    asyncio.run(go())


def test_a_small_head_read_together_with_a_large_body_is_not_taken_for_a_large_head():
    # a server that writes head and body at once can have both arrive in one read far larger than MAX_HEAD
    body = b"x" * (fasthttp.MAX_HEAD * 2)
    conn, (status, _, chunks, err) = _feed([HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body])
    assert err is None and status == 200 and b"".join(c for _, c in chunks) == body


def test_a_connection_paused_on_a_large_body_is_resumed_before_it_is_reused(monkeypatch):
    async def go():
        conn, body = _half_of_a_300_byte_body(monkeypatch, 200)
        conn.data_received(body[150:])  # the rest: complete, and past the high water
        assert conn.tr.paused and conn.done and conn.keep
        await conn.head()
        await conn.next_chunk()  # the reader takes what it wants (an error's first bytes) and leaves
        pool = FastPool("http://127.0.0.1:9", clock=lambda: 0.0)
        pool._all.add(conn)
        pool._release(conn, True)
        assert pool._idle == [conn]
        assert not conn.tr.paused  # else the next response on it is never read
    asyncio.run(go())


def test_endless_trailers_are_refused_without_being_held(monkeypatch):
    # after the last chunk a server may send trailer fields: one that never ends would be buffered by the parser
    monkeypatch.setattr(fasthttp, "MAX_HEAD", 1000)
    first = HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: "
    conn, (status, _, chunks, err) = _feed([first] + [b"a" * 100] * 20)
    assert err is BadResponse and conn.tr.closed and status == 200
    conn, (_, _, chunks, err) = _feed([first, b"a" * 500 + b"\r\n\r\n"])  # a trailer of sane size is fine
    assert err is None and conn.done and b"".join(c for _, c in chunks) == b"hello"

# -- against servers on 127.0.0.1 ------------------------------------------------------------------

async def _server(answer, conns):
    """A server writing ``answer(k)`` (the bytes, or a list of (bytes, pause_s)) for the k-th request it reads."""
    count = itertools.count()

    async def handle(reader, writer):
        conns.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(n)
                out = answer(next(count))
                for piece, pause in ([(out, 0)] if isinstance(out, bytes) else out):
                    if piece is None:
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
                    if pause:
                        await asyncio.sleep(pause)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


async def _send_many(answer, n, **cfg):
    conns = []
    srv, port = await _server(answer, conns)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    recs = []
    async with srv, make_session() as session:
        async with OpenAIClient(ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m", **cfg), session,
                                lambda: loop.time() - t0, http_client="fast") as client:
            for i in range(n):
                rec = RequestRecord(request_id=i)
                await client.send(SPEC, rec)
                recs.append(rec)
                await asyncio.sleep(0.01)  # a close the server made is seen before the next request
    return recs, conns


SSE_OK = HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def test_keep_alive_connections_are_reused():
    recs, conns = asyncio.run(_send_many(lambda k: SSE_OK, 5))
    assert [r.outcome for r in recs] == ["ok"] * 5 and len(conns) == 1


def test_connection_close_answers_and_servers_that_hang_up_get_new_connections():
    close = HEAD + b"Connection: close\r\n\r\n" + BODY
    recs, conns = asyncio.run(_send_many(lambda k: [(close, 0), (None, 0)], 4))
    assert [r.outcome for r in recs] == ["ok"] * 4 and len(conns) == 4
    # a keep-alive answer, then the server closes the idle connection: the next request connects anew
    recs, conns = asyncio.run(_send_many(lambda k: [(SSE_OK, 0), (None, 0)], 3))
    assert [r.outcome for r in recs] == ["ok"] * 3 and len(conns) == 3


def test_a_response_left_unread_is_not_reused():
    # [DONE] ends the request, but the server says more is coming: that connection cannot carry the next
    partial = HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(BODY) + 10, BODY)
    recs, conns = asyncio.run(_send_many(lambda k: [(partial, 0.05), (b"x" * 10, 0)], 3))
    assert [r.outcome for r in recs] == ["ok"] * 3 and len(conns) == 3


def test_a_server_closing_mid_stream_is_a_stream_cut_with_the_tokens_that_came():
    first = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(first), first)
    recs, _ = asyncio.run(_send_many(lambda k: [(raw, 0.02), (None, 0)], 1))
    assert recs[0].error_class == "stream_cut" and recs[0].stream_tokens == 1 and len(recs[0].chunk_times) == 1


def test_error_statuses_and_timeouts_are_classified():
    err = b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy"
    recs, _ = asyncio.run(_send_many(lambda k: err, 1))
    assert recs[0].error_class == "http_5xx" and recs[0].http_status == 503 and "busy" in recs[0].error_detail
    recs, _ = asyncio.run(_send_many(lambda k: [(HEAD + b"Content-Length: 500\r\n\r\n", 1.0)], 1,
                                     first_token_timeout_s=0.2))
    assert recs[0].error_class == "first_token_timeout"
    bad = b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"
    recs, _ = asyncio.run(_send_many(lambda k: bad, 1))
    assert recs[0].error_class == "malformed_response" and "bad HTTP response" in recs[0].error_detail


def _send_with_connect(fake):
    async def go():
        loop = asyncio.get_running_loop()
        loop.create_connection = fake  # type: ignore[method-assign]
        async with make_session() as session:
            async with OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m", connect_timeout_s=0.1),
                                    session, loop.time, http_client="fast") as client:
                rec = RequestRecord(request_id=0)
                await client.send(SPEC, rec)
                return rec
    return asyncio.run(go())


def test_connect_failures_are_classified():
    async def hang(*a, **k):
        await asyncio.sleep(5)

    async def emfile(*a, **k):
        raise OSError(errno.EMFILE, "Too many open files")

    async def refused(*a, **k):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    assert _send_with_connect(hang).error_class == "connect_timeout"
    assert _send_with_connect(emfile).error_class == "client_fd_limit"
    assert _send_with_connect(refused).error_class == "connect_error"


def test_which_client_streams():
    assert http_client_for("http://127.0.0.1:8000", "auto") == "fast"
    assert http_client_for("https://example.com", "auto") == "aiohttp"
    assert http_client_for("http://user:pw@127.0.0.1:8000", "auto") == "aiohttp"
    assert http_client_for("http://127.0.0.1:8000", "aiohttp") == "aiohttp"
    with pytest.raises(UserError, match="only plain http"):
        http_client_for("https://example.com", "fast")
    with pytest.raises(UserError, match="expected auto, fast or aiohttp"):
        http_client_for("http://127.0.0.1:8000", "quick")


def test_the_pool_speaks_to_the_url_it_was_given():
    pool = FastPool("http://127.0.0.1:8000/base/", clock=lambda: 0.0)
    head = pool.head("/v1/chat/completions", {"Authorization": "Bearer k"})
    req = pool.post(head, b"{}")._head
    assert req.startswith(b"POST /base/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in req and b"Accept-Encoding: identity\r\n" in req
    assert req.endswith(b"Content-Length: 2\r\n\r\n")



def test_a_header_with_a_line_break_is_never_written_by_the_fast_client():
    # a key read from a file with its newline would otherwise end the head early (and smuggle what follows)
    for key in ("k\r\nX-Evil: 1", "k\n", "k\r"):
        client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m", api_key=key), None,  # type: ignore[arg-type]
                              lambda: 0.0, http_client="auto")
        assert client.http_client == "aiohttp", repr(key)

def test_a_key_http_cannot_carry_leaves_the_request_to_aiohttp():
    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m", api_key="clé-€"), None,  # type: ignore[arg-type]
                          lambda: 0.0, http_client="auto")
    assert client.http_client == "aiohttp"


def test_a_connection_idle_too_long_is_not_reused(monkeypatch):
    monkeypatch.setattr(fasthttp, "KEEPALIVE_S", 0.005)  # _send_many waits 10 ms between requests
    recs, conns = asyncio.run(_send_many(lambda k: SSE_OK, 3))
    assert [r.outcome for r in recs] == ["ok"] * 3 and len(conns) == 3
