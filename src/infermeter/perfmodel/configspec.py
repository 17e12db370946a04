"""Hardware configuration strings: ``[N x]HARDWARE[:tpT[,ppP]]``.

The one parser for how users name a deployment's hardware, shared by ``plan``,
``cost``, ``capacity``, ``simulate`` and ``study``::

    >>> parse_config("4xa100-80gb:tp4")
    HardwareConfig(hardware='a100-80gb', count=4, tp=4, pp=1)
    >>> parse_config("8xa10g:tp4,pp2").label
    '8xa10g:tp4,pp2'
    >>> parse_config("h100-sxm")
    HardwareConfig(hardware='h100-sxm', count=1, tp=1, pp=1)

Rules: ``count`` defaults to ``tp*pp`` (or 1); when given with no ``tp``/``pp``,
``tp`` defaults to ``count``; ``tp*pp`` must divide ``count`` (the rest are
data-parallel replicas). Hardware ids are lowercase catalog keys; this module
does not check them against the catalog (``perfmodel.hardware`` does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infermeter.errors import ConfigError

_RE = re.compile(r"^\s*(?:(?P<count>\d+)\s*[x×]\s*)?(?P<hw>[a-z0-9][a-z0-9._-]*)\s*(?::(?P<par>[a-z0-9, ]+))?\s*$", re.I)


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    """A number of identical accelerators and how one model replica spans them."""

    hardware: str
    count: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def replicas(self) -> int:
        """Data-parallel replicas inside the configuration (count / (tp*pp))."""
        return self.count // self.gpus_per_replica

    @property
    def label(self) -> str:
        """Canonical string; ``parse_config(c.label) == c`` (``4xh100-sxm:tp1`` keeps its ``tp1``)."""
        head = f"{self.count}x{self.hardware}" if self.count != 1 else self.hardware
        par = []
        if self.tp != 1:
            par.append(f"tp{self.tp}")
        if self.pp != 1:
            par.append(f"pp{self.pp}")
        if not par and self.count != 1:
            par.append("tp1")  # without it the count would read as the TP degree
        return head + (":" + ",".join(par) if par else "")


def parse_config(text: str) -> HardwareConfig:
    """Parse ``[N x]HW[:tpT[,ppP]]``; raise ConfigError naming the string when malformed."""
    m = _RE.match(text or "")
    if not m:
        raise ConfigError(f"hardware configuration {text!r}: expected [N x]HARDWARE[:tpT[,ppP]], e.g. '4xa100-80gb:tp4'")
    hw = m.group("hw").lower()
    count = int(m.group("count")) if m.group("count") else None
    tp = pp = None
    if m.group("par"):
        for part in (p.strip().lower() for p in m.group("par").split(",") if p.strip()):
            pm = re.fullmatch(r"(tp|pp)(\d+)", part)
            if not pm:
                raise ConfigError(f"hardware configuration {text!r}: unknown parallelism {part!r} (use tpN or ppN)")
            val = int(pm.group(2))
            if val < 1:
                raise ConfigError(f"hardware configuration {text!r}: {part!r} must be >= 1")
            if pm.group(1) == "tp":
                tp = val
            else:
                pp = val
    if count is not None and count < 1:
        raise ConfigError(f"hardware configuration {text!r}: the GPU count must be >= 1")
    if tp is None and pp is None:
        tp, pp = (count or 1), 1
    tp, pp = tp or 1, pp or 1
    if count is None:
        count = tp * pp
    if count % (tp * pp):
        raise ConfigError(f"hardware configuration {text!r}: tp*pp = {tp * pp} does not divide {count} GPUs")
    return HardwareConfig(hardware=hw, count=count, tp=tp, pp=pp)
