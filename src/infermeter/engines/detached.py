"""Servers left running by ``infermeter engine up --detach``: where they are and how to stop them.

Promise: :func:`save` records a started engine (pid, port, base URL, log) in
``<cache>/engines/<name>/server.json``; :func:`load` returns that record only
while its process still runs the engine (the pid's command line is checked,
so a reused pid is never taken for the server); :func:`stop` ends that process
group and removes the record.

    save("vllm-cpu", eng)            # after eng.start()
    info = load("vllm-cpu")          # {"pid": .., "base_url": .., "log": ..} or None
    stop("vllm-cpu")                 # True when a server was stopped
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from infermeter.engines.process import kill_group
from infermeter.engines.venv import cache_root

_MARK = "vllm.entrypoints"


def state_path(name: str) -> Path:
    return cache_root() / "engines" / name / "server.json"


def save(name: str, engine: Any) -> Path:
    path = state_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {
        "engine": name, "pid": engine.pid, "port": engine.port, "base_url": engine.base_url,
        "model": engine.model, "log": str(engine.log_path),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.write_text(json.dumps(info, indent=2) + "\n")
    return path


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def load(name: str) -> dict[str, Any] | None:
    """The saved record when its process is still the engine; a stale record is removed."""
    path = state_path(name)
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    if isinstance(pid, int) and _MARK in _cmdline(pid):
        return dict(info)
    path.unlink(missing_ok=True)
    return None


def stop(name: str, grace_s: float = 30.0) -> bool:
    info = load(name)
    if info is None:
        return False
    kill_group(int(info["pid"]), grace_s)
    state_path(name).unlink(missing_ok=True)
    return True
