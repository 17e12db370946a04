"""``replay``: an open loop at a trace's own timestamps, scaled.

Each request spec of a trace dataset carries ``arrival_s``; the intended send is
``arrival_s * time_scale`` (a spec without one is sent at 0)::

    >>> from types import SimpleNamespace as S
    >>> list(TraceReplay(time_scale=0.5).schedule(None, iter([S(arrival_s=2.0), S(arrival_s=None)])))[0][0]
    1.0
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
from pydantic import Field

from infermeter.load.shapes.base import BaseShape


class TraceReplay(BaseShape):
    """Open loop at the trace's own timestamps: offset = arrival_s * time_scale."""

    kind: Literal["replay"] = "replay"
    time_scale: float = Field(1.0, gt=0)

    @property
    def needs_specs(self) -> bool:
        return True

    def schedule(self, rng: np.random.Generator | None, specs: Iterator[Any]) -> Iterator[tuple[float, Any]]:
        for spec in specs:
            yield float(getattr(spec, "arrival_s", None) or 0.0) * self.time_scale, spec

    def describe(self) -> str:
        return f"trace replay at time scale {self.time_scale:g}"
