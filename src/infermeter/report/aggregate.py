"""Aggregate one run's files into the small numbers a report draws.

The contract: :func:`aggregate_run` reads only the columns it needs from
``requests.parquet`` (never ``chunk_times``), derives per-request metrics as
numpy arrays, and returns latency distributions (CDF points and a histogram)
and time series; memory is a few arrays per column and no Python object is
made per request, so 10M records take seconds::

    >>> from infermeter.report.rundir import load_run_dir
    >>> agg = aggregate_run(load_run_dir("results/demo"))      # a run with server and GPU telemetry
    >>> ttft_max, level = agg.distributions["ttft_ms"].cdf[-1]   # the last CDF point: (max TTFT in ms, 1.0)
    >>> level
    1.0
    >>> [s.key for s in agg.signals]
    ['request_rate', 'token_rate', 'in_flight', 'ttft_p95', 'kv_cache', 'queue', 'gpu_temperature', 'gpu_power']

CDF points: the nearest-rank quantiles at ``CDF_LEVELS``. Histogram: 40 bins
over [min, max], log-spaced when max/min > 10; each bin holds the share of
requests in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from infermeter.analysis.compare import READ_COLUMNS, RequestArrays, per_request_metrics
from infermeter.errors import DataError
from infermeter.report.rundir import RunDir
from infermeter.report.timeseries import Signal, client_signals, file_signals, window_grid

CDF_LEVELS = np.concatenate([np.arange(0, 100) / 100, [0.995, 0.999, 1.0]])
HIST_BINS = 40
DISTRIBUTION_METRICS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E latency"}


@dataclass(frozen=True, slots=True)
class Distribution:
    n: int
    cdf: list[tuple[float, float]]  # (value, fraction of requests <= value)
    hist: list[tuple[float, float, float]]  # (bin low, bin high, share of requests)
    log: bool


@dataclass(frozen=True)
class RunAggregates:
    distributions: dict[str, Distribution] = field(default_factory=dict)
    signals: list[Signal] = field(default_factory=list)
    window_s: float | None = None
    n_requests: int = 0
    notes: list[str] = field(default_factory=list)


def distribution(values: np.ndarray) -> Distribution | None:
    """CDF points and histogram of the finite ``values``; None when there are none."""
    v = np.sort(values[np.isfinite(values)])
    n = v.size
    if n == 0:
        return None
    ranks = np.clip(np.ceil(CDF_LEVELS * n).astype(np.int64) - 1, 0, n - 1)
    cdf = [(float(v[r]), float(p)) for r, p in zip(ranks, CDF_LEVELS, strict=True)]
    lo, hi = float(v[0]), float(v[-1])
    log = lo > 0 and hi / lo > 10
    if hi == lo:
        edges = np.array([lo - 0.5, hi + 0.5]) if lo == 0 else np.array([lo * 0.95, hi * 1.05])
    elif log:
        edges = np.geomspace(lo, hi, HIST_BINS + 1)
    else:
        edges = np.linspace(lo, hi, HIST_BINS + 1)
    idx = np.searchsorted(v, edges, side="left")
    idx[-1] = n  # the last bin is closed on the right
    share = np.diff(idx) / n
    hist = [(float(a), float(b), float(s)) for a, b, s in zip(edges[:-1], edges[1:], share, strict=True)]
    return Distribution(n=n, cdf=cdf, hist=hist, log=log)


def read_requests(run: RunDir) -> RequestArrays | None:
    """Per-request metrics and times of the measure phase, or None when the run has no records."""
    path = run.requests_path
    if path is None:
        return None
    try:
        table = pq.read_table(path, columns=list(READ_COLUMNS), read_dictionary=["phase", "outcome"])
    except Exception as exc:  # pyarrow raises several types for unreadable or mismatched files
        raise DataError(f"{path}: cannot read the request records ({exc})") from None
    return per_request_metrics(table)


def aggregate_run(run: RunDir, max_points: int = 600) -> RunAggregates:
    """Distributions and time series of one (leaf) run; missing files leave notes, not errors."""
    notes: list[str] = []
    dists: dict[str, Distribution] = {}
    signals: list[Signal] = []
    window = None
    metrics = read_requests(run)
    n = 0
    if metrics is None:
        notes.append("no requests.parquet: distributions and client-side time series are not available")
    else:
        n = metrics.n
        for key in DISTRIBUTION_METRICS:
            d = distribution(getattr(metrics, key))
            if d is not None:
                dists[key] = d
        horizon = np.nanmax(np.concatenate([metrics.ended_at, metrics.sent_at, [0.0]]))
        duration = float(run.summary.duration_s or 0.0)
        # about 20 requests per window on average, between 20 and 150 windows
        grid = window_grid(max(horizon, duration, 1e-3), target_windows=int(min(150, max(20, n / 20))))
        window = float(grid[1] - grid[0])
        signals.extend(client_signals(metrics, grid))
    for path, what in ((run.server_metrics_path, "server metrics"), (run.gpu_path, "GPU telemetry")):
        if path is None:
            notes.append(f"no {what} recorded")
        else:
            signals.extend(file_signals(path, max_points=max_points))
    return RunAggregates(distributions=dists, signals=signals, window_s=window, n_requests=n, notes=notes)
