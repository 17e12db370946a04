"""The aiohttp session a run shares across all requests.

One connection pool sized for the run's peak in-flight requests, a connect
timeout (other timeouts are per request, in ``OpenAIClient``), no cookie jar,
and no compression: every request asks for ``Accept-Encoding: identity``
(aiohttp would offer gzip/deflate). A compressing proxy would otherwise hold
back SSE events until its compressor flushes, blurring the per-chunk arrival
times the records promise, and decoding would cost the load generator CPU;
a server that compresses anyway is decoded by ``OpenAIClient`` (gzip, deflate)
or its encoding named in the error::

    async with make_session(connect_timeout_s=10, max_connections=64) as session: ...

A connect that fails because this process has no file descriptor left (EMFILE/ENFILE, "Too many
open files") raises :class:`FdLimitError` (still an ``aiohttp.ClientConnectorError``), which the
client records as ``client_fd_limit``: the client's limit, not a server refusing connections.
"""

from __future__ import annotations

import errno
from typing import Any

import aiohttp

FD_ERRNOS = (errno.EMFILE, errno.ENFILE)  # "Too many open files" (this process / the whole system)


def fd_exhausted(exc: BaseException) -> OSError | None:
    """The EMFILE/ENFILE OSError in ``exc`` or in the exceptions it came from (None when there is none)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 16:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        if isinstance(e, OSError) and e.errno in FD_ERRNOS:
            return e
        todo += [getattr(e, "os_error", None), e.__cause__, e.__context__]
    return None


class FdLimitError(aiohttp.ClientConnectorError):
    """A connect failed because this client has no file descriptor left (class ``client_fd_limit``)."""

    def detail(self) -> str:
        return (f"this client ran out of file descriptors connecting to {self.host}:{self.port} "
                f"({self.os_error.strerror or self.os_error}); raise `ulimit -n` or lower the concurrency")


class _Connector(aiohttp.TCPConnector):
    """A TCPConnector that names its own descriptor exhaustion (see the module docstring)."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        try:
            return await super().connect(req, traces, timeout)
        except FdLimitError:
            raise
        except OSError as exc:  # aiohttp's ClientConnectorError is an OSError, as is a raw socket error
            fd = fd_exhausted(exc)
            if fd is None:
                raise
            raise FdLimitError(req.connection_key, fd) from exc


def make_session(*, connect_timeout_s: float = 10.0, max_connections: int = 0) -> aiohttp.ClientSession:
    connector = _Connector(limit=max_connections, limit_per_host=0, ttl_dns_cache=300,
                           enable_cleanup_closed=False, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar(),
                                 auto_decompress=False, skip_auto_headers=("User-Agent",),
                                 headers={"Accept-Encoding": "identity"},
                                 read_bufsize=1 << 20)  # vllm#39963: a 64 KiB buffer throttles long streams
