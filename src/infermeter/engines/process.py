"""One inference-server process: start it with its log in a file, wait for health, stop it.

Promise: :class:`ServerProcess` starts ``cmd`` in its own process group with
stdout+stderr appended to ``log_path``; :meth:`wait_healthy` polls
``health_url`` once a second until it answers 200, and fails fast — with the
log's last lines — if the process exits or ``timeout_s`` passes;
:meth:`stop` sends SIGTERM to the group (the server and the workers it
spawned), waits ``grace_s``, then SIGKILL. Stopping twice is harmless.

    proc = ServerProcess(cmd, env=env, log_path=Path("vllm.log"))
    proc.start()
    proc.wait_healthy("http://127.0.0.1:8000/health", timeout_s=600)
    ...
    proc.stop()

:func:`free_port` asks the OS for an unused TCP port on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from infermeter.engines.venv import EngineError, log_tail


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback URL we built
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class ServerProcess:
    """A server subprocess in its own process group; see the module docstring."""

    def __init__(self, cmd: Sequence[str], *, env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
        self.cmd = list(cmd)
        self.env = env
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError("already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n$ {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(
        self,
        health_url: str,
        *,
        timeout_s: float,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_poll: Callable[[float], None] | None = None,
    ) -> float:
        """Block until ``health_url`` answers 200; return the seconds waited. ``on_poll(seconds waited)``
        runs before every poll (progress: :class:`LogPhases`)."""
        t0 = clock()
        while True:
            if on_poll is not None:
                on_poll(clock() - t0)
            if not self.alive():
                rc = self.proc.returncode if self.proc else None
                raise EngineError(
                    f"server exited with code {rc} before it was healthy (log: {self.log_path}); "
                    f"last lines:\n{log_tail(self.log_path)}"
                )
            if http_ok(health_url):
                return clock() - t0
            if clock() - t0 > timeout_s:
                self.stop()
                raise EngineError(
                    f"server not healthy at {health_url} after {timeout_s:.0f} s (log: {self.log_path}); "
                    f"last lines:\n{log_tail(self.log_path)}"
                )
            time.sleep(poll_s)

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM the process group, then SIGKILL after ``grace_s``; return the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            kill_group(self.proc.pid, grace_s, wait=self.proc.wait)
        return self.proc.returncode


class LogPhases:
    """Follow a server's log from where it stands now and name the startup phases it reaches.

    ``markers`` are ``(text in a log line, phase)`` in the order a server goes through them;
    :meth:`poll` returns the phases first seen since the last call; ``keep`` (a pattern) keeps the
    first line it matches in ``kept`` (what the server says of itself, e.g. vLLM's engine config)::

        phases = LogPhases(log_path, VLLM_PHASES)
        proc.wait_healthy(url, timeout_s=900, on_poll=lambda s: [print(p) for p in phases.poll()])
    """

    def __init__(self, path: Path, markers: Sequence[tuple[str, str]], keep: re.Pattern[str] | None = None) -> None:
        self.path = Path(path)
        self.markers = list(markers)
        self.keep = keep
        self.kept = ""
        self.seen: list[str] = []
        try:
            self._offset = self.path.stat().st_size
        except OSError:
            self._offset = 0
        self._partial = b""

    @property
    def current(self) -> str | None:
        return self.seen[-1] if self.seen else None

    def poll(self) -> list[str]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        new = []
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if self.keep is not None and not self.kept and self.keep.search(line):
                self.kept = line
            for needle, phase in self.markers:
                if needle in line and phase not in self.seen:
                    self.seen.append(phase)
                    new.append(phase)
        return new


def kill_group(pid: int, grace_s: float, wait: Callable[[float], object] | None = None) -> None:
    """SIGTERM process group ``pid`` (a group leader we started), SIGKILL what is left after
    ``grace_s``. ``wait`` reaps the leader when it is our child, so it does not linger as a zombie."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if wait is not None:
            try:
                wait(0.2)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if wait is not None:
        try:
            wait(5.0)
        except subprocess.TimeoutExpired:
            pass
