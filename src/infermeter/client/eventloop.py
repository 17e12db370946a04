"""The event loop a measurement runs on: uvloop when it is installed, else asyncio's own.

:func:`run` is :func:`asyncio.run` on that loop. uvloop is optional (``pip install
'infermeter[fast]'``); it takes a good part of the client's per-request CPU off (see
``benchmarks/client_capacity.py``, which prints both). Timing does not depend on it: every
chunk is stamped with the run's own clock, and the open-loop pacer checks each send against that
clock, not the loop's (uvloop's timers count whole milliseconds), so no request leaves early.

``INFERMETER_EVENT_LOOP``: ``auto`` (default: uvloop when importable), ``asyncio`` (never uvloop),
``uvloop`` (uvloop or a clear error).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from infermeter.errors import UserError

T = TypeVar("T")
ENV = "INFERMETER_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor when it is to be used (``INFERMETER_EVENT_LOOP``), else None (asyncio's loop)."""
    want = (os.environ.get(ENV) or "auto").strip().lower()
    if want not in ("auto", "asyncio", "uvloop"):
        raise UserError(f"{ENV}={want!r}: expected auto, asyncio or uvloop")
    if want == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if want == "uvloop":
            raise UserError(f"{ENV}=uvloop, but uvloop is not installed (pip install 'infermeter[fast]')") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def name() -> str:
    """Which loop :func:`run` uses now: ``uvloop`` or ``asyncio``."""
    return "asyncio" if loop_factory() is None else "uvloop"


def running() -> str:
    """The loop running now: ``uvloop`` or ``asyncio``."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on uvloop when it is installed (module docstring)."""
    factory = loop_factory()
    if factory is None:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
