"""Load shapes: frozen configs that yield intended send times (the registry).

Every shape implements :class:`~infermeter.load.shapes.base.BaseShape` (``open_loop``,
``streams``, ``mean_rate``, ``peak_rate``, ``schedule(rng, specs)``, ``describe()``); the
runner, workers, resume, simulation and plans read only those. ``Shape`` is the
discriminated union on ``kind`` (k6's names), so a shape round-trips through run.json::

    >>> import numpy as np
    >>> shape = ConstantArrivalRate(rate_per_s=4.0, arrival="constant")
    >>> offsets = shape.arrivals(np.random.default_rng(0))
    >>> [round(next(offsets), 3) for _ in range(3)]
    [0.0, 0.25, 0.5]
    >>> parse_shape(shape.model_dump()) == shape
    True

Adding a shape: one module with a ``BaseShape`` subclass and one line in ``Shape`` (adding an
arrival process: one module and one line in ``arrivals.ARRIVALS``; ``weibull`` was added so).
"""

from __future__ import annotations

from typing import Annotated, Any, Union, get_args

from pydantic import Field, TypeAdapter

from infermeter.load.shapes.arrivals import ARRIVALS, SHAPED, check_arrival, operational_times
from infermeter.load.shapes.base import BaseShape
from infermeter.load.shapes.closed import ConstantConcurrency
from infermeter.load.shapes.ramp import RampingArrivalRate
from infermeter.load.shapes.rate import ConstantArrivalRate
from infermeter.load.shapes.replay import TraceReplay

# The registry: one line per shape.
Shape = Annotated[Union[
    ConstantArrivalRate,
    RampingArrivalRate,
    ConstantConcurrency,
    TraceReplay,
], Field(discriminator="kind")]
SHAPES: tuple[type[BaseShape], ...] = get_args(get_args(Shape)[0])
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Shape)


def parse_shape(data: dict[str, Any]) -> BaseShape:
    """A shape from its JSON (``kind`` picks the class)."""
    shape: BaseShape = _ADAPTER.validate_python(data)
    return shape


__all__ = ["ARRIVALS", "SHAPED", "SHAPES", "BaseShape", "ConstantArrivalRate", "ConstantConcurrency",
           "RampingArrivalRate", "Shape", "TraceReplay", "check_arrival", "operational_times", "parse_shape"]
