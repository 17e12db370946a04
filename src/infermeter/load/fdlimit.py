"""The client's own open-file limit: raised where allowed, checked against the planned load before a run.

Promise: every request in flight holds a socket, one file descriptor of the process that sends it.
A run that plans more requests in flight than ``RLIMIT_NOFILE`` allows would see its connects fail
with EMFILE ("Too many open files"): the client's failure, never to be counted as the server's.
Before a run :func:`prepare_fd_limit` raises the soft limit toward the hard one
(``resource.setrlimit``, up to ``FD_TARGET``; only root can raise the hard limit), then compares it
with what the run needs in each sending process: its in-flight bound (:func:`in_flight_bound`: the
streams of a closed loop, ``--max-concurrency``, or for an uncapped open loop the peak rate times
``PLAUSIBLE_LATENCY_S``) split over ``--workers``, plus the descriptors open now, plus
``FD_HEADROOM`` (scraper and GPU sampler connections, the journal, worker pipes). A bound that is
certain (streams, a cap) and cannot fit is refused with one line (:class:`~infermeter.errors.UserError`)
naming the limit and how to raise it; a plausible one (a rate) that may not fit is a warning
(``fd_limit: ...``). What is in force goes into ``run.json`` as ``fd_limit``::

    info, warning = prepare_fd_limit(in_flight_bound(shape, limits), workers=2)
    info  # {"soft": 65536, "hard": 1048576, "raised_from": 1024, "need": 1061, "in_flight": 2000, ...}

A request whose connect still fails with EMFILE/ENFILE is recorded as ``client_fd_limit``
(:mod:`infermeter.client.session`), and the verdict marks such a run invalid.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from infermeter.errors import UserError
from infermeter.load.runner import Limits
from infermeter.load.shapes import BaseShape

FD_HEADROOM = 32  # descriptors besides the request sockets: scraper, GPU sampler, journal, pipes, loop
FD_TARGET = 65536  # the soft limit is raised to this (or to what the run needs), never above the hard one
PLAUSIBLE_LATENCY_S = 10.0  # how long an uncapped open loop's requests are assumed to stay in flight
_first_soft: int | None = None  # the soft limit before this process first raised it


@dataclass(frozen=True)
class InFlight:
    """The most requests a run holds in flight at once (None: not known in advance), and why."""

    count: int | None
    basis: str
    certain: bool  # a hard bound (streams, a cap) rather than a plausible one (a rate)


def in_flight_bound(shape: BaseShape, limits: Limits) -> InFlight:
    """How many requests the run can hold in flight (see the module docstring)."""
    cap = limits.max_concurrency
    total = limits.requests + limits.warmup if limits.requests is not None else None
    streams = shape.streams
    peak = shape.peak_rate if shape.open_loop else None
    if streams is not None and (cap is None or streams <= cap):
        out = InFlight(streams, f"--concurrency {streams}", True)
    elif cap is not None:
        out = InFlight(cap, f"--max-concurrency {cap}", True)
    elif peak:
        out = InFlight(math.ceil(peak * PLAUSIBLE_LATENCY_S),
                       f"an open loop at {peak:g} req/s with requests lasting {PLAUSIBLE_LATENCY_S:g} s", False)
    else:
        return InFlight(None, "not bounded in advance (a replayed trace)", False)
    if total is not None and out.count is not None and total < out.count:
        return InFlight(total, f"{out.basis}, at most {total} requests", out.certain)
    return out


def open_fds() -> int:
    """File descriptors this process holds now (0 where the system does not say)."""
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(d)) - 1)  # less the one listdir held
        except OSError:
            continue
    return 0


def raise_fd_limit(need: int = 0) -> int | None:
    """Raise the soft RLIMIT_NOFILE to ``max(need, FD_TARGET)``, or as far toward that as the hard limit
    allows; the soft limit it had when it was raised (None: not raised, already high enough or refused).
    Processes started afterwards (worker processes, the embedded emulator) inherit it."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = max(need, FD_TARGET) if hard == inf else min(hard, max(need, FD_TARGET))
    if soft == inf or soft >= target:
        return None
    for value in dict.fromkeys((target, min(target, max(need, soft)))):  # macOS refuses more than OPEN_MAX
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
        except (ValueError, OSError):
            continue
        global _first_soft
        _first_soft = _first_soft or int(soft)
        return int(soft)
    return None


def prepare_fd_limit(bound: InFlight, workers: int = 1) -> tuple[dict[str, Any], str | None]:
    """Raise the soft RLIMIT_NOFILE where allowed and check it against ``bound`` split over ``workers``
    processes: the ``fd_limit`` record for run.json and a warning, or a UserError when it cannot fit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return {"checked": False, "basis": "no RLIMIT_NOFILE on this system"}, None
    inf = resource.RLIM_INFINITY
    per = math.ceil(bound.count / max(1, workers)) if bound.count else 0
    now = open_fds()
    need = per + now + FD_HEADROOM
    raised_from = raise_fd_limit(need) or _first_soft  # or an earlier raise in this process (the emulator's)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    info: dict[str, Any] = {"soft": None if soft == inf else soft, "hard": None if hard == inf else hard,
                            "raised_from": raised_from, "need": need, "in_flight": bound.count,
                            "workers": workers, "basis": bound.basis}
    if bound.count is None or soft == inf or need <= soft:
        return info, None
    spare = soft - now - FD_HEADROOM
    where = "each of its processes" if workers > 1 else "this process"
    msg = (f"{bound.basis} needs about {need} open files in {where} ({per} sockets + {now} open now + "
           f"{FD_HEADROOM} spare) but the open-file limit (RLIMIT_NOFILE) is {soft}"
           + (" and its hard limit, which only root can raise, is the same" if soft == hard else
              f" (hard limit {'unlimited' if hard == inf else hard})")
           + f"; raise it (`ulimit -n {need}` before the run, LimitNOFILE= for a systemd service, "
             f"--ulimit nofile={need} for docker)")
    if bound.certain:
        more = f", spread the streams over processes with --workers {math.ceil(bound.count / spare)}" if spare > 0 else ""
        raise UserError(f"client open-file limit: {msg}{more}, or lower the concurrency")
    return info, (f"fd_limit: {msg} or bound the requests in flight with --max-concurrency; requests past the "
                  "limit fail as client_fd_limit and make the run invalid")
