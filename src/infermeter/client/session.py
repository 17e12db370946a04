"""The aiohttp session a run shares across all requests.

One connection pool sized for the run's peak in-flight requests, a connect
timeout (other timeouts are per request, in ``OpenAIClient``), no cookie jar,
and no automatic decompression cost for SSE::

    async with make_session(connect_timeout_s=10, max_connections=64) as session: ...

A connect that fails because this process has no file descriptor left (EMFILE/ENFILE, "Too many
open files") raises :class:`~infermeter.client.errors.FdLimitError` (still an
``aiohttp.ClientConnectorError``), which the client records as ``client_fd_limit``: the client's
limit, not a server that refused the connection.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from infermeter.client.errors import FdLimitError, fd_exhausted


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
                                 read_bufsize=1 << 20)  # vllm#39963: a 64 KiB buffer throttles long streams
