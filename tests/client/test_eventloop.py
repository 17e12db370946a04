"""The client's event-loop choice: INFERMETER_EVENT_LOOP, uvloop only when installed, clear errors."""

import asyncio
import importlib.util

import pytest

from infermeter.client import eventloop
from infermeter.errors import UserError

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_forced_runs_on_asyncios_loop(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.name() == "asyncio"
    assert eventloop.run(_loop_module()).startswith("asyncio")


def test_auto_uses_uvloop_exactly_when_installed(monkeypatch):
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.name() == ("uvloop" if HAS_UVLOOP else "asyncio")
    assert eventloop.run(_loop_module()).startswith("uvloop" if HAS_UVLOOP else "asyncio")


def test_bad_value_is_a_one_line_user_error(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "trio")
    coro = _loop_module()
    with pytest.raises(UserError, match="INFERMETER_EVENT_LOOP='trio'"):
        eventloop.run(coro)
    coro.close()


@pytest.mark.skipif(HAS_UVLOOP, reason="uvloop is installed")
def test_uvloop_required_but_missing_says_how_to_install(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "uvloop")
    coro = _loop_module()
    with pytest.raises(UserError, match=r"infermeter\[fast\]"):
        eventloop.run(coro)
    coro.close()


def test_a_run_eases_the_garbage_collector_and_restores_it(monkeypatch):
    import gc

    monkeypatch.setenv(eventloop.ENV, "asyncio")
    before = gc.get_threshold()

    async def inside():
        return gc.get_threshold(), gc.get_freeze_count(), eventloop.running()

    (threshold, frozen, loop) = eventloop.run(inside())
    assert threshold[0] == max(before[0], eventloop.GC_GEN0) and threshold[1:] == before[1:] and frozen > 0
    assert loop == "asyncio"
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    async def boom():
        raise ValueError("x")

    with pytest.raises(ValueError):
        eventloop.run(boom())
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
