"""A bounded periodic task: one tick now, then one every ``interval_s``, one last tick on stop.

Promise: :class:`Poller` calls an async ``tick()`` at ``start()`` (awaited, so
the caller has a baseline sample before its load begins), then on an absolute
schedule ``t0 + k * interval_s`` from a background task (a slow tick skips
missed slots rather than bursting), and once more inside ``stop()`` so the
last sample closes the run. A tick that raises is counted in ``errors`` and
the loop goes on; ``stop()`` returns promptly (it does not wait out a sleep).

    poller = Poller(1.0, scrape_once)
    await poller.start()
    ...                       # the run
    await poller.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class Poller:
    """Periodic caller of ``tick``; see the module docstring."""

    def __init__(
        self,
        interval_s: float,
        tick: Callable[[], Awaitable[None]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self._tick = tick
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.ticks = 0
        self.errors = 0
        self.last_error: str | None = None

    async def _safe_tick(self) -> None:
        try:
            await self._tick()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a telemetry tick must never end the run
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ticks += 1

    async def _loop(self) -> None:
        t0 = self._clock()
        k = 1
        while not self._stop.is_set():
            delay = t0 + k * self.interval_s - self._clock()
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=delay)
                if self._stop.is_set():
                    return
            await self._safe_tick()
            # next slot strictly in the future: skip the ones a slow tick missed
            k = max(k + 1, int((self._clock() - t0) / self.interval_s) + 1)

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("poller already started")
        self._stop.clear()
        await self._safe_tick()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is None:
            return
        self._stop.set()
        task, self._task = self._task, None
        try:
            await asyncio.wait_for(task, timeout=max(5.0, 2 * self.interval_s))
        except asyncio.TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._safe_tick()

    async def tick_now(self) -> None:
        """One extra tick outside the schedule (errors counted, not raised)."""
        await self._safe_tick()

    @property
    def running(self) -> bool:
        return self._task is not None
