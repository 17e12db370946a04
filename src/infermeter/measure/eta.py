"""Progress of a simulation with an ETA from its first seconds.

A simulation reports ``(virtual time reached, records so far)`` as its windows close; the pace so
far (virtual seconds, or requests, per wall second) gives the time left. Lines go to ``say`` at
most every ``every_s`` seconds, the first after ``first_s``::

    eta = Eta(say=print, virtual_s=72 * 3600)
    plan.run(progress=eta)     # "  1,234,567 requests, 7.20 of 72 h simulated in 41 s; ETA 6 min"
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _dur(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class Eta:
    """A progress callback that prints the pace and the time left (see the module docstring)."""

    def __init__(self, say: Callable[[str], None], *, virtual_s: float | None = None, requests: float | None = None,
                 every_s: float = 5.0, first_s: float = 2.0, prefix: str = "  ") -> None:
        self.say = say
        self.virtual_s = virtual_s
        self.requests = requests
        self.every_s = every_s
        self.prefix = prefix
        self.t0 = time.monotonic()
        self._next = self.t0 + first_s
        self.eta_s: float | None = None

    def fraction(self, t_virtual: float, records: int) -> float | None:
        if self.virtual_s:
            return min(1.0, t_virtual / self.virtual_s)
        if self.requests:
            return min(1.0, records / self.requests)
        return None

    def __call__(self, t_virtual: float, records: int) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        elapsed = now - self.t0
        frac = self.fraction(t_virtual, records)
        if self.virtual_s:
            where = f"{t_virtual / 3600:.2f} of {self.virtual_s / 3600:g} h simulated"
        else:
            where = f"{t_virtual / 3600:.2f} h simulated"
        line = f"{self.prefix}{records:,} requests, {where} in {_dur(elapsed)}"
        if frac and frac > 0:
            self.eta_s = elapsed * (1.0 - frac) / frac
            line += f"; ETA {_dur(self.eta_s)}"
        self.say(line)
