"""Output paths: checked writable before the work starts, and run directories claimed by one writer.

Every command that writes calls one of these first, so that a folder it cannot write is a one-line
:class:`~infermeter.errors.OutputError` (exit 2) before anything is measured or simulated, never a
traceback after::

    out = output_dir(Path("results/x"))              # made (with parents) and proved writable
    path = output_file(Path("cal.yaml"))              # its folder likewise; not a folder itself
    with claim_run_dir(Path("results/x")) as d: ...  # one run at a time, never two merged
    with claim_run_dir(default, fresh=True) as d: ...  # a default folder: results/x-2 when results/x is taken

Writability is proved by writing (creating and removing a probe file), never by ``os.access``:
root passes ``os.access`` on a folder of mode 0o555 (and can indeed write there), and no mode check
sees a read-only mount. :func:`claim_run_dir` claims a run directory atomically: it creates
``.infermeter.lock`` with ``O_CREAT | O_EXCL`` (which one of two racing runs wins, whatever the
timing), *then* refuses a folder that already holds a run's files; the lock (the claiming process's
pid and host name) is removed when the claim ends, a folder made for a claim that ended with nothing
in it too. A lock left on this host by a run that was killed (its pid gone) in a folder that holds
none of a run's files is taken over (renamed away atomically, so of two runs taking it over one
wins); where the killed run left files the folder is refused, naming the dead pid, so nothing it
measured is ever overwritten. A lock from another host is never taken over: a pid says nothing
about another machine's (or container's) runs.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from infermeter.errors import OutputError

LOCK = ".infermeter.lock"
# errors of a disk that is full or failing (a write that worked a moment ago); the others are a path's fault
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
# what a run directory holds once a run has written to it
RUN_FILES = ("summary.json", "requests.jsonl", "requests.parquet", "workers", "parts", "steps")


def why(exc: OSError) -> str:
    """An OSError's reason in words, e.g. 'Read-only file system' (never a traceback)."""
    return exc.strerror or type(exc).__name__


def output_dir(path: Path, flag: str = "--out") -> Path:
    """``path`` as a folder this process can write: made (with its parents) and proved by a probe file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".infermeter-probe-{os.getpid()}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write there ({why(exc)})") from None
    return path


def output_file(path: Path, flag: str = "--out") -> Path:
    """``path`` as a file this process can write: its folder as :func:`output_dir`; an existing file must
    open for writing (it is not changed here), a folder in its place is refused."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder, not a file")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is a file, not a folder")
    try:
        output_dir(parent, flag)
    except OutputError as exc:
        raise OutputError(f"{flag} {path}: cannot write its folder ({str(exc).rsplit('(', 1)[-1]}") from None
    if path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise OutputError(f"{flag} {path}: cannot write it ({why(exc)})") from None
    return path


def holds_run(path: Path, files: Iterable[str] = RUN_FILES) -> bool:
    return any((Path(path) / f).exists() for f in files)


class RunDirTaken(OutputError):
    """The run directory is held by another run, or already holds one."""


@contextmanager
def claim_run_dir(path: Path, flag: str = "--out", files: Iterable[str] = RUN_FILES,
                  fresh: bool = False) -> Iterator[Path]:
    """Hold ``path`` for one run (see the module docstring) and yield it: an OutputError when it cannot be
    written, a :class:`RunDirTaken` when another process holds it or it already holds a run. ``fresh`` (a
    default folder, not one the user named): take ``path-2``, ``path-3``, ... instead of a taken one."""
    path = Path(path)
    for k in range(1, 101 if fresh else 2):
        candidate = path if k == 1 else path.with_name(f"{path.name}-{k}")
        try:
            made = _claim(candidate, flag, files)
            break
        except RunDirTaken:
            if not fresh or k == 100:
                raise
    try:
        yield candidate
    finally:
        _release(candidate, made)


def _claim(path: Path, flag: str, files: Iterable[str]) -> bool:
    """Claim ``path``; whether it was made for the claim."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: is a file, not a folder")
    made = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path / LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if not _take_stale_lock(path, files):
                raise
            fd = os.open(path / LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise RunDirTaken(f"{flag} {path}: {_holder(path / LOCK)}; choose another directory") from None
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write there ({why(exc)})") from None
    try:
        try:
            os.write(fd, f"{os.getpid()} {_HOST}\n".encode())
        finally:
            os.close(fd)
        if holds_run(path, files):
            raise RunDirTaken(f"{flag} {path}: already holds a run; choose another directory")
    except OSError as exc:
        _release(path, made)
        raise OutputError(f"{flag} {path}: cannot write there ({why(exc)})") from None
    except BaseException:
        _release(path, made)
        raise
    return made


_HOST = socket.gethostname()  # a lock names its host: a pid says nothing about another machine's (or container's) runs


def _lock_pid(lock: Path) -> int | None:
    """The pid in ``lock`` when it was written on this host (a lock without a host: an older run's, here)."""
    try:
        words = lock.read_text().split()
        pid = int(words[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if len(words) < 2 or words[1] == _HOST else None


def _lock_owner(lock: Path) -> str | None:
    """'pid N on HOST' for a lock written on another host, else None."""
    try:
        words = lock.read_text().split()
    except OSError:
        return None
    return f"pid {words[0]} on {words[1]}" if len(words) >= 2 and words[1] != _HOST else None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _take_stale_lock(path: Path, files: Iterable[str]) -> bool:
    """Remove the lock of a dead run from a folder holding none of a run's files; whether it was removed.
    The lock is renamed to a name of this process's own first (only one of two racing processes can),
    and checked again there: a live holder's lock that slipped in meanwhile is put back."""
    lock = path / LOCK
    pid = _lock_pid(lock)
    if pid is None or not _gone(pid) or holds_run(path, files):
        return False
    aside = path / f"{LOCK}.stale-{os.getpid()}"
    try:
        os.rename(lock, aside)
    except OSError:
        return False  # another process took it first: its O_EXCL decides
    if _lock_pid(aside) != pid:  # not the dead run's lock any more: give it back untouched
        try:
            os.link(aside, lock)
        except OSError:
            pass
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    return True


def _holder(lock: Path) -> str:
    pid = _lock_pid(lock)
    if pid is None:
        elsewhere = _lock_owner(lock)
        return f"another infermeter run ({elsewhere}) is writing to it" if elsewhere else \
            "another infermeter run is writing to it"
    if _gone(pid):
        return (f"it holds the lock and the files of a run that did not finish (pid {pid}, gone): "
                f"`infermeter summarize` it, or remove {lock} to reuse the folder")
    return f"another infermeter run (pid {pid}) is writing to it"


def _release(path: Path, made: bool) -> None:
    try:
        (path / LOCK).unlink(missing_ok=True)
        if made and not any(path.iterdir()):
            path.rmdir()
    except OSError:
        pass
