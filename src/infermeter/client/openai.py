"""OpenAI-compatible streaming client: one request in, one filled record out.

``OpenAIClient.send(spec, record)`` sends a chat or completions request with
``stream: true`` and ``stream_options.include_usage``, timestamps every phase on
the run clock, and classifies any failure (``client.errors``). It never raises
for a failed request: the record carries the outcome. Usage::

    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:8000", model="m"),
                          session=aiohttp_session, clock=run_clock)
    await client.send(spec, record)   # record.first_token_at, chunk_times, ...

Per-engine quirks handled here: ``data:`` without a space, comment pings,
usage chunks with empty ``choices``, a final chunk without ``[DONE]`` (a
``finish_reason`` or usage ends the request too), ``reasoning_content`` deltas,
a plain JSON answer when a server ignores ``stream``, and error objects sent
inside the stream.

Reasoning models: ``delta.reasoning_content`` / ``delta.reasoning`` and ``<think>`` tags in the
content are the model's thinking (``client.reasoning``). ``first_token_at`` is the first chunk of
either; ``first_answer_at`` the first chunk of the answer; ``reasoning_tokens`` /
``answer_tokens`` split the completion (usage ``completion_tokens_details.reasoning_tokens`` when
the server sent one no larger than ``completion_tokens``, else the thinking chunks' tokens). The
thinking's text counts in the bytes a usage is checked against.

A server's numbers are data, not trusted: ``usage`` counts that are not
non-negative integers, or that claim more than the response could carry (more
completion tokens than the UTF-8 bytes of its text plus one per chunk plus
``COMPLETION_SLACK``; more prompt tokens than the request's bytes plus
``PROMPT_SLACK``; more cached tokens than prompt tokens) are set aside:
``usage_source = 'rejected'``, the counts are the stream's own (the prompt's: the
request's), and an ok record's ``error_detail`` says why. Nothing is allocated
by a server's claim. A response that carried no token at all (only ``[DONE]``,
only a usage chunk) is ``empty_response`` unless ``max_tokens`` was 0.

Transport: a plain ``http://`` server is spoken to by the fast HTTP/1.1 client
(``client.fasthttp``) when httptools is installed, anything else (or
``INFERMETER_HTTP_CLIENT=aiohttp``) through the aiohttp session (:func:`http_client_for`);
both give each socket read's bytes with its arrival time, and every event those bytes
complete is stamped with it. The events of one read are handled together
(:meth:`OpenAIClient._on_events`: the same record as one by one).

Encodings: the session asks for ``Accept-Encoding: identity``
(``client.session``); a server or proxy that compresses anyway gets its gzip or
deflate body decoded incrementally (each decoded piece keeps the arrival time of
the read that brought it); any other ``Content-Encoding`` is a
``malformed_response`` whose detail names it.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib
from collections.abc import Callable
from typing import Any, TypeGuard

import aiohttp
from pydantic import BaseModel, ConfigDict

from infermeter.client import fasthttp
from infermeter.client.errors import RequestFailed, http_detail, http_error_class
from infermeter.client.reasoning import ReasoningSplit
from infermeter.client.session import FdLimitError, fd_exhausted
from infermeter.client.sse import SSEError, SSEParser
from infermeter.records.record import ERROR, NOT_STREAMED, OK, REJECTED, RequestRecord
from infermeter.errors import UserError
from infermeter.redact import clip, redact_text, remember_secret

try:  # optional speed-up
    import orjson

    _loads: Callable[[str | bytes], Any] = orjson.loads
    _dumps: Callable[[Any], bytes] | None = orjson.dumps
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _dumps = None


class ClientConfig(BaseModel):
    """How to talk to the server (no secrets are ever written from here)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api: str = "chat"  # chat | completions
    api_key: str | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    extra_body: dict[str, Any] = {}
    connect_timeout_s: float = 10.0
    first_token_timeout_s: float | None = 120.0
    total_timeout_s: float | None = 600.0

    def public(self) -> dict[str, Any]:
        d = self.model_dump()
        d["api_key"] = "***" if self.api_key else None
        return d


COMPLETION_SLACK = 8  # tokens that stream no text: EOS, a few special tokens
PROMPT_SLACK = 65_536  # tokens a prompt may add beyond its bytes: a chat template, images
COUNT_MAX = 2**53  # a count above this is never stored, not even until the end of the stream
_PIECE = 1 << 20  # a compressed read is decoded in pieces of at most this many bytes
BODY_MAX = 64 * 1024 * 1024  # a compressed JSON answer larger than this decoded is malformed

_FINISHED = 1  # a choice carried finish_reason
_TERMINAL = 2  # [DONE] or the final usage chunk: nothing more belongs to the response


def _count(v: Any) -> TypeGuard[int]:
    return type(v) is int and v >= 0


def _text(v: Any) -> str:
    """Text of a delta field; anything but a string is malformed."""
    if type(v) is not str:
        raise RequestFailed("malformed_response", f"text field is not a string: {str(v)[:80]!r}")
    return v


class StreamTally:
    """What one response carried, the measure its usage is checked against: each token-bearing
    chunk's text length (characters), the UTF-8 bytes of all its text (content, reasoning, tool
    calls), the events with choices, and why its usage was rejected (None: not rejected); and which
    chunks were a reasoning model's thinking, with the usage's count of them."""

    __slots__ = ("char_lens", "bytes", "events", "usage_why", "split", "usage_reasoning")

    def __init__(self) -> None:
        self.char_lens: list[int] = []
        self.bytes = 0
        self.events = 0
        self.usage_why: str | None = None
        self.split = ReasoningSplit()  # which chunks were thinking (client.reasoning)
        self.usage_reasoning: int | None = None  # usage completion_tokens_details.reasoning_tokens


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class _Decoder:
    """Incremental gzip/deflate decoding of a body compressed although the client asked for identity.

    ``decode`` yields pieces of at most ``_PIECE`` bytes, so a small compressed read that expands
    hugely is parsed (and its oversized event refused by the SSE parser) piece by piece, never held
    whole. HTTP ``deflate`` is zlib-wrapped by the standard; raw deflate is accepted too."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        gzip = encoding in ("gzip", "x-gzip")
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
        self._probe: bytes | None = None if gzip else b""  # deflate: zlib-wrapped or raw, told by the first bytes

    @staticmethod
    def of(header: str | None) -> _Decoder | None:
        enc = (header or "").strip().lower()
        if enc in ("", "identity"):
            return None
        if enc in ("gzip", "x-gzip", "deflate"):
            return _Decoder(enc)
        raise RequestFailed("malformed_response", f"the server sent Content-Encoding {enc!r}, which the client cannot "
                                                  "read (it asks for identity; only gzip and deflate are decoded)")

    def decode(self, data: bytes) -> Any:
        if self._probe is not None:  # deflate, undecided: a zlib header is CMF/FLG with (CMF*256+FLG) % 31 == 0
            data = self._probe + data
            if len(data) < 2:
                self._probe = data
                return
            if not (data[0] & 0x0F == 8 and (data[0] * 256 + data[1]) % 31 == 0):
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            self._probe = None
        try:
            while data:
                piece = self._z.decompress(data, _PIECE)
                if piece:
                    yield piece
                data = self._z.unconsumed_tail
        except zlib.error as exc:
            raise RequestFailed("malformed_response", f"cannot decode the {self.encoding} body: {exc}") from None

    def flush(self) -> bytes:
        try:
            return self._z.flush() if self._probe is None else b""
        except zlib.error as exc:
            raise RequestFailed("malformed_response", f"cannot decode the {self.encoding} body: {exc}") from None

    def whole(self, data: bytes, limit: int) -> bytes:
        out: list[bytes] = []
        n = 0
        for piece in self.decode(data):
            n += len(piece)
            if n > limit:
                raise RequestFailed("malformed_response",
                                    f"the {self.encoding} body decodes to more than {limit} bytes")
            out.append(piece)
        return b"".join(out) + self.flush()


def _body_text(raw: bytes, header: str | None) -> str:
    """An error body as text for the detail: decoded when gzip/deflate, else named when unreadable."""
    enc = (header or "").strip().lower()
    if enc not in ("", "identity"):
        if enc not in ("gzip", "x-gzip", "deflate"):
            return f"({len(raw)} bytes in Content-Encoding {enc!r}, which the client cannot read)"
        out = b""
        try:  # the first 2048 bytes of the body: a truncated stream, decoded as far as it goes
            for piece in _Decoder(enc).decode(raw):
                out += piece
                if len(out) >= 2048:
                    break
        except RequestFailed:
            if not out:
                return f"({len(raw)} bytes of an unreadable {enc} body)"
        raw = out
    return raw.decode("utf-8", "replace")


def allocate_tokens(char_lens: list[int], total: int) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to their text length (each >= 1).

    Used when the server's usage says more tokens than token-bearing chunks
    (servers that put several tokens in one chunk: a loaded server coalesces
    the tokens that fell due while it was busy). Each chunk's share is
    ``total x chars / all chars``, rounded by largest remainder, then a chunk
    left with none takes one from the largest: where every token has the same
    text the split is exact (a 3-token chunk among 1-token ones gets 3).
    """
    n = len(char_lens)
    if n == 0:
        return []
    if total <= n:
        return [1] * n
    weights = [max(c, 0) for c in char_lens]
    wsum = sum(weights)
    if wsum == 0:
        weights, wsum = [1] * n, n
    shares = [total * w / wsum for w in weights]
    base = [int(s) for s in shares]
    left = total - sum(base)
    order = sorted(range(n), key=lambda i: shares[i] - base[i], reverse=True)
    for i in order[:left]:
        base[i] += 1
    for i in range(n):  # every chunk carried a token (total > n leaves a donor with 2 or more)
        if base[i] == 0:
            donor = max(range(n), key=lambda j: base[j])
            base[donor] -= 1
            base[i] = 1
    return base


HTTP_CLIENT_ENV = "INFERMETER_HTTP_CLIENT"


def http_client_for(base_url: str, want: str | None = None) -> str:
    """Which HTTP client streams the requests to ``base_url``: ``fast`` (``client.fasthttp``) or ``aiohttp``.

    ``want`` (default: ``INFERMETER_HTTP_CLIENT``, else ``auto``): ``auto`` is ``fast`` for a plain
    ``http://`` URL when httptools (a core dependency) imports, else ``aiohttp``; ``fast``
    insists (a clear error when it cannot); ``aiohttp`` never uses the fast client."""
    want = (want if want is not None else os.environ.get(HTTP_CLIENT_ENV) or "auto").strip().lower()
    if want not in ("auto", "fast", "aiohttp"):
        raise UserError(f"{HTTP_CLIENT_ENV}={want!r}: expected auto, fast or aiohttp")
    if want == "aiohttp":
        return "aiohttp"
    ok = fasthttp.available() and fasthttp.applies(base_url)
    if want == "fast" and not ok:
        why = ("httptools is not installed (a core dependency: reinstall infermeter)" if not fasthttp.available()
               else f"it speaks only plain http://host[:port], not {base_url}")
        raise UserError(f"{HTTP_CLIENT_ENV}=fast, but the fast HTTP client cannot be used: {why}")
    return "fast" if ok else "aiohttp"


class OpenAIClient:
    """Sends one request at a time per call; share one instance across tasks.

    ``http_client`` (``auto``/``fast``/``aiohttp``, default ``INFERMETER_HTTP_CLIENT``): see
    :func:`http_client_for`; ``self.http_client`` says which one streams. The fast client holds its
    own connections: :meth:`close` them (or use the client as ``async with``) when done."""

    def __init__(self, config: ClientConfig, session: aiohttp.ClientSession, clock: Callable[[], float],
                 http_client: str | None = None) -> None:
        self.config = config
        self.session = session
        self.clock = clock
        remember_secret(config.api_key)  # masked at every cut from now on, however the config was built
        self._chat = config.api == "chat"
        self._path = "/v1/chat/completions" if self._chat else "/v1/completions"
        self._url = config.base_url.rstrip("/") + self._path
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"
        self.http_client = http_client_for(config.base_url, http_client)
        self._pool: fasthttp.FastPool | None = None
        if self.http_client == "fast":
            self._pool = fasthttp.FastPool(config.base_url, connect_timeout_s=config.connect_timeout_s, clock=clock)
            try:
                self._head = self._pool.head(self._path, self._headers)
            except ValueError:  # a header HTTP/1.1 cannot carry (a non-Latin-1 key, a line break): aiohttp's error, per request
                self._pool = None
                self.http_client = "aiohttp"

    async def close(self) -> None:
        """Close the fast client's connections (the aiohttp session is its owner's to close)."""
        if self._pool is not None:
            await self._pool.close()

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _post(self, data: bytes) -> Any:
        """``async with`` this: the response, as :class:`fasthttp.Response` or :class:`_AioResponse`."""
        if self._pool is not None and not self._pool.redirected:
            return self._pool.post(self._head, data, lambda: self._aio_post(data))
        return self._aio_post(data)

    def _aio_post(self, data: bytes) -> _AioExchange:
        return _AioExchange(self.session.post(self._url, data=data, headers=self._headers), self.clock)

    def body(self, spec: Any) -> bytes:
        c = self.config
        body: dict[str, Any] = {"model": c.model, "stream": True, "stream_options": {"include_usage": True},
                                "max_tokens": spec.max_tokens}
        if self._chat:
            body["messages"] = list(spec.messages) if spec.messages is not None else [{"role": "user", "content": spec.prompt or ""}]
        else:
            body["prompt"] = spec.prompt if spec.prompt is not None else "\n".join(m.get("content", "") for m in spec.messages or ())
        if c.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = spec.max_tokens
        if c.temperature is not None:
            body["temperature"] = c.temperature
        body.update(c.extra_body)
        if _dumps is not None:
            try:
                return _dumps(body)  # compact UTF-8 JSON, the same document json.dumps makes
            except TypeError:  # what orjson refuses (a lone surrogate, an int past 64 bits): json decides
                pass
        return json.dumps(body, ensure_ascii=False).encode()

    async def send(self, spec: Any, rec: RequestRecord, body: bytes | None = None) -> None:
        """Send ``spec`` and fill ``rec`` in place (timestamps, tokens, outcome)."""
        c = self.config
        clock = self.clock
        rec.requested_output_tokens = spec.max_tokens
        rec.requested_input_tokens = spec.input_tokens
        tally = StreamTally()
        try:
            data = body if body is not None else self.body(spec)
        except (UnicodeError, TypeError, ValueError, OverflowError) as exc:  # e.g. a lone surrogate in a prompt
            self._fail(rec, "request_encoding_error", clip(f"request not sent: its body cannot be encoded "
                                                           f"({type(exc).__name__}: {exc})", 300, (c.api_key,)))
            self._finish_tokens(rec, tally)
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline_first = start + c.first_token_timeout_s if c.first_token_timeout_s else None
        deadline_total = start + c.total_timeout_s if c.total_timeout_s else None
        first_deadline = min(d for d in (deadline_first, deadline_total, float("inf")) if d is not None)
        try:
            async with asyncio.timeout_at(None if first_deadline == float("inf") else first_deadline) as tmo:
                rec.sent_at = clock()
                async with self._post(data) as resp:
                    rec.first_byte_at = resp.head_at
                    rec.http_status = resp.status
                    if resp.status != 200:
                        text = _body_text(await resp.read_some(2048), resp.header("Content-Encoding"))
                        raise RequestFailed(http_error_class(resp.status), http_detail(resp.status, text), resp.status)
                    dec = _Decoder.of(resp.header("Content-Encoding"))
                    ctype = resp.header("Content-Type") or ""
                    if "text/event-stream" not in ctype:
                        raw = await resp.read(BODY_MAX)
                        self._handle_plain(raw if dec is None else dec.whole(raw, BODY_MAX), rec, tally)
                    else:
                        finished = await self._read_stream(resp, rec, tally, tmo, deadline_total, dec)
                        if not finished:
                            if rec.first_token_at is None:
                                raise RequestFailed("stream_cut" if rec.stream_tokens == 0 and rec.usage_source else "malformed_response",
                                                    "stream ended before any token and without a finish")
                            raise RequestFailed("stream_cut", f"stream ended after {rec.stream_tokens} chunks without a finish")
                    if rec.stream_tokens == 0 and tally.bytes == 0 and spec.max_tokens != 0:
                        raise RequestFailed("empty_response", _empty_detail(rec, "text/event-stream" in ctype))
            if rec.ended_at is None:
                rec.ended_at = clock()
            rec.outcome = OK
        except RequestFailed as exc:
            self._fail(rec, exc.error_class, exc.detail)
        except (aiohttp.ServerTimeoutError, fasthttp.ConnectTimeout) as exc:
            self._fail(rec, "connect_timeout", f"no connection within {c.connect_timeout_s:g} s: {exc}")
        except TimeoutError:
            if rec.first_token_at is None and deadline_first is not None and (
                deadline_total is None or deadline_first < deadline_total
            ):
                self._fail(rec, "first_token_timeout", f"no token within {c.first_token_timeout_s:g} s")
            else:
                self._fail(rec, "total_timeout", f"not finished within {c.total_timeout_s:g} s")
        except FdLimitError as exc:  # this client's own limit, not the server's refusal (client.session)
            self._fail(rec, "client_fd_limit", exc.detail())
        except aiohttp.ClientConnectorError as exc:
            self._fail(rec, "connect_error", f"cannot connect to {self.config.base_url}: {exc.os_error}")
        except fasthttp.ConnectFailed as exc:
            fd = fd_exhausted(exc.os_error)
            if fd is not None:  # this client's own limit (client.session)
                self._fail(rec, "client_fd_limit", f"this client ran out of file descriptors connecting to "
                                                   f"{self._pool.host if self._pool else c.base_url}:"
                                                   f"{self._pool.port if self._pool else ''} ({fd.strerror or fd}); "
                                                   "raise `ulimit -n` or lower the concurrency")
            else:
                self._fail(rec, "connect_error", f"cannot connect to {self.config.base_url}: {exc.os_error}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError, ConnectionError) as exc:
            if rec.first_byte_at is None:
                self._fail(rec, "connect_error", f"connection broke before a response: {type(exc).__name__}")
            else:
                where = "after" if rec.first_token_at is not None else "before"
                self._fail(rec, "stream_cut", f"connection broke {where} the first token: {type(exc).__name__}")
        except (SSEError, UnicodeDecodeError) as exc:
            self._fail(rec, "malformed_response", str(exc))
        except aiohttp.ClientResponseError as exc:
            self._fail(rec, "malformed_response", f"bad HTTP response: {exc.message}")
        except fasthttp.BadResponse as exc:
            self._fail(rec, "malformed_response", f"bad HTTP response: {exc}")
        except aiohttp.ClientError as exc:
            self._fail(rec, "connect_error", f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a response shaped in a way nobody foresaw is still a recorded failure
            self._fail(rec, "malformed_response", f"unreadable response ({type(exc).__name__}: {exc})")
        self._finish_tokens(rec, tally, len(data))

    async def _read_stream(self, resp: Any, rec: RequestRecord, tally: StreamTally,
                           tmo: asyncio.Timeout, deadline_total: float | None, dec: _Decoder | None = None) -> bool:
        """Read events until ``[DONE]`` or the final usage chunk (or the connection closes).

        ``resp.next_chunk()`` gives each socket read's bytes with its arrival time: every event a
        read completes is stamped with that time. Sets ``rec.ended_at`` to the arrival of the event
        that finished the response, not to when the connection closed, including a last event
        flushed at close (its bytes came with the last read)."""
        parser = SSEParser()
        chat = self._chat
        finished = False
        times = rec.chunk_times
        rescheduled = False
        on_events = self._on_events
        feed = parser.feed_raw
        nxt = resp.next_chunk
        now = self.clock()
        while (got := await nxt()) is not None:
            now, raw = got  # the arrival of these bytes: every event they complete is stamped with it
            for piece in (raw,) if dec is None else dec.decode(raw):
                datas = feed(piece)
                if datas:
                    state = on_events(datas, now, rec, tally, chat, times)
                    if state and not finished:
                        finished = True
                        rec.ended_at = now
                    if state == _TERMINAL:
                        rec.ended_at = now
                        return True
            if not rescheduled and rec.first_token_at is not None:
                tmo.reschedule(deadline_total)
                rescheduled = True
        # The connection closed with an event left unterminated (no blank line after it): its bytes
        # arrived with the last read, at ``now``, not when the server got round to closing.
        tail = parser.feed(dec.flush()) if dec is not None else []
        for ev in tail + parser.close():
            state = self._on_event(ev.data, now, rec, tally, chat, times)
            if state and not finished:
                finished = True
                rec.ended_at = now
        return finished

    def _on_events(self, datas: list[str | bytes], now: float, rec: RequestRecord, tally: StreamTally, chat: bool,
                   times: list[float]) -> int:
        """The SSE data payloads of one read, in order, as :meth:`_on_event` would take them one by one:
        _FINISHED when one of them carried a finish_reason, _TERMINAL at the first that ends the
        response (those after it are not looked at), else 0.

        The usual event (one choice whose delta or text is non-empty text, no finish_reason, no usage,
        no reasoning field) is counted here; the tally's sums and the thinking flags of a run of them
        are taken once, before any other event and at the end of the read (:meth:`_plain`). A payload in
        bytes (``SSEParser.feed_raw``) is parsed as it is; one that is not valid UTF-8 JSON is decoded
        (invalid bytes replaced) and handled as text, as :meth:`_on_event` would have it."""
        loads = _loads
        run: list[str] = []  # the usual events' texts not yet in the tally
        state = 0
        obj: Any
        for data in datas:
            obj = None
            try:  # the usual event's shape, looked up directly: any other raises, or leaves text not a str
                obj = loads(data)
                c0 = obj["choices"][0]
                if chat:
                    delta = c0["delta"]
                    text = delta["content"]
                    if "reasoning_content" in delta or "reasoning" in delta:
                        text = None
                else:
                    text = c0["text"]
            except (ValueError, LookupError, TypeError):
                text = None
            if type(text) is str and text and not c0.get("finish_reason") and not obj.get("usage"):
                run.append(text)
                continue
            if run:
                self._plain(run, now, rec, tally, times)
            text_data = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
            st = self._on_event(text_data, now, rec, tally, chat, times) if obj is None \
                else self._on_obj(obj, text_data, now, rec, tally, chat, times)
            if st == _TERMINAL:
                return st
            state |= st
        if run:
            self._plain(run, now, rec, tally, times)
        return state

    @staticmethod
    def _plain(run: list[str], now: float, rec: RequestRecord, tally: StreamTally, times: list[float]) -> None:
        """Count a run of usual events (see :meth:`_on_events`), all arrived at ``now``, and empty ``run``."""
        if rec.first_token_at is None:
            rec.first_token_at = now
        times += [now] * len(run)
        tally.char_lens += map(len, run)
        tally.split.plain(run)
        text = "".join(run)
        tally.bytes += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        rec.stream_tokens += len(run)
        tally.events += len(run)
        run.clear()

    def _on_event(self, data: str, now: float, rec: RequestRecord, tally: StreamTally, chat: bool,
                  times: list[float]) -> int:
        """Handle one SSE data payload: 0, _FINISHED (a finish_reason) or _TERMINAL ([DONE], final usage)."""
        if data == "[DONE]":
            return _TERMINAL
        if not data:
            return 0
        try:
            obj = _loads(data)
        except ValueError:
            raise RequestFailed("malformed_response", f"invalid JSON in stream: {data[:80]!r}") from None
        return self._on_obj(obj, data, now, rec, tally, chat, times)

    def _on_obj(self, obj: Any, data: str, now: float, rec: RequestRecord, tally: StreamTally, chat: bool,
                times: list[float]) -> int:
        """:meth:`_on_event` once ``data`` is parsed into ``obj``."""
        if type(obj) is not dict:
            raise RequestFailed("malformed_response", f"stream event is not a JSON object: {data[:80]!r}")
        choices = obj.get("choices")
        if choices:
            c0 = choices[0] if type(choices) is list else None
            if type(c0) is not dict:
                raise RequestFailed("malformed_response", f"'choices' is not a list of objects: {data[:80]!r}")
            reasoning = ""
            if chat:
                delta = c0.get("delta") or c0.get("message") or {}
                if type(delta) is not dict:
                    raise RequestFailed("malformed_response", f"'delta' is not an object: {data[:80]!r}")
                content = delta.get("content") or ""
                if "reasoning_content" in delta or "reasoning" in delta:
                    reasoning = _text(delta.get("reasoning_content") or delta.get("reasoning") or "")
            else:
                content = c0.get("text") or ""
            if type(content) is not str:
                content = _text(content)
            text = content + reasoning if reasoning else content
            if text:
                if rec.first_token_at is None:
                    rec.first_token_at = now
                tally.split.chunk(content, reasoning)
                times.append(now)
                n = len(text)
                tally.char_lens.append(n)
                tally.bytes += n if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                rec.stream_tokens += 1
            elif chat and ("tool_calls" in delta or "function_call" in delta):
                tally.bytes += _utf8_len(data)  # tokens without text (a tool call): the event's bytes bound them
            tally.events += 1
            fr = c0.get("finish_reason")
            if fr:
                rec.finish_reason = fr if type(fr) is str else str(fr)[:40]
            done = _FINISHED if fr else 0
        else:
            if "error" in obj:
                err = obj["error"]
                msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                raise RequestFailed("stream_cut" if rec.first_token_at is not None else "http_5xx",
                                    f"server error in stream: {msg}")  # RequestFailed redacts, then cuts
            done = 0
        usage = obj.get("usage")
        if usage:
            self._usage(rec, usage, tally)
            if not choices:
                done = _TERMINAL
        return done

    @staticmethod
    def _usage(rec: RequestRecord, usage: Any, tally: StreamTally) -> None:
        """Take the server's usage (the last one sent wins); one that is not counts is rejected, not fatal."""
        rec.prompt_tokens = rec.completion_tokens = rec.cached_tokens = None
        tally.usage_reasoning = None
        if type(usage) is not dict:
            _reject(rec, tally, f"'usage' is not an object: {str(usage)[:80]!r}")
            return
        p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not _count(p) or not _count(c):
            _reject(rec, tally, f"usage token counts are not non-negative integers: {str(usage)[:80]!r}")
            return
        if p > COUNT_MAX or c > COUNT_MAX:
            _reject(rec, tally, f"usage claims completion_tokens {c}, prompt_tokens {p}")
            return
        rec.prompt_tokens, rec.completion_tokens = p, c
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and _count(details.get("cached_tokens")) and details["cached_tokens"] <= COUNT_MAX:
            rec.cached_tokens = details["cached_tokens"]
        out_details = usage.get("completion_tokens_details") or {}
        r = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
        tally.usage_reasoning = r if _count(r) and r <= c else None  # more than completion_tokens: not taken
        rec.usage_source = "server"
        tally.usage_why = None

    def _handle_plain(self, raw: bytes, rec: RequestRecord, tally: StreamTally) -> None:
        """A server that ignored ``stream``: tokens arrived at once, so TTFT/TPOT/ITL stay undefined."""
        try:
            obj = _loads(raw)
        except ValueError:
            raise RequestFailed("malformed_response", f"response is neither SSE nor JSON: {raw[:80]!r}") from None
        if not isinstance(obj, dict) or not obj.get("choices") or type(obj["choices"]) is not list \
                or type(obj["choices"][0]) is not dict:
            raise RequestFailed("malformed_response", f"response has no choices: {raw[:80]!r}")
        c0 = obj["choices"][0]
        fr = c0.get("finish_reason")
        rec.finish_reason = fr if type(fr) is str else None
        rec.error_detail = NOT_STREAMED + ": the server answered with one JSON body"
        msg = c0.get("message")
        for v in ((msg.get("content"), msg.get("reasoning_content") or msg.get("reasoning"), msg.get("tool_calls"))
                  if isinstance(msg, dict)
                  else (c0.get("text"),)):
            if v:  # the text the answer carried bounds its usage (tool calls: their JSON)
                tally.bytes += _utf8_len(v if type(v) is str else json.dumps(v))
        tally.events = 1
        if obj.get("usage"):
            self._usage(rec, obj["usage"], tally)

    def _fail(self, rec: RequestRecord, error_class: str, detail: str) -> None:
        rec.outcome = ERROR
        rec.error_class = error_class
        rec.error_detail = redact_text(detail, (self.config.api_key,))  # servers may echo the key
        rec.ended_at = self.clock()

    @staticmethod
    def _finish_tokens(rec: RequestRecord, tally: StreamTally, body_bytes: int | None = None) -> None:
        """Final token counts: the server's usage when plausible (see the module docstring), else the stream's;
        ``chunk_tokens`` spread over the chunks (a bounded list, one entry per chunk)."""
        char_lens = tally.char_lens
        if rec.usage_source == "server":
            why = _implausible(rec, tally, body_bytes)
            if why:
                _reject(rec, tally, why)
        if rec.usage_source == REJECTED:
            rec.prompt_tokens = rec.completion_tokens = rec.cached_tokens = None
            if rec.outcome == OK:
                note = f"usage rejected: {tally.usage_why}; the stream's count is used"
                rec.error_detail = f"{rec.error_detail}; {note}" if rec.error_detail else note
        eos_extra = rec.finish_reason == "stop" and rec.completion_tokens == rec.stream_tokens + 1
        split = tally.split
        split.finish()
        flags = split.flags
        used = tally.usage_reasoning if rec.usage_source == "server" else None
        if rec.usage_source == "server" and rec.completion_tokens is not None and rec.completion_tokens != rec.stream_tokens \
                and rec.outcome == OK and char_lens and not eos_extra:
            rec.chunk_tokens = _allocate(char_lens, rec.completion_tokens, flags, used)
        else:
            rec.chunk_tokens = [1] * len(char_lens)
        first = split.first_answer()
        rec.first_answer_at = rec.chunk_times[first] if first is not None and first < len(rec.chunk_times) else None
        streamed_reasoning = sum(k for k, f in zip(rec.chunk_tokens, flags) if f) if True in flags else 0
        if rec.usage_source is None or rec.usage_source == REJECTED:
            rec.prompt_tokens = rec.requested_input_tokens
            if rec.error_detail and rec.error_detail.startswith(NOT_STREAMED):
                return  # one JSON body and no (usable) usage: the output token count is unknown, not 0
            rec.usage_source = rec.usage_source or "stream"
            rec.completion_tokens = rec.stream_tokens
        if used is not None:
            rec.reasoning_tokens = used
        elif flags or not (rec.error_detail and rec.error_detail.startswith(NOT_STREAMED)):
            rec.reasoning_tokens = streamed_reasoning
        if rec.reasoning_tokens is not None and rec.completion_tokens is not None:
            rec.reasoning_tokens = min(rec.reasoning_tokens, rec.completion_tokens)
            rec.answer_tokens = rec.completion_tokens - rec.reasoning_tokens


def _allocate(char_lens: list[int], total: int, flags: list[bool], reasoning: int | None) -> list[int]:
    """``allocate_tokens`` over the chunks; with the usage's count of thinking tokens, the thinking
    chunks share that count and the answer chunks the rest (when each side can hold its share)."""
    thinking = [i for i, f in enumerate(flags) if f]
    if reasoning is None or not thinking or len(thinking) == len(flags) or len(flags) != len(char_lens) \
            or reasoning < len(thinking) or total - reasoning < len(flags) - len(thinking):
        return allocate_tokens(char_lens, total)
    answer = [i for i, f in enumerate(flags) if not f]
    out = [0] * len(char_lens)
    for idx, n in ((thinking, reasoning), (answer, total - reasoning)):
        for i, k in zip(idx, allocate_tokens([char_lens[i] for i in idx], n)):
            out[i] = k
    return out


def _reject(rec: RequestRecord, tally: StreamTally, why: str) -> None:
    rec.usage_source = REJECTED
    rec.prompt_tokens = rec.completion_tokens = rec.cached_tokens = None
    tally.usage_why = why


def _implausible(rec: RequestRecord, tally: StreamTally, body_bytes: int | None) -> str | None:
    """Why the server's usage cannot be true of this response (None: it can)."""
    c, p, cached = rec.completion_tokens, rec.prompt_tokens, rec.cached_tokens
    carry = tally.bytes + tally.events + COMPLETION_SLACK
    if c is not None and c > carry:
        return (f"completion_tokens {c} > {carry}, the most {tally.bytes} bytes of text in {tally.events} "
                f"chunks could carry")
    if p is not None and body_bytes is not None and p > body_bytes + PROMPT_SLACK:
        return f"prompt_tokens {p} > {body_bytes + PROMPT_SLACK}, the request's {body_bytes} bytes + {PROMPT_SLACK}"
    if cached is not None and p is not None and cached > p:
        return f"cached_tokens {cached} > prompt_tokens {p}"
    return None


def _empty_detail(rec: RequestRecord, streamed: bool) -> str:
    what = "the stream ended without a token" if streamed else "the JSON answer carried no text"
    if rec.finish_reason:
        what += f" (finish_reason {rec.finish_reason!r})"
    if rec.completion_tokens:
        what += f"; its usage claims {rec.completion_tokens} completion tokens"
    return what


class _AioResponse:
    """An aiohttp response seen through the interface of :class:`fasthttp.Response` (each read stamped
    with ``clock`` when it reaches the client)."""

    __slots__ = ("_resp", "_clock", "status", "head_at")

    def __init__(self, resp: aiohttp.ClientResponse, clock: Callable[[], float]) -> None:
        self._resp, self._clock = resp, clock
        self.status = resp.status
        self.head_at = clock()

    def header(self, name: str) -> str | None:
        return self._resp.headers.get(name)

    async def next_chunk(self) -> tuple[float, bytes] | None:
        raw = await self._resp.content.readany()
        return (self._clock(), raw) if raw else None

    async def read(self, limit: int) -> bytes:
        return await self._resp.read()

    async def read_some(self, n: int) -> bytes:
        return await self._resp.content.read(n)


class _AioExchange:
    __slots__ = ("_cm", "_clock")

    def __init__(self, cm: Any, clock: Callable[[], float]) -> None:
        self._cm, self._clock = cm, clock

    async def __aenter__(self) -> _AioResponse:
        return _AioResponse(await self._cm.__aenter__(), self._clock)

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(*exc)
