"""Fixtures for telemetry tests: a loopback aiohttp server serving text the test controls, a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web

Body = Callable[[], "str | None"]


@dataclass
class Served:
    url: str
    headers: list[dict[str, str]] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)


@asynccontextmanager
async def _serve(routes: dict[str, Body]) -> AsyncIterator[Served]:
    """Serve ``path -> body()`` on 127.0.0.1 (a ``None`` body is a 404)."""
    served = Served(url="")

    def make(path: str, fn: Body):
        async def handler(request: web.Request) -> web.Response:
            served.headers.append(dict(request.headers))
            served.hits[path] = served.hits.get(path, 0) + 1
            body = fn()
            if body is None:
                return web.Response(status=404, text="not found")
            return web.Response(text=body, content_type="text/plain")

        return handler

    app = web.Application()
    for path, fn in routes.items():
        app.router.add_get(path, make(path, fn))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    served.url = f"http://127.0.0.1:{port}"
    try:
        yield served
    finally:
        await runner.cleanup()


@pytest.fixture
def serve():
    return _serve


class ManualClock:
    """``now()`` returns what the test set: run-relative seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
