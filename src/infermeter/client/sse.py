"""Incremental Server-Sent Events parser for streamed completions.

Feed it raw bytes as they arrive; it returns every complete event. It works on
bytes and decodes an event only once whole, so a multi-byte UTF-8 character
split across reads is never broken::

    >>> p = SSEParser()
    >>> p.feed(b'data: {"a": 1}\\n\\ndata:[DO')
    [SSEEvent(event=None, data='{"a": 1}')]
    >>> p.feed(b'NE]\\r\\n\\r\\n')
    [SSEEvent(event=None, data='[DONE]')]

Follows the WHATWG rules that matter for LLM servers: ``\\n``, ``\\r\\n`` and
``\\r`` line ends; ``data:`` with or without one leading space (TGI omits it);
comment lines (``: ping``) ignored; several ``data:`` lines joined by ``\\n``;
``event:`` kept. ``close()`` returns a final event left without a blank line.
An event larger than ``max_event_bytes`` raises :class:`SSEError`.
"""

from __future__ import annotations

from typing import NamedTuple


class SSEError(ValueError):
    """The stream is not valid SSE (or an event is too large)."""


class SSEEvent(NamedTuple):
    event: str | None
    data: str


def _parse_block(block: bytes) -> SSEEvent | None:
    if block.startswith(b"data:") and b"\n" not in block:  # fast path: one data line
        value = block[5:]
        if value[:1] == b" ":
            value = value[1:]
        return SSEEvent(None, value.decode("utf-8", errors="replace"))
    data: list[bytes] = []
    event: str | None = None
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            event = value.decode("utf-8", errors="replace")
    if not data:
        return None
    return SSEEvent(event, b"\n".join(data).decode("utf-8", errors="replace"))


class SSEParser:
    """Stateful byte-level SSE parser; see the module docstring."""

    __slots__ = ("_buf", "_pending_cr", "max_event_bytes")

    def __init__(self, max_event_bytes: int = 64 * 1024 * 1024) -> None:
        self._buf = b""
        self._pending_cr = False
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> list[SSEEvent]:
        if self._pending_cr:
            data = b"\r" + data
            self._pending_cr = False
        if b"\r" in data:
            if data.endswith(b"\r"):
                data = data[:-1]
                self._pending_cr = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        old = len(self._buf)
        buf = self._buf + data if old else data
        if buf.find(b"\n\n", max(0, old - 1)) < 0:
            self._buf = buf
            if len(buf) > self.max_event_bytes:
                raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[SSEEvent] = []
        for block in blocks:
            if block:
                ev = _parse_block(block if block[0] != 10 else block.lstrip(b"\n"))
                if ev is not None:
                    out.append(ev)
        if len(self._buf) > self.max_event_bytes:
            raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
        return out

    def feed_data(self, data: bytes) -> list[str]:
        """:meth:`feed`, keeping only each event's ``data`` (the hot path of a streamed completion, which
        reads nothing else): the same events in the same order, without building an :class:`SSEEvent` for
        the usual one-line ``data:`` block."""
        return [d if isinstance(d, str) else d.decode("utf-8", errors="replace") for d in self.feed_raw(data)]

    def feed_raw(self, data: bytes) -> list[str | bytes]:
        """:meth:`feed_data` with the usual one-line ``data:`` block's payload left in bytes, undecoded (a JSON
        parser reads UTF-8 bytes as they are; ``.decode("utf-8", errors="replace")`` gives the text
        :meth:`feed_data` has); any other event's data is text, as :meth:`feed_data` gives it."""
        if self._pending_cr or b"\r" in data:
            return [ev.data for ev in self.feed(data)]
        old = len(self._buf)
        buf = self._buf + data if old else data
        if buf.find(b"\n\n", max(0, old - 1)) < 0:
            self._buf = buf
            if len(buf) > self.max_event_bytes:
                raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
            return []
        end = buf.rfind(b"\n\n")
        seps = buf.count(b"\n\ndata: ", 0, end)
        if buf.startswith(b"data: ") and buf.count(b"\n", 0, end) == 2 * seps:
            # every complete block is the usual one (one "data: " line): their payloads in one split
            self._buf = buf[end + 2:]
            if len(self._buf) > self.max_event_bytes:
                raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
            return buf[6:end].split(b"\n\ndata: ")  # type: ignore[return-value]
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[str | bytes] = []
        for block in blocks:
            if not block:
                continue
            if block.startswith(b"data: ") and b"\n" not in block:  # the usual block: one data line
                out.append(block[6:])
                continue
            ev = _parse_block(block if block[0] != 10 else block.lstrip(b"\n"))
            if ev is not None:
                out.append(ev.data)
        if len(self._buf) > self.max_event_bytes:
            raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: the last event, if the server omitted its blank line."""
        block = self._buf.strip(b"\n")
        self._buf = b""
        if not block:
            return []
        ev = _parse_block(block)
        return [ev] if ev is not None else []
