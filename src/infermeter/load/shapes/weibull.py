"""The ``weibull`` arrival process: Weibull(k) gaps scaled to a unit mean.

Inter-arrival times of production LLM traces are often burstier than Poisson with a heavier
tail than gamma; a Weibull renewal process with shape ``k`` (``--burstiness``) models that:
k = 1 is Poisson, k < 1 gives clusters of sends separated by long quiet gaps, k > 1 is more
regular. The mean gap is 1 (scale 1 / Gamma(1 + 1/k)); the CV is
sqrt(Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1) (2.24 for k = 0.5).

    >>> import numpy as np
    >>> g = weibull_gaps(np.random.default_rng(0), 200_000, 0.5)
    >>> round(float(g.mean()), 2)
    1.0
"""

from __future__ import annotations

import math

import numpy as np


def weibull_gaps(rng: np.random.Generator, n: int, k: float) -> np.ndarray:
    """``n`` unit-mean Weibull(k) gaps."""
    return rng.weibull(k, n) / math.gamma(1.0 + 1.0 / k)
