"""Small reductions over sampled time series, shared by the server and GPU samplers.

Promise: every function treats ``None`` as *unavailable* — it is skipped,
never read as zero — and returns ``None`` when nothing is available.

    >>> counter_delta([10.0, 15.0, 2.0, 4.0])   # reset after 15: 5 + 2 + 2
    9.0
    >>> gauge_mean([None, 1.0, 3.0]), gauge_max([None, None])
    (2.0, None)

:func:`rows_to_parquet` writes ``{"t": .., key: ..}`` rows with a fixed column
order (missing keys become nulls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _present(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def gauge_mean(values: Sequence[float | None]) -> float | None:
    vals = _present(values)
    return sum(vals) / len(vals) if vals else None


def gauge_max(values: Sequence[float | None]) -> float | None:
    vals = _present(values)
    return max(vals) if vals else None


def counter_delta(values: Sequence[float | None]) -> float | None:
    """Increase of a cumulative counter over the samples, surviving resets.

    A decrease is read as a restart from zero (the new value is the increase).
    ``None`` with fewer than two available samples: one reading has no delta.
    """
    vals = _present(values)
    if len(vals) < 2:
        return None
    total = 0.0
    for prev, cur in zip(vals, vals[1:]):
        total += cur - prev if cur >= prev else cur
    return total


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or ``None`` when either is unavailable or ``den`` is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def hold_weights(times: Sequence[float]) -> list[float]:
    """Time each sample's state is taken to hold: until the next sample.

    The last sample gets the mean spacing (or 1.0 when there is a single
    sample), so fractions of time are exact for evenly spaced samples.
    """
    n = len(times)
    if n == 0:
        return []
    if n == 1:
        return [1.0]
    gaps = [max(0.0, b - a) for a, b in zip(times, times[1:])]
    mean_gap = sum(gaps) / len(gaps)
    return gaps + [mean_gap]


def rows_to_parquet(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], path: Path, types: dict[str, str] | None = None
) -> None:
    """Write rows as a parquet table, ``columns`` in order; float64 unless ``types`` names another
    arrow type (``"int64"``, ``"string"``, ...). Written to a temporary name, then renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = types or {}
    arrays = [pa.array([r.get(c) for r in rows], type=pa.type_for_alias(types.get(c, "float64"))) for c in columns]
    table = pa.Table.from_arrays(arrays, names=list(columns))
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
