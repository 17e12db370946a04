"""Start the emulator as a child process on a free 127.0.0.1 port, without going through the CLI.

Used by ``infermeter run`` when no ``--url`` is given (and by campaigns, studies, tests): the
emulator runs in its own process (``python -m infermeter.engines.emulator``) so it never
competes with the client for the event loop. It takes an :class:`EmulatorConfig` or the flags
of ``infermeter emulate``, validated here, before any process starts::

    with EmulatorProcess(["--ttft-ms", "50"]) as emu:
        emu.base_url   # "http://127.0.0.1:PORT", healthy

Startup waits for ``/health`` (bounded); a failure raises UserError with the child's last
output.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from infermeter.engines.emulator.config import API_KEY_ENV, EmulatorConfig
from infermeter.errors import UserError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MODULE = "infermeter.engines.emulator"  # what the emulator runs as: python -m MODULE (campaign markers match it)
MARKER = f"-m {MODULE}"  # in /proc/PID/cmdline (NULs read as spaces) of an emulator this module started


class EmulatorProcess:
    def __init__(self, args: list[str] | EmulatorConfig | None = None, *, startup_timeout_s: float = 60.0,
                 log_path: Path | None = None) -> None:
        self.config = args if isinstance(args, EmulatorConfig) else EmulatorConfig.from_args(list(args or []))
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self.keep_log = log_path is not None  # a log the caller keeps (a campaign's); else a temporary one
        self._log = (open(log_path, "ab") if log_path is not None  # noqa: SIM115 - closed in __exit__
                     else tempfile.NamedTemporaryFile(prefix="infermeter-emulate-", suffix=".log", delete=False))
        self.log_path = Path(self._log.name)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> "EmulatorProcess":
        cmd = [sys.executable, "-m", MODULE,
               "--config", self.config.model_dump_json(exclude={"api_key"}),
               "--host", "127.0.0.1", "--port", str(self.port), "--exit-with-stdin"]
        # Its own session: a terminal's Ctrl-C reaches the client, which then stops the run cleanly,
        # not the emulator mid-stream. It exits when our end of its stdin closes (even on SIGKILL).
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(API_KEY_ENV, None)
        if self.config.api_key:  # in the environment, never on a command line others can read
            env[API_KEY_ENV] = self.config.api_key
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      stdin=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise UserError(f"the embedded emulator exited with code {self._proc.returncode}: {self.reason()}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise UserError(f"the embedded emulator did not become healthy within {self.startup_timeout_s:g} s: {self.log_tail()}")

    def reason(self) -> str:
        """The child's own one-line complaint (typer's boxed usage errors unwrapped), else its log tail."""
        lines = []
        for line in self.log_tail(2000).splitlines():
            text = line.strip(" │╭╮╰╯─\t")
            if text and not text.startswith(("Usage:", "Try '", "Error")):
                lines.append(text)
        return (lines[-1] if lines else self.log_tail()).strip().removeprefix("error: ") or "no output"

    def log_tail(self, n: int = 400) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip()
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()
        if not self.keep_log:
            with_suppress_unlink(self._log.name)


def with_suppress_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
