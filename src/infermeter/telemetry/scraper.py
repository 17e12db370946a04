"""Poll an inference server's Prometheus endpoint during a run and summarize it.

Promise: :class:`MetricsScraper` scrapes ``base_url + path`` once at
``start()`` (the baseline), every ``interval_s`` after, and once at
``stop()``. Each scrape becomes one row ``{"t": now(), signal: value, ...}``
of the common signals from :mod:`infermeter.telemetry.adapters` (``None`` =
unavailable), and every raw series is kept too. ``summary()`` gives the run's
``server_metrics`` block; ``window(start_s, end_s)`` the same over a time
window; ``write(run_dir)`` stores ``server_metrics.parquet`` (one row per
scrape) and ``server_metrics_raw.parquet`` (long form: t, name, labels, value).

    scraper = MetricsScraper("http://127.0.0.1:8000", now=run_clock)
    async with aiohttp.ClientSession() as session:
        await scraper.start(session)   # baseline scrape, then background polling
        ...                            # the load
        await scraper.stop()           # final scrape
    result["server_metrics"] = scraper.summary()
    scraper.write(run_dir)

The engine is detected from metric names unless given; the path defaults to
the engine's (``/metrics``; ``/prometheus/metrics`` for TensorRT-LLM) and,
when neither is given, ``/metrics`` is tried before ``/prometheus/metrics``.
A server without metrics leaves every signal unavailable; scraping never
raises into the run. ``headers`` (e.g. auth) are sent but never stored.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from infermeter.errors import ConfigError
from infermeter.telemetry._poller import Poller
from infermeter.telemetry._series import counter_delta, gauge_max, gauge_mean, ratio, rows_to_parquet
from infermeter.telemetry.adapters import ADAPTERS, COUNTERS, GAUGES, HISTOGRAMS, SIGNALS, detect, extract
from infermeter.telemetry.exposition import Exposition, looks_like_exposition, parse_exposition
from infermeter.telemetry.spec_decode import spec_decode_summary

SERIES_FILE = "server_metrics.parquet"
RAW_FILE = "server_metrics_raw.parquet"


class _RawStore:
    """Raw samples, compactly: series keys interned to ids, values in arrays per scrape."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []  # (name, labels as sorted JSON)
        self._ids: dict[tuple[str, str], int] = {}
        self.scrapes: list[tuple[float, array[int], array[float]]] = []

    def add(self, t: float, exp: Exposition) -> None:
        ids: array[int] = array("l")
        vals: array[float] = array("d")
        for s in exp.samples:
            key = (s.name, json.dumps(s.labels, sort_keys=True, separators=(",", ":")))
            sid = self._ids.get(key)
            if sid is None:
                sid = self._ids[key] = len(self.keys)
                self.keys.append(key)
            ids.append(sid)
            vals.append(s.value)
        self.scrapes.append((t, ids, vals))

    def write(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ts: list[float] = []
        sids: list[int] = []
        values: list[float] = []
        for t, ids, vals in self.scrapes:
            ts.extend([t] * len(ids))
            sids.extend(ids)
            values.extend(vals)
        idx = pa.array(sids, pa.int32())
        table = pa.table(
            {
                "t": pa.array(ts, pa.float64()),
                "name": pa.DictionaryArray.from_arrays(idx, pa.array([k[0] for k in self.keys], pa.string())),
                "labels": pa.DictionaryArray.from_arrays(idx, pa.array([k[1] for k in self.keys], pa.string())),
                "value": pa.array(values, pa.float64()),
            }
        )
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)


class MetricsScraper:
    """Server-metrics sampler for one run; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        *,
        interval_s: float = 1.0,
        now: Callable[[], float],
        engine: str | None = None,
        path: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--scrape-interval must be > 0 seconds, got {interval_s!r}")
        if engine is not None and engine not in ADAPTERS:
            raise ConfigError(f"unknown engine {engine!r} for metrics; known: {', '.join(ADAPTERS)}")
        self.base_url = base_url.rstrip("/")
        self.interval_s = float(interval_s)
        self.engine = engine
        self._now = now
        self._candidates = [path] if path else ([ADAPTERS[engine].metrics_path] if engine else ["/metrics", "/prometheus/metrics"])
        self.path: str | None = path
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self._rows: list[dict[str, float | None]] = []
        self._raw = _RawStore()
        self._poller = Poller(self.interval_s, self._scrape)
        self.bad_lines = 0
        self._last_status: int | None = None

    # -- polling -------------------------------------------------------------

    async def _fetch(self, path: str) -> str | None:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=max(2.0, self.interval_s))
        async with self._session.get(self.base_url + path, headers=self._headers, timeout=timeout) as resp:
            if resp.status != 200:
                self._last_status = resp.status
                return None
            return await resp.text(errors="replace")

    async def _scrape(self) -> None:
        t = float(self._now())
        text = None
        if self.path is not None:
            text = await self._fetch(self.path)
            if text is None:
                raise RuntimeError(f"GET {self.path}: HTTP {self._last_status}")
        else:  # first successful scrape fixes the path
            for cand in self._candidates:
                body = await self._fetch(cand)
                if body is not None and looks_like_exposition(body):
                    self.path, text = cand, body
                    break
            if text is None:
                raise RuntimeError(f"no Prometheus metrics at {', '.join(self._candidates)}")
        exp = parse_exposition(text)
        self.bad_lines += exp.bad_lines
        if self.engine is None:
            self.engine = detect(exp)
        adapter = ADAPTERS.get(self.engine) if self.engine else None
        row: dict[str, float | None] = {"t": t}
        row.update(extract(exp, adapter))
        self._rows.append(row)
        self._raw.add(t, exp)

    async def start(self, session: aiohttp.ClientSession) -> None:
        """Baseline scrape (errors are recorded, not raised), then poll in the background."""
        self._session = session
        await self._poller.start()

    async def stop(self) -> None:
        """Stop polling after one final scrape."""
        await self._poller.stop()

    async def scrape_now(self) -> None:
        """One extra scrape now (e.g. at a phase boundary); errors are counted, not raised."""
        if self._session is None:
            raise RuntimeError("start(session) first")
        await self._poller.tick_now()

    # -- results -------------------------------------------------------------

    def samples(self) -> list[dict[str, float | None]]:
        """One row per successful scrape: ``t`` plus every common signal (``None`` = unavailable)."""
        return [dict(r) for r in self._rows]

    def _reduce(self, rows: list[dict[str, float | None]]) -> dict[str, Any]:
        col = {k: [r.get(k) for r in rows] for k in SIGNALS}
        out: dict[str, Any] = {}
        for g in ("kv_cache_usage", "num_requests_waiting", "num_requests_running"):
            out[f"{g}_mean"] = gauge_mean(col[g])
            out[f"{g}_max"] = gauge_max(col[g])
        deltas = {c: counter_delta(col[c]) for c in COUNTERS}
        out["prefix_cache_hits"] = deltas["prefix_cache_hits"]
        out["prefix_cache_queries"] = deltas["prefix_cache_queries"]
        rate = ratio(deltas["prefix_cache_hits"], deltas["prefix_cache_queries"])
        source = "counters" if rate is not None else None
        if rate is None and deltas["prefix_cache_queries"] is None:
            rate = gauge_mean(col["prefix_cache_hit_rate"])
            source = "gauge" if rate is not None else None
        out["prefix_cache_hit_rate"] = rate
        out["prefix_cache_hit_rate_source"] = source
        out["num_preemptions"] = deltas["num_preemptions"]
        out["prompt_tokens"] = deltas["prompt_tokens"]
        out["generation_tokens"] = deltas["generation_tokens"]
        for h in HISTOGRAMS:
            n = counter_delta(col[f"{h}_count"])
            mean_s = ratio(counter_delta(col[f"{h}_sum"]), n)
            base = h.removesuffix("_seconds")
            out[f"server_{base}_mean_ms"] = None if mean_s is None else mean_s * 1000.0
            out[f"server_{base}_count"] = n
        spec = spec_decode_summary(rows)  # speculative decoding, only when the server exposes it
        if spec is not None:
            out["spec_decode"] = spec
        return out

    def summary(self) -> dict[str, Any]:
        """The run's ``server_metrics`` block (``None`` values are unavailable, never zero)."""
        out: dict[str, Any] = {
            "engine": self.engine,
            "url": self.base_url + (self.path or ""),
            "interval_s": self.interval_s,
            "scrapes": len(self._rows),
            "scrape_errors": self._poller.errors,
            "last_error": self._poller.last_error,
        }
        out.update(self._reduce(self._rows))
        seen = {k for r in self._rows for k, v in r.items() if v is not None and k != "t"}
        out["available"] = [k for k in SIGNALS if k in seen]
        out["unavailable"] = [k for k in SIGNALS if k not in seen]
        return out

    def window(self, start_s: float, end_s: float) -> dict[str, Any]:
        """Same reductions over ``start_s <= t <= end_s``; counter deltas start from the
        last scrape at or before ``start_s`` so consecutive windows add up."""
        before = [r for r in self._rows if r["t"] is not None and r["t"] <= start_s]
        inside = [r for r in self._rows if r["t"] is not None and start_s < r["t"] <= end_s]
        base = before[-1:] if before else []
        out = self._reduce(base + inside)
        # gauges describe the window only
        for g in ("kv_cache_usage", "num_requests_waiting", "num_requests_running"):
            vals = [r.get(g) for r in (inside or base)]
            out[f"{g}_mean"], out[f"{g}_max"] = gauge_mean(vals), gauge_max(vals)
        return out

    def write(self, run_dir: Path) -> list[Path]:
        """Write the time series (and raw samples) into ``run_dir``; returns the files written."""
        run_dir = Path(run_dir)
        if not self._rows:
            return []
        run_dir.mkdir(parents=True, exist_ok=True)
        series = run_dir / SERIES_FILE
        rows_to_parquet(self._rows, ("t",) + SIGNALS, series)
        raw = run_dir / RAW_FILE
        self._raw.write(raw)
        return [series, raw]


__all__ = ["MetricsScraper", "SERIES_FILE", "RAW_FILE", "GAUGES"]
