"""A lean HTTP/1.1 client for the streamed requests of one plain ``http://`` server.

:class:`FastPool` sends a POST on a pooled keep-alive connection and gives its response, read by
an :class:`asyncio.Protocol` with ``httptools`` (llhttp, the parser uvicorn uses; a core
dependency). It exists for speed: aiohttp's request and response machinery was most of what a
streamed request cost the client beyond the parsing of its events. What it does not cover is
left to aiohttp (``client.openai`` picks): ``https://`` (TLS), anything but
``http://host[:port]``, and redirects (a 3xx with a Location is sent again through aiohttp,
which follows it, and so is every later request of that client)::

    pool = FastPool("http://127.0.0.1:8000", connect_timeout_s=10, clock=run_clock)
    async with pool.post("/v1/chat/completions", headers, body) as resp:
        resp.status, resp.head_at, resp.header("content-type")
        while (got := await resp.next_chunk()) is not None:
            arrived_at, data = got      # one entry per socket read: its body bytes, stamped on arrival
    await pool.close()

Timing: every socket read is stamped with ``clock`` once, in ``data_received``, before it is
parsed: ``head_at`` is the read that completed the response head; each body chunk is the body
bytes of one read (a chunked body's chunks in one read are joined), with that read's time.

Bodies: ``Content-Length``, chunked, or (no length, not chunked) until the server closes. A
connection goes back to the pool only after a complete response the server let keep alive;
anything else (a response left unread, a protocol error, bytes the server sent unasked) closes it,
and so does ``KEEPALIVE_S`` of idleness.
Errors, each a subclass the client classifies (``client.openai``): :class:`ConnectFailed` (the
``OSError`` of a connect; ``client.session.fd_exhausted`` tells EMFILE), :class:`ConnectTimeout`,
:class:`Disconnected` (a ``ConnectionError``: closed before the response head, or before the body
ended — every chunk that arrived is given out first), :class:`BadResponse` (not HTTP/1.x, a head
larger than ``MAX_HEAD`` bytes, or as many after it in a row carrying no body byte: endless trailers,
say; an upgrade). A body is buffered up to ``HIGH_WATER`` bytes, then the socket is paused until the
reader catches up.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

try:
    import httptools
except ImportError:  # pragma: no cover - depends on the environment
    httptools = None  # type: ignore[assignment]

MAX_HEAD = 64 * 1024  # a response head (status line and headers) larger than this is refused
HIGH_WATER = 4 * 1024 * 1024  # body bytes buffered before reading pauses
LOW_WATER = 1024 * 1024  # ... and resumes
KEEPALIVE_S = 15.0  # an idle connection older than this is closed, not reused (aiohttp's keep-alive timeout)


class HTTPFailure(Exception):
    """Base of the errors below."""


class ConnectFailed(HTTPFailure):
    def __init__(self, os_error: OSError) -> None:
        super().__init__(str(os_error))
        self.os_error = os_error


class ConnectTimeout(HTTPFailure):
    pass


class BadResponse(HTTPFailure):
    pass


class Disconnected(ConnectionError):
    pass


def available() -> bool:
    return httptools is not None


def applies(url: str) -> bool:
    """Whether ``url`` is one this client speaks to: ``http://host[:port][/path]``, no user info."""
    try:
        u = urlsplit(url)
        u.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return False
    return u.scheme == "http" and bool(u.hostname) and u.username is None and u.password is None


class _Conn(asyncio.Protocol):
    """One keep-alive connection; the state of the response it is reading."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.tr: asyncio.Transport | None = None
        self.lost = False
        self.busy = False
        self.paused = False
        self.idle_since = 0.0
        self.reset()

    def reset(self, parser: bool = True) -> None:
        """Ready for a response: a new parser, or (``parser=False``, after a complete keep-alive response)
        the one that read it, which llhttp leaves ready for the next message."""
        if parser:
            self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_at: float | None = None
        self.head_bytes = 0
        self.bare = 0  # bytes read since the head or the last body byte (chunk framing, trailers)
        self.done = False  # the response ended (its body is complete)
        self.keep = False  # ... and the server let the connection live on
        self.exc: BaseException | None = None
        self.chunks: collections.deque[tuple[float, bytes]] = collections.deque()
        self.buffered = 0
        self.waiter: asyncio.Future[None] | None = None
        self._now = 0.0
        self._body: list[bytes] = []

    # -- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = self.clock()  # the arrival of these bytes
        if not self.busy or self.done or self.exc is not None:  # bytes nobody asked for: this connection is spoilt
            self.keep = False
            self._close()
            return
        self._now = now
        pending = self.head_at is None
        if pending:
            self.head_bytes += len(data)
        err: BaseException | None = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            err = BadResponse("the server switched protocols")
        except httptools.HttpParserError as exc:
            err = exc.__cause__ if isinstance(exc.__cause__, BadResponse) else BadResponse(str(exc) or type(exc).__name__)
        # judged after parsing: a read can hold a small head and a large body (held: at most MAX_HEAD + one read)
        if pending and err is None and self.head_bytes > MAX_HEAD and self._headers_pending():
            self._error(BadResponse(f"response head larger than {MAX_HEAD} bytes"))
            return
        body = self._body
        if body:
            chunk = body[0] if len(body) == 1 else b"".join(body)
            body.clear()
            self.chunks.append((now, chunk))
            self.buffered += len(chunk)
            self.bare = 0
            if self.buffered > HIGH_WATER and not self.paused and self.tr is not None:
                self.paused = True
                self.tr.pause_reading()
        elif not pending and not self.done and err is None:
            self.bare += len(data)
            if self.bare > MAX_HEAD:  # endless trailers (which the parser would hold) or chunk framing
                err = BadResponse(f"more than {MAX_HEAD} bytes after the response head without a body byte")
        if err is not None:  # after a complete response, only the connection is spoilt (bytes nobody asked for)
            if not self.done:
                self.exc = err
            self.keep = False
            self._close()
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost ends the body or the request

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.busy and not self.done and self.exc is None:
            if self.head_at is not None and self._until_close():
                self.done = True  # a body without a length ends when the server closes
            else:
                where = "before the response head" if self.head_at is None else "before the response ended"
                self.exc = Disconnected(f"the server closed the connection {where}"
                                        + (f" ({exc})" if exc is not None else ""))
        self.keep = False
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.head_at is not None:
            raise BadResponse("a second response arrived")

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        if key not in self.headers:
            self.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # an interim response (100 Continue): the real one follows
            self.status = status
            self.headers = {}
            return
        self.status = status
        self.head_at = self._now

    def on_body(self, body: bytes) -> None:
        if self.head_at is not None:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self.head_at is None:  # the end of an interim response
            return
        self.done = True
        self.keep = self.parser.should_keep_alive()

    # -- helpers ----------------------------------------------------------------------------------
    def _headers_pending(self) -> bool:
        return self.head_at is None

    def _until_close(self) -> bool:
        h = self.headers
        return ("content-length" not in h and "chunked" not in h.get("transfer-encoding", "").lower()
                and self.status not in (204, 304))

    def _error(self, exc: BaseException) -> None:
        self.exc = exc
        self.keep = False
        self._close()
        self._wake()

    def _close(self) -> None:
        if self.tr is not None and not self.tr.is_closing():
            self.tr.close()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    # -- the reader's side ------------------------------------------------------------------------
    async def head(self) -> None:
        while self.head_at is None:
            if self.exc is not None:
                raise self.exc
            if self.done or self.lost:
                raise Disconnected("the server closed the connection before the response head")
            await self._wait()

    async def next_chunk(self) -> tuple[float, bytes] | None:
        while True:
            chunks = self.chunks
            if chunks:
                got = chunks.popleft()
                self.buffered -= len(got[1])
                if self.paused and self.buffered < LOW_WATER and self.tr is not None:
                    self.paused = False
                    self.tr.resume_reading()
                return got
            if self.exc is not None:
                raise self.exc
            if self.done:
                return None
            await self._wait()


class Response:
    """The response of one :meth:`FastPool.post` (see the module docstring)."""

    __slots__ = ("_conn", "status", "head_at")

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self.status = conn.status
        self.head_at: float = conn.head_at if conn.head_at is not None else 0.0

    def header(self, name: str) -> str | None:
        return self._conn.headers.get(name.lower())

    def next_chunk(self) -> Any:
        """Awaitable: ``(arrival, body bytes of one read)``, or None at the end of the body."""
        return self._conn.next_chunk()

    async def read(self, limit: int) -> bytes:
        """The body, whole, or a :class:`BadResponse` when it is larger than ``limit`` bytes."""
        out: list[bytes] = []
        n = 0
        while (got := await self._conn.next_chunk()) is not None:
            n += len(got[1])
            if n > limit:
                raise BadResponse(f"response body larger than {limit} bytes")
            out.append(got[1])
        return b"".join(out)

    async def read_some(self, n: int) -> bytes:
        """What arrives of the body first, at most ``n`` bytes (b"" when it is empty)."""
        got = await self._conn.next_chunk()
        return b"" if got is None else got[1][:n]


REDIRECTS = (301, 302, 303, 307, 308)


class _Exchange:
    """``async with pool.post(...) as resp``: the connection goes back to the pool, or is closed, on exit.

    A redirect (a 3xx with a Location) is handed to ``redirected``, when given: the request is made again
    there (the client's aiohttp session, which follows redirects), and the pool marks itself
    ``redirected`` so that its owner can send later requests that way at once."""

    __slots__ = ("_pool", "_head", "_body", "_conn", "_redirected", "_alt")

    def __init__(self, pool: FastPool, head: bytes, body: bytes, redirected: Callable[[], Any] | None) -> None:
        self._pool, self._head, self._body, self._redirected = pool, head, body, redirected
        self._conn: _Conn | None = None
        self._alt: Any = None

    async def __aenter__(self) -> Any:
        conn = self._conn = await self._pool._acquire()
        conn.busy = True
        try:
            assert conn.tr is not None
            conn.tr.write(self._head + self._body)
            await conn.head()
        except BaseException:
            self._conn = None
            self._pool._release(conn, False)
            raise
        if conn.status in REDIRECTS and self._redirected is not None and "location" in conn.headers:
            self._conn = None
            self._pool._release(conn, False)
            self._pool.redirected = True
            self._alt = self._redirected()
            return await self._alt.__aenter__()
        return Response(conn)

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._alt is not None:
            await self._alt.__aexit__(et, e, tb)
            return
        conn = self._conn
        if conn is not None:
            self._conn = None
            self._pool._release(conn, et is None)


class FastPool:
    """Keep-alive connections to one ``http://`` origin (see the module docstring)."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 10.0, clock: Callable[[], float]) -> None:
        if httptools is None:
            raise RuntimeError("the fast HTTP client needs httptools (a core dependency: reinstall infermeter)")
        u = urlsplit(base_url)
        if not applies(base_url):
            raise ValueError(f"the fast HTTP client speaks only plain http://host[:port]: {base_url!r}")
        assert u.hostname is not None
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.netloc = u.netloc.encode("idna" if not u.netloc.isascii() else "ascii")
        self.connect_timeout_s = connect_timeout_s
        self.clock = clock
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self.closed = False
        self.redirected = False  # a response was a redirect (see _Exchange)

    def head(self, path: str, headers: dict[str, str]) -> bytes:
        """The request line and headers for POSTs to ``path`` (Content-Length is added per request by
        :meth:`post`): made once by the caller and reused."""
        lines = [f"POST {self.prefix}{path} HTTP/1.1".encode("ascii"), b"Host: " + self.netloc]
        lines += [f"{k}: {v}".encode("latin-1") for k, v in headers.items()]
        if any(c in line for line in lines for c in (b"\r", b"\n", b"\0")):  # would end the head early (aiohttp refuses)
            raise ValueError("a header holds a line break or NUL")
        if not any(k.lower() == "accept-encoding" for k in headers):
            lines.append(b"Accept-Encoding: identity")
        return b"\r\n".join(lines) + b"\r\nContent-Length: "

    def post(self, head: bytes, body: bytes, redirected: Callable[[], Any] | None = None) -> _Exchange:
        """``async with`` this: the :class:`Response` (see :class:`_Exchange` for ``redirected``)."""
        return _Exchange(self, b"%s%d\r\n\r\n" % (head, len(body)), body, redirected)

    async def _acquire(self) -> _Conn:
        idle = self._idle
        if idle:
            loop = asyncio.get_running_loop()
            while idle:
                conn = idle.pop()
                if not conn.lost and conn.tr is not None and not conn.tr.is_closing():
                    if loop.time() - conn.idle_since <= KEEPALIVE_S:
                        return conn
                    conn._close()  # a peer (or a box between) may have dropped it without a word
                self._all.discard(conn)
        if self.closed:
            raise Disconnected("the client is closed")
        loop = asyncio.get_running_loop()
        clock = self.clock
        try:
            async with asyncio.timeout(self.connect_timeout_s) as cm:
                _, conn = await loop.create_connection(lambda: _Conn(clock), self.host, self.port)
        except TimeoutError:
            if cm.expired():
                raise ConnectTimeout(f"no connection to {self.host}:{self.port} within "
                                     f"{self.connect_timeout_s:g} s") from None
            raise
        except OSError as exc:
            raise ConnectFailed(exc) from exc
        self._all.add(conn)
        return conn

    def _release(self, conn: _Conn, clean: bool) -> None:
        conn.busy = False
        conn.waiter = None
        if clean and conn.done and conn.keep and not conn.lost and conn.exc is None and not self.closed:
            if conn.paused and conn.tr is not None:  # a body left unread past the high water: read the next response
                conn.paused = False
                conn.tr.resume_reading()
            conn.reset(parser=False)
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
            return
        conn._close()
        self._all.discard(conn)

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._all):
            conn._close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run
