"""Time series of a run: client-side signals from the records, server and GPU signals from their files.

The contract: :func:`client_signals` turns per-request times into windowed
series without a Python loop over requests (sorted arrays, cumulative sums and
``searchsorted``), so a 10M-request run costs a few sorts;
:func:`file_signals` reads ``server_metrics.parquet`` / ``gpu.parquet`` (a
``t`` column in seconds from the run start, one column per signal) and
averages them into at most ``max_points`` buckets::

    >>> grid = window_grid(duration_s=60.0)       # 0, 0.5, ..., 60 (windows of 0.5 s)
    >>> sigs = client_signals(metrics, grid)
    >>> [s.key for s in sigs]
    ['request_rate', 'token_rate', 'in_flight', 'ttft_p95']

How each is defined (window = [t_k, t_k+1)):
- request rate: requests sent (``sent_at``) and completed ok (``ended_at``)
  in the window, divided by its length;
- output tokens/s: each ok request's output tokens spread evenly over
  [first_token_at, ended_at] (all at once when the two coincide);
- in flight: time-average of the number of requests between ``sent_at`` and
  ``ended_at``;
- TTFT p95: nearest-rank 95th percentile of the TTFT of ok requests whose
  first token arrived in the window (windows with no such request are gaps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from infermeter.analysis.compare import RequestArrays
from infermeter.errors import DataError


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    t: np.ndarray
    v: np.ndarray  # NaN = gap


@dataclass(frozen=True, slots=True)
class Signal:
    key: str
    title: str
    unit: str
    series: tuple[Series, ...]


def window_grid(duration_s: float, target_windows: int = 150) -> np.ndarray:
    """Window edges from 0 past ``duration_s`` with a 1-2-5 step giving about ``target_windows`` windows."""
    duration_s = max(float(duration_s), 1e-3)
    raw = duration_s / target_windows
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = int(math.ceil(duration_s / step - 1e-9))
    return np.asarray(np.arange(n + 1) * step, dtype=np.float64)


def cumulative_ramps(starts: np.ndarray, ends: np.ndarray, amounts: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """F(t) = sum of ``amounts`` each spread evenly over [start, end], evaluated at ``grid``.

    Zero-length spans count in full from their start.
    """
    keep = np.isfinite(starts) & np.isfinite(ends) & np.isfinite(amounts) & (ends >= starts)
    s, e, a = starts[keep], ends[keep], amounts[keep]
    span = e - s
    point = span <= 0
    out = np.zeros(grid.shape)
    if point.any():
        order = np.argsort(s[point], kind="stable")
        ps, pa_ = s[point][order], np.cumsum(a[point][order])
        idx = np.searchsorted(ps, grid, side="right")
        out += np.where(idx > 0, pa_[np.maximum(idx - 1, 0)], 0.0)
    s, e, a = s[~point], e[~point], a[~point]
    if s.size:
        slope = a / (e - s)
        for edge, sign in ((s, 1.0), (e, -1.0)):
            order = np.argsort(edge, kind="stable")
            es, sl = edge[order], slope[order]
            c1, c2 = np.cumsum(sl), np.cumsum(sl * es)
            idx = np.searchsorted(es, grid, side="right")
            got = idx > 0
            j = np.maximum(idx - 1, 0)
            out += sign * np.where(got, grid * c1[j] - c2[j], 0.0)
    return out


def _rate(times: np.ndarray, grid: np.ndarray) -> np.ndarray:
    t = np.sort(times[np.isfinite(times)])
    counts = np.diff(np.searchsorted(t, grid, side="left"))
    return counts / np.diff(grid)


def windowed_quantile(times: np.ndarray, values: np.ndarray, grid: np.ndarray, q: float) -> np.ndarray:
    """Nearest-rank ``q`` quantile of ``values`` grouped by the window of ``times``; NaN for empty windows."""
    keep = np.isfinite(times) & np.isfinite(values)
    w = np.searchsorted(grid, times[keep], side="right") - 1
    v = values[keep]
    inside = (w >= 0) & (w < grid.size - 1)
    w, v = w[inside], v[inside]
    order = np.lexsort((v, w))
    w, v = w[order], v[order]
    out = np.full(grid.size - 1, np.nan)
    if w.size == 0:
        return out
    starts = np.searchsorted(w, np.arange(grid.size - 1), side="left")
    ends = np.searchsorted(w, np.arange(grid.size - 1), side="right")
    count = ends - starts
    has = count > 0
    rank = starts + np.maximum(np.ceil(q * count).astype(np.int64) - 1, 0)
    out[has] = v[rank[has]]
    return out


def client_signals(m: RequestArrays, grid: np.ndarray) -> list[Signal]:
    """Request rate, output tokens/s, in flight and windowed TTFT p95 (see the module docstring)."""
    mid = (grid[:-1] + grid[1:]) / 2
    width = np.diff(grid)
    ended_ok = np.where(m.ok, m.ended_at, np.nan)
    tokens = cumulative_ramps(m.first_token_at, ended_ok, m.output_tokens, grid)
    # A request still open at the end of the records counts as in flight until the last edge.
    open_end = np.where(np.isfinite(m.ended_at), m.ended_at, grid[-1])
    busy = cumulative_ramps(m.sent_at, open_end, open_end - m.sent_at, grid)
    return [
        Signal("request_rate", "Request rate", "req/s", (
            Series("sent", mid, _rate(m.sent_at, grid)),
            Series("completed ok", mid, _rate(ended_ok, grid)),
        )),
        Signal("token_rate", "Output tokens per second", "tok/s", (Series("output tokens/s", mid, np.diff(tokens) / width),)),
        Signal("in_flight", "Requests in flight (client side)", "requests", (Series("in flight", mid, np.diff(busy) / width),)),
        Signal("ttft_p95", "TTFT p95 per window", "ms", (
            Series("TTFT p95", mid, windowed_quantile(m.first_token_at, m.ttft_ms, grid, 0.95)),
        )),
    ]


# ------------------------------------------------------------------ files

# column -> (signal key, chart title, unit, scale); fractions are shown as percentages.
_KNOWN = {
    "kv_cache_usage": ("kv_cache", "KV-cache usage (server)", "%", 100.0),
    "prefix_cache_hit_rate": ("prefix_cache", "Prefix-cache hit rate (server)", "%", 100.0),
    "num_requests_waiting": ("queue", "Queue depth and running requests (server)", "requests", 1.0),
    "num_requests_running": ("queue", "Queue depth and running requests (server)", "requests", 1.0),
    "temperature_c": ("gpu_temperature", "GPU temperature", "°C", 1.0),
    "power_w": ("gpu_power", "GPU power", "W", 1.0),
    "utilization_pct": ("gpu_utilization", "GPU utilization", "%", 1.0),
    "memory_used_bytes": ("gpu_memory", "GPU memory used", "GiB", 1.0 / 2**30),
    "sm_clock_mhz": ("gpu_clock", "GPU SM clock", "MHz", 1.0),
}
_SKIP = {"clock_event_reasons", "energy_j", "scrape_ok", "scrape_error"}
# Cumulative counters (scraped as totals): charted as their rate of change.
_COUNTERS = {
    "prefix_cache_hits": ("prefix_cache_hits_rate", "Prefix-cache hits (server)", "tokens/s"),
    "prefix_cache_queries": ("prefix_cache_queries_rate", "Prefix-cache queries (server)", "tokens/s"),
    "num_preemptions": ("preemptions_rate", "Preemptions (server)", "per s"),
    "prompt_tokens": ("server_prompt_tps", "Prompt tokens processed (server)", "tok/s"),
    "generation_tokens": ("server_generation_tps", "Generation tokens (server)", "tok/s"),
}


def _counter_rate(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rate of a cumulative counter between consecutive samples (a reset gives NaN, not a negative rate)."""
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if t.size < 2:
        return np.empty(0), np.empty(0)
    dt, dv = np.diff(t), np.diff(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where((dt > 0) & (dv >= 0), dv / dt, np.nan)
    return (t[1:] + t[:-1]) / 2, rate


def _windowed_mean(t: np.ndarray, total: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean of a histogram between samples: d(sum) / d(count)."""
    ok = np.isfinite(t) & np.isfinite(total) & np.isfinite(count)
    t, total, count = t[ok], total[ok], count[ok]
    order = np.argsort(t, kind="stable")
    t, total, count = t[order], total[order], count[order]
    if t.size < 2:
        return np.empty(0), np.empty(0)
    ds, dc = np.diff(total), np.diff(count)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(dc > 0, ds / dc, np.nan)
    return (t[1:] + t[:-1]) / 2, mean
_GROUP_COLUMNS = ("gpu", "gpu_index", "index", "device")


def _notnull(col: np.ndarray) -> np.ndarray:
    """Mask of entries that are neither None nor NaN (object or numeric arrays)."""
    if col.dtype.kind == "f":
        return np.asarray(np.isfinite(col), dtype=bool)
    if col.dtype == object:
        return np.array([x is not None for x in col], dtype=bool)
    return np.ones(col.shape, dtype=bool)


def _bucket_mean(t: np.ndarray, v: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(t)
    t, v = t[ok], v[ok]
    if t.size <= max_points:
        order = np.argsort(t, kind="stable")
        return t[order], v[order]
    edges = np.linspace(t.min(), t.max(), max_points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, max_points - 1)
    good = np.isfinite(v)
    n = np.bincount(b[good], minlength=max_points)
    s = np.bincount(b[good], weights=v[good], minlength=max_points)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (edges[:-1] + edges[1:]) / 2, np.where(n > 0, s / np.maximum(n, 1), np.nan)


def file_signals(path: Path, max_points: int = 600) -> list[Signal]:
    """Signals from a ``t``-indexed parquet file; DataError naming the file when it has no ``t``."""
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise DataError(f"{path}: not a readable parquet file ({exc})") from None
    if "t" not in table.column_names:
        raise DataError(f"{path}: no 't' column (seconds from the run start)")
    group_col = next((c for c in _GROUP_COLUMNS if c in table.column_names), None)
    groups: list[tuple[str, np.ndarray]] = [("", np.ones(table.num_rows, dtype=bool))]
    if group_col:
        col = table.column(group_col).to_numpy(zero_copy_only=False)
        groups = [(f"{group_col} {g}", col == g) for g in sorted(set(col[_notnull(col)].tolist()), key=str)]
    t_all = table.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
    signals: dict[str, Signal] = {}
    for name in table.column_names:
        if name in ("t", group_col) or name in _SKIP:
            continue
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
            continue
        values = col.to_numpy(zero_copy_only=False).astype(np.float64)
        if name.endswith("_count"):
            continue
        if name.endswith("_sum"):
            base = name[: -len("_sum")]
            if base + "_count" not in table.column_names:
                continue
            counts = table.column(base + "_count").to_numpy(zero_copy_only=False).astype(np.float64)
            key, title, unit, scale = (f"{base}_mean", f"{base.replace('_seconds', '').replace('_', ' ')} mean (server, per scrape)", "ms", 1000.0)
        elif name in _COUNTERS:
            key, title, unit = _COUNTERS[name]
            scale = 1.0
        else:
            key, title, unit, scale = _KNOWN.get(name, (name, name.replace("_", " "), "", 1.0))
        values = values * scale
        for gname, mask in groups:
            if name.endswith("_sum"):
                tt, vv = _windowed_mean(t_all[mask], values[mask], counts[mask])
            elif name in _COUNTERS:
                tt, vv = _counter_rate(t_all[mask], values[mask])
            else:
                tt, vv = t_all[mask], values[mask]
            t, v = _bucket_mean(tt, vv, max_points)
            shown = (name[: -len("_sum")].replace("_seconds", "").replace("_", " ") + " mean (ms)"
                     if name.endswith("_sum") else name.replace("_", " "))  # the legend says what is drawn
            label = shown + (f" ({gname})" if gname else "")
            old = signals.get(key)
            series = (old.series if old else ()) + (Series(label, t, v),)
            signals[key] = Signal(key, title, unit, series)
    return list(signals.values())
