"""A one-handler aiohttp server on 127.0.0.1 and one client request against it (``send_once`` fixture).

``send_once`` runs each test twice: with the fast HTTP client (``client.fasthttp``) and with aiohttp;
``http_client`` names the one a test runs with."""

import asyncio
import functools

import pytest
from aiohttp import web

from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.client.session import make_session
from infermeter.records.record import RequestRecord


HTTP_CLIENTS = ["fast", "aiohttp"]


async def send_once(handler, spec, *, clock=None, api_key=None, http_client=None, extra_paths=(), **cfg) -> RequestRecord:
    """Serve ``handler`` at /v1/chat/completions, send ``spec`` once, return its record (``clock``: the run
    clock the client stamps with; by default seconds since the server started)."""
    app = web.Application()
    for path in ("/v1/chat/completions", *extra_paths):
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    if clock is None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        clock = lambda: loop.time() - t0  # noqa: E731
    try:
        async with make_session() as session:
            async with OpenAIClient(ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m", api_key=api_key, **cfg),
                                    session, clock, http_client=http_client) as client:
                assert client.http_client == (http_client or client.http_client)
                rec = RequestRecord(request_id=0)
                await client.send(spec, rec)
                return rec
    finally:
        await runner.cleanup()


@pytest.fixture(name="http_client", params=HTTP_CLIENTS)
def http_client_fixture(request):
    return request.param


@pytest.fixture(name="send_once")
def send_once_fixture(http_client):
    return functools.partial(send_once, http_client=http_client)
