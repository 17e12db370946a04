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
"""

from __future__ import annotations

import aiohttp


def make_session(*, connect_timeout_s: float = 10.0, max_connections: int = 0) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, ttl_dns_cache=300,
                                     enable_cleanup_closed=False, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar(),
                                 auto_decompress=False, skip_auto_headers=("User-Agent",),
                                 headers={"Accept-Encoding": "identity"},
                                 read_bufsize=1 << 20)  # vllm#39963: a 64 KiB buffer throttles long streams
