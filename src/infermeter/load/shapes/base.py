"""What every load shape promises (the ``Shape`` seam): the runner, workers, resume, the
simulator and multi-step plans know a shape only through this.

A shape is a small frozen config. An *open-loop* shape turns the request specs into a
schedule: ``schedule(rng, specs)`` yields ``(offset_s, spec)``, the intended send time of each
request in seconds from the run start (absolute, never relative to the previous send). A
*closed-loop* shape has ``streams`` (k6's VUs): each sends its next request when the previous
one ends, and has no schedule::

    >>> import numpy as np
    >>> from infermeter.load.shapes import ConstantArrivalRate
    >>> s = ConstantArrivalRate(rate_per_s=4.0, arrival="constant")
    >>> [round(t, 2) for t, _ in itertools.islice(s.schedule(np.random.default_rng(0), iter("abc")), 3)]
    [0.0, 0.25, 0.5]
    >>> s.open_loop, s.mean_rate, s.describe()
    (True, 4.0, 'open loop, 4 req/s (constant)')

A new shape is one module with a subclass of :class:`BaseShape` and one line in the registry
(``infermeter.load.shapes.SHAPES``); everything else reads these attributes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict


class BaseShape(BaseModel):
    """Defaults: open loop, the schedule pairs ``arrivals(rng)`` with the specs in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str

    @property
    def open_loop(self) -> bool:
        return self.streams is None

    @property
    def streams(self) -> int | None:
        """Closed loop: the number of streams; None for open-loop shapes."""
        return None

    @property
    def mean_rate(self) -> float | None:
        """The rate a run of this shape is labelled with (req/s; None: closed loop or a trace)."""
        return None

    @property
    def peak_rate(self) -> float | None:
        """The highest rate the shape asks for (req/s), for the client-capacity check."""
        return self.mean_rate

    @property
    def needs_specs(self) -> bool:
        """Whether the schedule's times come from the specs themselves (a trace)."""
        return False

    def arrivals(self, rng: np.random.Generator) -> Iterator[float]:
        """Intended send offsets (s) that do not depend on the specs."""
        raise NotImplementedError(f"{self.kind} has no schedule of its own")

    @property
    def offsets_only(self) -> bool:
        """Whether :meth:`schedule` is :meth:`arrivals` paired with the specs in order (then
        :meth:`arrival_blocks` gives its times without the specs)."""
        return type(self).schedule is BaseShape.schedule

    def arrival_blocks(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        """:meth:`arrivals` as float64 arrays (the same floats in the same order; a shape may draw them a
        block at a time)."""
        it = self.arrivals(rng)
        while True:
            block = np.fromiter(itertools.islice(it, 1024), dtype=np.float64)
            if not len(block):
                return
            yield block

    def schedule(self, rng: np.random.Generator, specs: Iterator[Any]) -> Iterator[tuple[float, Any]]:
        """``(offset_s, spec)`` for each request, in send order (open loop)."""
        return zip(self.arrivals(rng), specs)

    def expected_requests(self, duration_s: float | None) -> float | None:
        """About how many requests a run of ``duration_s`` sends (None when it cannot be told)."""
        rate = self.mean_rate
        return rate * duration_s if rate and duration_s else None

    def describe(self) -> str:
        raise NotImplementedError

    def header(self) -> dict[str, Any]:
        """The ``load`` block of run.json for this shape."""
        return {**self.model_dump(mode="json"), "describe": self.describe(), "open_loop": self.open_loop,
                "target_rate": self.mean_rate}
