"""Arrival processes: unit-mean gaps between the sends of an open-loop shape.

An arrival process is what ``--arrival`` names. It yields points ``u_0 = 0, u_1, ...`` in
"operational time" with unit mean spacing; a shape's rate maps them to wall time
(:mod:`infermeter.load.shapes`). The registry below is the one list of names; adding a
process is one module with a :class:`Process` and one line here::

    >>> import numpy as np
    >>> [round(u, 3) for u in itertools.islice(operational_times("constant", 1.0, np.random.default_rng(0)), 3)]
    [0.0, 1.0, 2.0]

``k`` (``--burstiness``) is the process's shape parameter where it has one: gamma(k) gaps
have CV 1/sqrt(k) (k < 1 burstier than Poisson); see each process.
"""

from __future__ import annotations

import itertools  # noqa: F401 - used by the doctest
from collections.abc import Callable, Iterator

import numpy as np

from infermeter.load.shapes.weibull import weibull_gaps

_BATCH = 1024

# name -> gaps(rng, n, k): n unit-mean gaps
Process = Callable[[np.random.Generator, int, float], np.ndarray]


def _constant(rng: np.random.Generator, n: int, k: float) -> np.ndarray:
    return np.ones(n)


def _poisson(rng: np.random.Generator, n: int, k: float) -> np.ndarray:
    return rng.exponential(1.0, n)


def _gamma(rng: np.random.Generator, n: int, k: float) -> np.ndarray:
    return rng.gamma(k, 1.0 / k, n)


ARRIVALS: dict[str, Process] = {
    "constant": _constant,  # evenly spaced
    "poisson": _poisson,  # exponential gaps, CV 1
    "gamma": _gamma,  # gamma(k) gaps, CV 1/sqrt(k)
    "weibull": weibull_gaps,  # Weibull(k) gaps, heavy-tailed bursts for k < 1
}
# processes that use --burstiness (k)
SHAPED = frozenset({"gamma", "weibull"})


def check_arrival(name: str) -> str:
    """``name`` if it is a registered process; ValueError listing them otherwise."""
    if name not in ARRIVALS:
        raise ValueError(f"arrival {name!r}: use one of {', '.join(ARRIVALS)}")
    return name


def operational_times(arrival: str, burstiness: float, rng: np.random.Generator) -> Iterator[float]:
    """Unit-mean arrival points u_0 = 0, u_1, ...; see the module docstring."""
    for block in operational_blocks(arrival, burstiness, rng):
        yield from block.tolist()


def operational_blocks(arrival: str, burstiness: float, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """The points of :func:`operational_times` as float64 arrays of ``_BATCH``, one block of gaps drawn per
    array (the same draws, when they are needed): ``u_{n+1} = u_n + g_n``, added one after the other in
    double precision (``np.add.accumulate`` is a running sum, not a pairwise one: the same floats)."""
    gaps_of = ARRIVALS[check_arrival(arrival)]
    u = 0.0
    while True:
        gaps = np.asarray(gaps_of(rng, _BATCH, burstiness), dtype=np.float64)
        points = np.add.accumulate(np.concatenate(([u], gaps)))
        u = float(points[-1])
        yield points[:-1]
