"""Poll an inference server's Prometheus endpoint during a run and summarize it.

Promise: :class:`MetricsScraper` scrapes ``base_url + path`` once at
``start()`` (the baseline), every ``interval_s`` after, and once at
``stop()``. Each scrape becomes one row ``{"t": now(), signal: value, ...}``
of the common signals from :mod:`infermeter.telemetry.adapters` (``None`` =
unavailable), and the raw series are kept too (bounded, below). ``summary()``
gives the run's ``server_metrics`` block; ``window(start_s, end_s)`` the same
over a time window; ``write(run_dir)`` stores ``server_metrics.parquet`` (one
row per scrape) and ``server_metrics_raw.parquet`` (long form: t, name,
labels, value).

    scraper = MetricsScraper("http://127.0.0.1:8000", now=run_clock)
    await scraper.start()          # baseline scrape, then background polling
    ...                            # the load
    await scraper.stop()           # final scrape
    result["server_metrics"] = scraper.summary()
    scraper.write(run_dir)

Scraping never runs on the caller's event loop: the fetch and the parse run on
the scraper's own thread, event loop and HTTP session
(:class:`~infermeter.telemetry._offloop.BackgroundLoop`), so a huge or slow
``/metrics`` cannot stall the load. Each scrape is bounded: it stops reading
past ``max_bytes`` (8 MiB; the scrape is *truncated*, the lines read are
kept), gives up after ``timeout_s`` (the scrape is dropped), and the body is
parsed as it streams in. Series are bounded across the run: the names the
adapters read (:func:`~infermeter.telemetry.adapters.used_names`) are always
kept, up to ``max_labelsets`` label sets each; other series only while fewer
than ``max_series`` are held, also ``max_labelsets`` per name. A series
seen before costs one dict lookup; one beyond the caps is dropped unparsed and
counted, so labels that change every scrape cannot grow memory. The
scraper's own cost (wall and CPU time on its thread, bytes, drops,
truncations) is in ``summary()["scrape"]``; the run's verdict reads it
(``analysis.verdict``: ``scrape_heavy``, ``scrape_truncated``, ``scrape_capped``).

The engine is detected from metric names unless given; the path defaults to
the engine's (``/metrics``; ``/prometheus/metrics`` for TensorRT-LLM) and,
when neither is given, ``/metrics`` is tried before ``/prometheus/metrics``.
A server without metrics leaves every signal unavailable; scraping never
raises into the run. ``headers`` (e.g. auth) are sent but never stored.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable
from itertools import compress, repeat
from operator import is_not, itemgetter, not_
from pathlib import Path
from typing import Any

import aiohttp

from infermeter.errors import ConfigError
from infermeter.telemetry._offloop import BackgroundLoop
from infermeter.telemetry._poller import Poller
from infermeter.telemetry._series import counter_delta, gauge_max, gauge_mean, ratio, rows_to_parquet
from infermeter.telemetry.adapters import (
    ADAPTERS,
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    SIGNALS,
    detect,
    extract,
    used_names,
)
from infermeter.telemetry.exposition import (
    Exposition,
    Sample,
    looks_like_exposition,
    parse_line,
    parse_value,
    split_series,
)
from infermeter.telemetry.spec_decode import spec_decode_summary

SERIES_FILE = "server_metrics.parquet"
RAW_FILE = "server_metrics_raw.parquet"
MAX_BYTES = 8 << 20  # per scrape
MAX_SERIES = 2000  # distinct series outside the adapters' names, over the run
MAX_LABELSETS = 100  # distinct label sets per metric name, over the run
_CHUNK = 1 << 16  # bytes read, then parsed, at a time (about 1,000 lines: well under a millisecond of CPU)
_YIELD_S = 0.0005  # pause after each chunk, with the GIL released
_USED = used_names()


class _Scrape:
    """One scrape being read: the kept samples, in order."""

    __slots__ = ("ids", "vals", "samples", "dropped", "bad_lines")

    def __init__(self) -> None:
        self.ids: array[int] = array("l")
        self.vals: array[float] = array("d")
        self.samples: list[Sample] = []
        self.dropped = 0
        self.bad_lines = 0


class _RawStore:
    """Raw samples, compactly and bounded: series keys interned to ids, values in arrays per scrape.

    ``_text`` maps a series' exposed text (``name{labels}``) to its id, so a series seen before is
    never parsed again; a new one is parsed and admitted only within the caps (module docstring)."""

    def __init__(self, max_series: int = MAX_SERIES, max_labelsets: int = MAX_LABELSETS) -> None:
        self.max_series = max_series
        self.max_labelsets = max_labelsets
        self.keys: list[tuple[str, str]] = []  # (name, labels as sorted JSON)
        self._labels: list[dict[str, str]] = []
        self._ids: dict[tuple[str, str], int] = {}
        self._text: dict[str, int] = {}
        self._per_name: dict[str, int] = {}
        self._other = 0  # kept series outside the adapters' names
        self.scrapes: list[tuple[float, array[int], array[float]]] = []

    def _admit(self, line: str, name: str, series: str) -> int | None:
        """The id of a series not seen as ``series`` before, or ``None`` when a cap drops it."""
        used = name in _USED
        if self._per_name.get(name, 0) >= self.max_labelsets or (not used and self._other >= self.max_series):
            return None  # dropped without parsing
        sample = parse_line(line)  # ValueError: a bad line
        if sample is None:
            return None
        key = (sample.name, json.dumps(sample.labels, sort_keys=True, separators=(",", ":")))
        sid = self._ids.get(key)
        if sid is None:
            sid = self._ids[key] = len(self.keys)
            self.keys.append(key)
            self._labels.append(sample.labels)
            self._per_name[sample.name] = self._per_name.get(sample.name, 0) + 1
            if not used:
                self._other += 1
        if len(self._text) < 2 * (self.max_series + self.max_labelsets * len(_USED)):
            self._text[series] = sid
        return sid

    def _full(self, name: str) -> bool:
        """No new series of ``name`` can be kept."""
        return self._per_name.get(name, 0) >= self.max_labelsets or (
            name not in _USED and self._other >= self.max_series)

    def _keep(self, sc: _Scrape, sid: int, value: float) -> None:
        sc.ids.append(sid)
        sc.vals.append(value)
        name = self.keys[sid][0]
        if name in _USED or len(sc.samples) < 1000:  # the rest is enough to detect the engine by prefix
            sc.samples.append(Sample(name, self._labels[sid], value))

    def feed(self, lines: list[str], sc: _Scrape) -> None:
        """Add a block of complete lines to the scrape ``sc``.

        In bulk first (C-level maps over the block): a line ``series value`` whose series is known
        costs a lookup; lines of names that cannot take a new series are counted as dropped by name.
        Only the rest (new series within the caps, odd spacing, timestamps) is read line by line."""
        parts = list(map(str.rpartition, lines, repeat(" ")))
        sids = list(map(self._text.get, map(itemgetter(0), parts)))
        hit = list(map(is_not, sids, repeat(None)))
        for sid, part in zip(compress(sids, hit), compress(parts, hit)):
            assert sid is not None
            try:
                value = parse_value(part[2])
            except ValueError:
                sc.bad_lines += 1
                continue
            self._keep(sc, sid, value)
        miss = list(compress(lines, map(not_, hit)))
        if not miss:
            return
        names = Counter(map(itemgetter(0), map(str.partition, miss, repeat("{"))))
        slow, full = False, 0
        for name, count in names.items():
            head = name.split(None, 1)[0] if name.strip() else ""
            if not head or head[0] == "#":
                continue
            if head == name and self._full(name):
                full += count
            else:
                slow = True
        if slow:  # counts its own drops
            self._feed_lines(miss, sc)
        else:
            sc.dropped += full

    def _feed_lines(self, lines: list[str], sc: _Scrape) -> None:
        """Line by line: blank and comment lines skipped, names that are full dropped unparsed."""
        text_ids = self._text
        for raw in lines:
            line = raw.strip()
            if not line or line[0] == "#":
                continue
            try:
                series, rest = split_series(line)
                sid = text_ids.get(series)
                if sid is None:
                    name = series.partition("{")[0]
                    sid = self._admit(line, name, series)
                    if sid is None:
                        sc.dropped += 1
                        continue
                value = parse_value(rest)
            except (ValueError, IndexError):
                sc.bad_lines += 1
                continue
            self._keep(sc, sid, value)

    def add(self, t: float, sc: _Scrape) -> None:
        self.scrapes.append((t, sc.ids, sc.vals))

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


class _Cost:
    """What scraping itself cost, over every attempt (bounded: sums and maxima only)."""

    def __init__(self) -> None:
        self.count = 0
        self.wall_s = self.wall_max_s = 0.0
        self.cpu_s = self.cpu_max_s = 0.0
        self.bytes = self.bytes_max = 0
        self.dropped_max = 0
        self.truncated = 0
        self.timed_out = 0
        self.first: float | None = None
        self.last: float | None = None

    def add(self, start: float, wall: float, cpu: float, nbytes: int, dropped: int, truncated: bool) -> None:
        self.count += 1
        self.wall_s += wall
        self.wall_max_s = max(self.wall_max_s, wall)
        self.cpu_s += cpu
        self.cpu_max_s = max(self.cpu_max_s, cpu)
        self.bytes += nbytes
        self.bytes_max = max(self.bytes_max, nbytes)
        self.dropped_max = max(self.dropped_max, dropped)
        self.truncated += bool(truncated)
        self.first = start if self.first is None else self.first
        self.last = start + wall


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
        max_bytes: int = MAX_BYTES,
        timeout_s: float | None = None,
        max_series: int = MAX_SERIES,
        max_labelsets: int = MAX_LABELSETS,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--scrape-interval must be > 0 seconds, got {interval_s!r}")
        if engine is not None and engine not in ADAPTERS:
            raise ConfigError(f"unknown engine {engine!r} for metrics; known: {', '.join(ADAPTERS)}")
        if not max_bytes > 0:
            raise ConfigError(f"--scrape-max-mb must be > 0, got {max_bytes / 2**20!r} MB")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(f"scrape timeout must be > 0 seconds, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.interval_s = float(interval_s)
        self.engine = engine
        self._now = now
        self._candidates = [path] if path else ([ADAPTERS[engine].metrics_path] if engine else ["/metrics", "/prometheus/metrics"])
        self.path: str | None = path
        self._headers = dict(headers or {})
        self.max_bytes = int(max_bytes)
        self.timeout_s = float(timeout_s) if timeout_s is not None else min(30.0, max(2.0, self.interval_s))
        self._session: aiohttp.ClientSession | None = None
        self._rows: list[dict[str, float | None]] = []
        self._raw = _RawStore(max_series, max_labelsets)
        self._bg = BackgroundLoop("infermeter-scrape")
        self._poller = Poller(self.interval_s, self._scrape)
        self._cost = _Cost()
        self.bad_lines = 0
        self.parse_threads: set[int] = set()  # threads the parse ran on (never the caller's loop)
        self._last_status: int | None = None

    # -- polling (on the scraper's own thread and loop) ----------------------

    async def _read(self, path: str, sc: _Scrape, check: bool) -> tuple[bool, int, bool]:
        """Stream ``path`` into ``sc``: (is metrics, bytes read, truncated at ``max_bytes``).

        With ``check`` the first lines must look like Prometheus text, else nothing is kept."""
        assert self._session is not None
        async with self._session.get(self.base_url + path, headers=self._headers) as resp:
            if resp.status != 200:
                self._last_status = resp.status
                return False, 0, False
            n, carry, truncated = 0, b"", False
            async for chunk in resp.content.iter_chunked(_CHUNK):
                if n + len(chunk) > self.max_bytes:
                    chunk, truncated = chunk[: self.max_bytes - n], True
                n += len(chunk)
                block, _, carry = (carry + chunk).rpartition(b"\n")
                if block:
                    lines = block.decode("utf-8", "replace").split("\n")
                    if check:
                        if not looks_like_exposition("\n".join(lines[:200])):
                            return False, n, False
                        check = False
                    self.parse_threads.add(threading.get_ident())
                    self._raw.feed(lines, sc)
                    # let the load's thread take the interpreter lock now, not after its 5 ms switch interval
                    await asyncio.sleep(_YIELD_S)
                if truncated:
                    resp.close()  # drop the connection: the rest of the body is never read
                    return True, n, True  # the cut line in ``carry`` is dropped
            if carry:
                tail = carry.decode("utf-8", "replace")
                if check and not looks_like_exposition(tail):
                    return False, n, False
                self.parse_threads.add(threading.get_ident())
                self._raw.feed([tail], sc)
            elif check:
                return False, n, False
            return True, n, False

    async def _fetch_parse(self) -> tuple[_Scrape, int, bool]:
        if self._session is None:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        if self.path is not None:
            sc = _Scrape()
            ok, n, cut = await self._read(self.path, sc, check=False)
            if not ok:
                raise RuntimeError(f"GET {self.path}: HTTP {self._last_status}")
            return sc, n, cut
        for cand in self._candidates:  # the first successful scrape fixes the path
            sc = _Scrape()
            ok, n, cut = await self._read(cand, sc, check=True)
            if ok:
                self.path = cand
                return sc, n, cut
        raise RuntimeError(f"no Prometheus metrics at {', '.join(self._candidates)}")

    async def _scrape(self) -> None:
        t = float(self._now())
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        nbytes, dropped, cut = 0, 0, False
        try:
            try:
                sc, nbytes, cut = await asyncio.wait_for(self._fetch_parse(), self.timeout_s)
            except asyncio.TimeoutError:
                self._cost.timed_out += 1
                raise RuntimeError(f"GET {self.path or self._candidates[0]}: no complete answer within "
                                   f"{self.timeout_s:g} s (scrape dropped)") from None
            dropped = sc.dropped
            self.bad_lines += sc.bad_lines
            exp = Exposition(samples=sc.samples, bad_lines=sc.bad_lines)
            if self.engine is None:
                self.engine = detect(exp)
            adapter = ADAPTERS.get(self.engine) if self.engine else None
            row: dict[str, float | None] = {"t": t}
            row.update(extract(exp, adapter))
            self._rows.append(row)
            self._raw.add(t, sc)
        finally:
            self._cost.add(wall0, time.perf_counter() - wall0, time.thread_time() - cpu0, nbytes, dropped, cut)

    async def _close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def start(self, session: aiohttp.ClientSession | None = None) -> None:
        """Baseline scrape (errors are recorded, not raised), then poll in the background, all on the
        scraper's own thread. ``session`` is accepted for compatibility and not used: the scraper
        has its own, so it never shares the load's loop or connection pool."""
        self._bg.start()
        await self._bg.call(self._poller.start())

    async def stop(self) -> None:
        """Stop polling after one final scrape; the scraper's thread ends."""
        if self._bg.thread_id is None:
            return
        try:
            await self._bg.call(self._poller.stop())
            await self._bg.call(self._close_session())
        finally:
            self._bg.close()

    async def scrape_now(self) -> None:
        """One extra scrape now (e.g. at a phase boundary); errors are counted, not raised."""
        if self._bg.thread_id is None:
            raise RuntimeError("start() first")
        await self._bg.call(self._poller.tick_now())

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
        out["scrape"] = self.cost()
        out.update(self._reduce(self._rows))
        seen = {k for r in self._rows for k, v in r.items() if v is not None and k != "t"}
        out["available"] = [k for k in SIGNALS if k in seen]
        out["unavailable"] = [k for k in SIGNALS if k not in seen]
        return out

    def cost(self) -> dict[str, Any]:
        """What scraping cost and what it left out: the ``scrape`` block of ``summary()``.

        ``cpu_share``: CPU seconds on the scraper's thread over the wall time from the first scrape's
        start to the last one's end (at least one interval): the part of a core scraping took from
        the interpreter the load runs in."""
        c = self._cost
        span = max(self.interval_s, (c.last or 0.0) - (c.first or 0.0))
        n = max(1, c.count)
        return {
            "count": c.count,
            "thread": "own thread, event loop and HTTP session",
            "duration_ms_mean": c.wall_s / n * 1000.0 if c.count else None,
            "duration_ms_max": c.wall_max_s * 1000.0 if c.count else None,
            "cpu_ms_mean": c.cpu_s / n * 1000.0 if c.count else None,
            "cpu_ms_max": c.cpu_max_s * 1000.0 if c.count else None,
            "cpu_share": c.cpu_s / span if c.count else None,
            "bytes_total": c.bytes,
            "bytes_max": c.bytes_max,
            "max_bytes": self.max_bytes,
            "timeout_s": self.timeout_s,
            "truncated": c.truncated,
            "timed_out": c.timed_out,
            "series_kept": len(self._raw.keys),
            "series_dropped_max": c.dropped_max,
            "max_series": self._raw.max_series,
            "max_labelsets": self._raw.max_labelsets,
            "bad_lines": self.bad_lines,
        }

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
