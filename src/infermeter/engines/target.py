"""A server to measure, declared once (:class:`Target`) and run for a while: campaigns and studies alike.

A :class:`Target` is a URL, or an engine infermeter starts on 127.0.0.1 (``LAUNCHABLE``).
``running(target, log_path)`` is a context manager yielding a
:class:`LiveTarget` (base URL, engine pid, log file) for the time its cells
run. An ``emulator`` target is :class:`~infermeter.engines.emulator.EmulatorProcess` with the
target's ``args`` (``infermeter emulate``'s flags); a ``vllm-cpu`` target is :class:`infermeter.engines.VllmCpuEngine`
with ``extra_args = args`` and ``settings`` as its fields, started with
``VLLM_SERVER_DEV_MODE=1`` so that ``POST /reset_prefix_cache`` exists; a
``url`` target is only waited for (``GET /health``)::

    with running(target, out / "logs" / f"{target.name}.log") as live:
        live.reset_prefix_cache()        # "reset" | "unsupported" | "failed: ..."
        start = live.log_offset()
        ...                              # one run
        live.copy_log(start, run_dir / "server.log")

A started engine's :attr:`LiveTarget.launch` says what it runs (for ``vllm-cpu``: its arguments, vLLM's
version and the dtype from its log, :meth:`VllmCpuEngine.launch_info`); campaigns and studies write it into
each run's ``run.json`` (``target.launch``), so runs on two machines that served different dtypes say so.

Engines run in their own process group; their pid goes into the campaign
state so that a resumed campaign can stop an engine its killed predecessor
left behind (:func:`stop_leftover`, which checks the process is ours first).
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infermeter.engines.emulator import EmulatorProcess
from infermeter.engines.process import http_ok
from infermeter.engines.vllm_cpu import VllmCpuEngine
from infermeter.errors import ConfigError, UserError
from infermeter.redact import redact_args, redact_text, secret_values

RESET_PATH = "/reset_prefix_cache"
# the engines infermeter can start on 127.0.0.1: the one list of their names
LAUNCHABLE = ("emulator", "vllm-cpu")
Launchable = Literal["emulator", "vllm-cpu"]


class Target(BaseModel):
    """A server to measure: a URL, or an engine infermeter starts with these arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    url: str | None = None
    engine: Launchable | None = None
    args: tuple[str, ...] = ()
    settings: dict[str, Any] = {}
    model: str | None = None
    hardware: str | None = None
    reset_prefix_cache: bool = True
    health_timeout_s: float = Field(900.0, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> Target:
        if (self.url is None) == (self.engine is None):
            raise ValueError(f"give exactly one of url: or engine: ({' | '.join(LAUNCHABLE)})")
        if self.url is not None and (self.args or self.settings):
            raise ValueError("args:/settings: apply to engines infermeter starts, not to url: targets")
        return self




@dataclass
class LiveTarget:
    target: Target
    base_url: str
    log_path: Path | None = None
    pid: int | None = None
    reset_support: str | None = None  # learned on the first reset
    timings: dict[str, float] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)  # an engine we started: what it runs (run.json target.launch)

    def reset_prefix_cache(self) -> str:
        """POST /reset_prefix_cache (vLLM's dev-mode route): "reset", "unsupported", "skipped" or "failed: ..."."""
        if not self.target.reset_prefix_cache:
            return "skipped"
        if self.reset_support == "unsupported":
            return "unsupported"
        req = urllib.request.Request(self.base_url + RESET_PATH, data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - the target's own URL
                self.reset_support = "reset" if r.status == 200 else f"failed: HTTP {r.status}"
        except urllib.error.HTTPError as exc:
            self.reset_support = "unsupported" if exc.code in (404, 405) else f"failed: HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return f"failed: {exc}"
        return self.reset_support

    def log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path else 0
        except OSError:
            return 0

    def copy_log(self, start: int, dest: Path) -> int:
        """Copy the server log written since ``start`` to ``dest``, redacted (an engine logs its own arguments,
        ``--api-key`` included); bytes read."""
        if self.log_path is None or not self.log_path.exists():
            return 0
        with self.log_path.open("rb") as fh:
            fh.seek(start)
            data = fh.read()
        text = redact_text(data.decode("utf-8", "replace"), secret_values(self.target.args))
        dest.write_text(text, encoding="utf-8")
        return len(data)


def wait_health(url: str, timeout_s: float, poll_s: float = 0.5) -> float:
    t0 = time.monotonic()
    while not http_ok(url + "/health"):
        if time.monotonic() - t0 > timeout_s:
            raise UserError(f"{url}/health did not answer 200 within {timeout_s:g} s")
        time.sleep(poll_s)
    return time.monotonic() - t0


@contextmanager
def _dev_mode() -> Iterator[None]:
    old = os.environ.get("VLLM_SERVER_DEV_MODE")
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("VLLM_SERVER_DEV_MODE", None)
        else:
            os.environ["VLLM_SERVER_DEV_MODE"] = old


@contextmanager
def running(target: Target, log_path: Path, on_pid: Any = None, notify: Any = None) -> Iterator[LiveTarget]:
    """The target, up and healthy, for the duration of the block (see the module docstring);
    ``notify`` hears an engine's startup phases."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if target.url is not None:
        waited = wait_health(target.url.rstrip("/"), target.health_timeout_s)
        yield LiveTarget(target, target.url.rstrip("/"), timings={"health_s": waited})
        return
    if target.engine == "emulator":
        t0 = time.monotonic()
        with EmulatorProcess(list(target.args), startup_timeout_s=target.health_timeout_s, log_path=log_path) as emu:
            if on_pid:
                on_pid(emu.pid)
            yield LiveTarget(target, emu.base_url, log_path, emu.pid, timings={"start_s": time.monotonic() - t0},
                             launch={"engine": "emulator", "args": redact_args(target.args)})
        return
    try:
        eng = VllmCpuEngine(port=None, extra_args=tuple(target.args), log_path=log_path,
                            startup_timeout_s=target.health_timeout_s, progress=notify, **target.settings)
    except TypeError as exc:
        raise ConfigError(f"target {target.name}: settings: {exc}") from None
    try:
        with _dev_mode():
            eng.start()
        if on_pid:
            on_pid(eng.pid)
        yield LiveTarget(target, eng.base_url, log_path, eng.pid, timings=dict(eng.timings), launch=dict(eng.launch))
    finally:
        eng.stop()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may linger where nothing reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def stop_leftover(pid: int | None, marker: str, grace_s: float = 10.0) -> bool:
    """Stop the process group ``pid`` if it is still running ``marker`` (an engine we started); True if stopped.

    The engine is not our child (its campaign was killed): SIGTERM the group, wait up to ``grace_s``, SIGKILL."""
    if not pid or not _running(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if marker not in cmdline:
        return False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            if os.getpgid(pid) == pid:  # engines lead their own process group (their workers are in it)
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _running(pid):
            return True
    return not _running(pid)
