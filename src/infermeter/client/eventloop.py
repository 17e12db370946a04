"""The event loop a measurement runs on: uvloop when it is installed, else asyncio's own.

:func:`run` is :func:`asyncio.run` on that loop. uvloop is optional (``pip install
'infermeter[fast]'``); it takes a good part of the client's per-request CPU off (see
``benchmarks/client_capacity.py``, which prints both). Timing does not depend on it: every
chunk is stamped with the run's own clock, and the open-loop pacer checks each send against that
clock, not the loop's (uvloop's timers count whole milliseconds), so no request leaves early.

``INFERMETER_EVENT_LOOP``: ``auto`` (default: uvloop when importable), ``asyncio`` (never uvloop),
``uvloop`` (uvloop or a clear error).

While :func:`run` runs, the cyclic garbage collector is eased (:func:`gc_eased`): what exists when the
run starts (modules, the workload) is frozen out of its scans and its youngest generation is collected
every ``GC_GEN0`` new container objects instead of 700 (each streamed event makes a few short-lived
dicts, freed by reference counting before any scan); both are restored when the run ends. On a
64-token stream this took about a tenth of the client's CPU per request (``benchmarks/client_capacity.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from infermeter.errors import UserError

T = TypeVar("T")
ENV = "INFERMETER_EVENT_LOOP"
GC_GEN0 = 10_000


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


@contextlib.contextmanager
def gc_eased() -> Iterator[None]:
    """The garbage collector eased for a run, then restored (module docstring). A freeze someone else made
    is left as it is."""
    old = gc.get_threshold()
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    gc.set_threshold(max(old[0], GC_GEN0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if froze:
            gc.unfreeze()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on uvloop when it is installed, the garbage collector eased (module docstring)."""
    factory = loop_factory()
    with gc_eased():
        if factory is None:
            return asyncio.run(coro)
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
