"""Helper processes of a simulation: a fresh interpreter, a fixed hash seed, a message pipe.

The request feeder and the fleet's workers run as ``python -m infermeter.measure.child``: a new
interpreter (nothing of the parent's ``__main__`` is imported, so any script or notebook may
start one) whose ``PYTHONHASHSEED`` is fixed, so whatever depends on the hashes of strings (the
order of a set of names) is the same in every run; prefix-cache keys do not depend on it
(:mod:`infermeter.twin.hashing`). The parent sends one pickled job
``(target, payload)``; the child calls ``target(payload, conn)``, where ``conn`` is a
``multiprocessing.connection.Connection`` it sends its results on::

    proc = start_child("infermeter.measure.feeder:produce", spec)
    kind, payload = pickle.loads(proc.conn.recv_bytes())
    proc.close()

A child whose parent goes away ends at its next write (the pipe is broken).
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

HASH_SEED = "0"  # PYTHONHASHSEED of every helper process of a simulation


class Child:
    """A running helper process and the parent's end of its result pipe."""

    def __init__(self, proc: subprocess.Popen[bytes], conn: Connection, job: Connection) -> None:
        self.proc = proc
        self.conn = conn
        self._job = job

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        for c in (self.conn, self._job):
            try:
                c.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_child(target: str, payload: Any, *, name: str = "infermeter-child",
                fds: tuple[tuple[int, str], ...] = ()) -> Child:
    """Run ``target(payload, conn, *extra)`` (``"module:function"``) in a fresh interpreter; see the module
    docstring. ``fds``: pipe ends ``(fd, "r" | "w")`` handed to the child (closed here), which gets them as
    extra connections, in order."""
    out_r, out_w = os.pipe()
    _widen(out_r)
    job_r, job_w = os.pipe()
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    extra = [f"{fd}{mode}" for fd, mode in fds]
    try:
        proc = subprocess.Popen([sys.executable, "-m", "infermeter.measure.child", str(out_w), str(job_r), name,
                                 *extra], pass_fds=(out_w, job_r, *(fd for fd, _ in fds)), env=env,
                                stdin=subprocess.DEVNULL)
    except BaseException:
        os.close(out_r)
        os.close(job_w)
        raise
    finally:
        os.close(out_w)
        os.close(job_r)
        for fd, _ in fds:
            os.close(fd)
    child = Child(proc, Connection(out_r, writable=False), Connection(job_w, readable=False))
    try:
        child._job.send_bytes(pickle.dumps((target, payload), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # Ctrl-C while the child starts: it must not outlive this call
        child.close(timeout=2.0)
        raise
    return child


PIPE_BYTES = 1 << 20  # the result pipe's buffer: a child runs this far ahead of its reader (Linux's unprivileged cap)


def _widen(fd: int) -> None:
    """Give the pipe ``fd`` a buffer of :data:`PIPE_BYTES` where the system allows (Linux ``F_SETPIPE_SZ``;
    the default, 64 KiB, holds a fraction of one batch, so a child would wait for its reader after each)."""
    try:
        import fcntl
    except ImportError:  # Windows
        return
    if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux only
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:  # above the system's pipe-max-size: the default stays
            pass


def _main(argv: list[str]) -> int:
    out = Connection(int(argv[1]), readable=False)
    job = Connection(int(argv[2]), writable=False)
    extra = [Connection(int(a[:-1]), readable=a[-1] == "r", writable=a[-1] == "w") for a in argv[4:]]
    target, payload = pickle.loads(job.recv_bytes())
    module, _, func = target.partition(":")
    fn = getattr(importlib.import_module(module), func)
    try:
        fn(payload, out, *extra)
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        return 0
    finally:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
