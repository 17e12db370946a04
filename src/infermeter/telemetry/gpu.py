"""Sample GPU telemetry on the run's timeline and summarize it (temperature, throttling, energy).

Promise: :class:`GpuSampler` reads every GPU once at ``start()``, every
``interval_s`` after and once at ``stop()``, from local NVML (default) or a
remote DCGM exporter (``dcgm_url``). Rows are ``{"t", "gpu", "name",
utilization_pct, memory_used_bytes, temperature_c, power_w, sm_clock_mhz,
clock_event_reasons, energy_j}`` (``None`` = not provided). Without a GPU,
driver or ``nvidia-ml-py`` the sampler says so in ``summary()``
(``{"available": False, "reason": ...}``) and the run carries on.
``write(run_dir)`` stores ``gpu.parquet``. Sampling runs on the sampler's own
thread, event loop and (for DCGM) HTTP session, never on the caller's loop; a
DCGM body is read up to 8 MiB.

    gpu = GpuSampler(now=run_clock)                        # or dcgm_url="http://node:9400/metrics"
    await gpu.start()
    ...
    await gpu.stop()
    summary["gpu"] = gpu.summary(output_tokens=total_output_tokens)
    gpu.write(run_dir)

Summary: mean/max temperature, mean utilization and power, max memory, the
fraction of time each clock-event reason was active (each sample's state
holds until the next sample), ``throttled_fraction`` (any reason in
:data:`~infermeter.telemetry.gpu_sources.THROTTLE_REASONS`), energy over the
run (Δ of the energy counter; the integral of power where the counter is
missing) and energy per output token.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from infermeter.errors import ConfigError
from infermeter.telemetry._offloop import BackgroundLoop
from infermeter.telemetry._poller import Poller
from infermeter.telemetry._series import counter_delta, gauge_max, gauge_mean, hold_weights, rows_to_parquet
from infermeter.telemetry.gpu_sources import (
    CLOCK_EVENT_BITS,
    FIELDS,
    POWER_REASONS,
    THERMAL_REASONS,
    THROTTLE_REASONS,
    DcgmSource,
    GpuUnavailable,
    NvmlSource,
)

GPU_FILE = "gpu.parquet"
DCGM_MAX_BYTES = 8 << 20


def _energy_j(rows: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """Energy of one GPU's rows: counter delta, else trapezoid of power over time."""
    delta = counter_delta([r.get("energy_j") for r in rows])
    if delta is not None:
        return delta, "counter"
    pts = [(r["t"], r["power_w"]) for r in rows if r.get("power_w") is not None]
    if len(pts) < 2:
        return None, None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:])), "power_integral"


def _fractions(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """Time-weighted fraction of each clock-event reason (and any throttle) over one GPU's rows."""
    pts = [(r["t"], int(r["clock_event_reasons"])) for r in rows if r.get("clock_event_reasons") is not None]
    if not pts:
        return None
    weights = hold_weights([t for t, _ in pts])
    total = sum(weights) or 1.0

    def frac(names: tuple[str, ...]) -> float:
        mask = 0
        for n in names:
            mask |= CLOCK_EVENT_BITS[n]
        return sum(w for w, (_, bits) in zip(weights, pts) if bits & mask) / total

    out = {name: frac((name,)) for name in CLOCK_EVENT_BITS}
    out["throttled"] = frac(THROTTLE_REASONS)
    out["thermal"] = frac(THERMAL_REASONS)
    out["power"] = frac(POWER_REASONS)
    return out


def summarize_gpu_rows(rows: list[dict[str, Any]], output_tokens: int | None = None) -> dict[str, Any]:
    """The ``gpu`` summary block for sampled rows (all GPUs together; see module docstring)."""
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_gpu.setdefault(str(r["gpu"]), []).append(r)
    col = {f: [r.get(f) for r in rows] for f in FIELDS}
    out: dict[str, Any] = {
        "gpus": len(by_gpu),
        "names": sorted({str(r["name"]) for r in rows if r.get("name")}),
        "samples": len(rows),
        "temperature_c_mean": gauge_mean(col["temperature_c"]),
        "temperature_c_max": gauge_max(col["temperature_c"]),
        "utilization_pct_mean": gauge_mean(col["utilization_pct"]),
        "power_w_mean": gauge_mean(col["power_w"]),
        "power_w_max": gauge_max(col["power_w"]),
        "memory_used_bytes_max": gauge_max(col["memory_used_bytes"]),
        "sm_clock_mhz_mean": gauge_mean(col["sm_clock_mhz"]),
        "sm_clock_mhz_min": None if not any(v is not None for v in col["sm_clock_mhz"]) else min(
            v for v in col["sm_clock_mhz"] if v is not None),
    }
    # throttling: mean over GPUs of each GPU's time fraction
    per = [f for f in (_fractions(g) for g in by_gpu.values()) if f is not None]
    if per:
        keys = list(per[0])
        fr = {k: sum(p[k] for p in per) / len(per) for k in keys}
        out["throttle_fraction"] = {k: fr[k] for k in CLOCK_EVENT_BITS}
        out["throttled_fraction"] = fr["throttled"]
        out["thermal_throttled_fraction"] = fr["thermal"]
        out["power_throttled_fraction"] = fr["power"]
    else:
        out["throttle_fraction"] = None
        out["throttled_fraction"] = out["thermal_throttled_fraction"] = out["power_throttled_fraction"] = None
    energies = [_energy_j(g) for g in by_gpu.values()]
    if energies and all(e is not None for e, _ in energies):
        out["energy_j"] = sum(e for e, _ in energies if e is not None)
        sources = {s for _, s in energies}
        out["energy_source"] = sources.pop() if len(sources) == 1 else "mixed"
    else:
        out["energy_j"], out["energy_source"] = None, None
    out["output_tokens"] = output_tokens
    ok = out["energy_j"] is not None and output_tokens
    out["energy_per_output_token_j"] = out["energy_j"] / output_tokens if ok else None
    return out


class GpuSampler:
    """GPU telemetry for one run; see the module docstring."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        now: Callable[[], float],
        dcgm_url: str | None = None,
        devices: list[int] | None = None,
        nvml: Any | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--gpu-interval must be > 0 seconds, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self._now = now
        self._source: NvmlSource | DcgmSource
        if dcgm_url:
            try:
                self._source = DcgmSource(dcgm_url)
            except GpuUnavailable as exc:
                raise ConfigError(str(exc)) from None
        else:
            self._source = NvmlSource(nvml, devices)
        self.unavailable: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._rows: list[dict[str, Any]] = []
        self._poller = Poller(self.interval_s, self._sample)
        self._bg = BackgroundLoop("infermeter-gpu")

    @property
    def source(self) -> str:
        return self._source.kind

    async def _read(self) -> list[dict[str, Any]]:
        if isinstance(self._source, DcgmSource):
            if self._session is None:
                self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
            timeout = aiohttp.ClientTimeout(total=max(2.0, self.interval_s))
            async with self._session.get(self._source.url, timeout=timeout) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"GET {self._source.url} -> HTTP {resp.status}")
                chunks: list[bytes] = []
                n = 0
                async for chunk in resp.content.iter_chunked(1 << 16):
                    chunks.append(chunk)
                    n += len(chunk)
                    if n > DCGM_MAX_BYTES:  # a runaway body: keep the whole lines of the first 8 MiB
                        text = b"".join(chunks)[:DCGM_MAX_BYTES].decode("utf-8", "replace")
                        return DcgmSource.parse(text.rpartition("\n")[0])
                return DcgmSource.parse(b"".join(chunks).decode("utf-8", "replace"))
        return self._source.read()  # on the sampler's own thread

    async def _sample(self) -> None:
        t = float(self._now())
        for row in await self._read():
            self._rows.append({"t": t, **row})

    async def _open_and_start(self) -> None:
        if isinstance(self._source, NvmlSource):
            try:
                self._source.open()
            except GpuUnavailable as exc:
                self.unavailable = str(exc)
                return
        await self._poller.start()

    async def _stop_and_close(self) -> None:
        await self._poller.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if isinstance(self._source, NvmlSource):
            self._source.close()

    async def start(self, session: aiohttp.ClientSession | None = None) -> None:
        """Open the source (no GPU: note why and do nothing more), then sample in the background, on the
        sampler's own thread (``session`` is accepted for compatibility, not used: DCGM gets its own)."""
        self._bg.start()
        await self._bg.call(self._open_and_start())
        if self.unavailable is not None:
            self._bg.close()

    async def sample_now(self) -> None:
        """One extra sample now (errors counted, not raised); no-op without a GPU."""
        if self.unavailable is None and self._poller.running and self._bg.thread_id is not None:
            await self._bg.call(self._poller.tick_now())

    async def stop(self) -> None:
        if self._bg.thread_id is None:
            return
        try:
            await self._bg.call(self._stop_and_close())
        finally:
            self._bg.close()

    def samples(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows]

    def summary(self, output_tokens: int | None = None) -> dict[str, Any]:
        """The run's ``gpu`` block; ``{"available": False, "reason": ...}`` without GPU data."""
        base: dict[str, Any] = {"source": self.source, "interval_s": self.interval_s}
        if self.unavailable or not self._rows:
            reason = self.unavailable or self._poller.last_error or "no GPU samples were taken"
            return {**base, "available": False, "reason": reason}
        out = {**base, "available": True, "sample_errors": self._poller.errors}
        out.update(summarize_gpu_rows(self._rows, output_tokens))
        return out

    def write(self, run_dir: Path) -> list[Path]:
        if not self._rows:
            return []
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / GPU_FILE
        types = {"gpu": "string", "name": "string", "clock_event_reasons": "int64"}
        rows_to_parquet(self._rows, ("t", "gpu", "name") + FIELDS, path, types)
        return [path]
