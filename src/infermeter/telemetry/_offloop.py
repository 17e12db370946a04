"""An event loop on its own thread, so telemetry never runs on the load generator's loop.

Promise: :class:`BackgroundLoop` starts a daemon thread running a fresh asyncio loop;
``await bg.call(coro)`` runs ``coro`` *there* and hands its result (or exception) back to the
caller's loop, which stays free meanwhile. Cancelling the caller's await cancels the coroutine
on the thread. ``close()`` stops the loop and joins the thread (bounded); a loop that is never
closed stops by itself within a second once the loop that started it is closed (a run that
raised before its ``stop()``), and otherwise dies with the process (daemon thread).

    bg = BackgroundLoop("infermeter-scrape")
    bg.start()
    rows = await bg.call(fetch_and_parse())   # the fetch and the parse run on bg's thread
    bg.close()

The thread holds Python's GIL while it parses, so its CPU still competes with the load's
interpreter; callers measure that cost (``time.thread_time``) and say when it was large.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """A daemon thread with its own event loop; see the module docstring."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; call it from the loop that owns this background loop (if any)."""
        if self._thread is not None:
            return
        ready = threading.Event()
        try:
            owner: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            owner = None

        async def watch() -> None:  # an owner gone without close(): stop, never poll on forever
            while owner is not None and not owner.is_closed():
                await asyncio.sleep(1.0)
            asyncio.get_running_loop().stop()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            ready.set()
            try:
                if owner is not None:
                    loop.create_task(watch())
                loop.run_forever()
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        ready.wait(10.0)

    @property
    def thread_id(self) -> int | None:
        """The thread's ident (``None`` before ``start()``)."""
        return self._thread.ident if self._thread is not None else None

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the background loop; await its result from the caller's loop."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise RuntimeError(f"{self.name}: background loop is not running")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(fut)

    def close(self, timeout_s: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout_s)
        self._thread = None
        self._loop = None
