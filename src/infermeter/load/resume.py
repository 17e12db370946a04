"""Where a resumed run picks its schedule up again (``infermeter run --resume DIR``).

The schedule is deterministic (same seed, same arrivals, same specs), so a
killed run continues at the first index with no record on disk, ``next_index``.
The run clock keeps counting from the original start; the downtime becomes a
*shift*: run clock = schedule time + shift. Open loop: the next request goes
out ``lead_s`` from now, the ones after keep their spacing. Closed loop: the
schedule time reached before the kill (last activity minus the old shift)
continues from now. Indices that were in flight when the run died get
``cancelled`` records whose ``intended_at`` is their scheduled time (open
loop) or the last activity (closed loop)::

    >>> p = resume_point(ConstantArrivalRate(rate_per_s=2, arrival="constant"), seed=0, next_index=10,
    ...                  missing=[9], prev_shift_s=0.0, last_seen_s=5.2, now_s=100.0, lead_s=0.5)
    >>> p.shift_s, p.gap_s, p.lost_intended
    (95.5, 95.5, {9: 4.5})
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from infermeter.load.shapes import BaseShape, ConstantArrivalRate

__all__ = ["ConstantArrivalRate", "ResumePoint", "resume_point"]  # ConstantArrivalRate: for the doctest


@dataclass(frozen=True)
class ResumePoint:
    first_index: int
    shift_s: float  # run clock = schedule time + shift_s, from now on
    gap_s: float  # shift added by this resume (the downtime)
    next_offset_s: float | None  # schedule time of the first resumed request (open loop)
    lost_intended: dict[int, float]


def resume_point(shape: BaseShape, *, seed: int, next_index: int, missing: list[int], prev_shift_s: float,
                 last_seen_s: float, now_s: float, lead_s: float = 0.5,
                 make_specs: Callable[[], Iterator[Any]] | None = None) -> ResumePoint:
    """See the module docstring; ``now_s`` is the run clock now, ``last_seen_s`` the last activity on it."""
    if not shape.open_loop:
        shift = now_s + lead_s - (last_seen_s - prev_shift_s)
        return ResumePoint(next_index, shift, shift - prev_shift_s, None, {i: last_seen_s for i in missing})
    want = set(missing)
    lost: dict[int, float] = {}
    if shape.needs_specs and make_specs is None:
        raise ValueError("a replay needs its specs to resume")
    specs = make_specs() if make_specs is not None else itertools.repeat(None)
    offsets = (t for t, _ in shape.schedule(np.random.default_rng(seed), specs))
    nxt = None
    for i, o in enumerate(offsets):
        if i in want:
            lost[i] = o + prev_shift_s
        if i == next_index:
            nxt = o
            break
    if nxt is None:  # the schedule ended before next_index
        return ResumePoint(next_index, prev_shift_s, 0.0, None, lost)
    shift = now_s + lead_s - nxt
    return ResumePoint(next_index, shift, shift - prev_shift_s, nxt, lost)
