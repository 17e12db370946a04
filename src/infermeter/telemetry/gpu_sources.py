"""Where GPU readings come from: local NVML (``nvidia-ml-py``) or a remote DCGM exporter.

Promise: both sources return, per read, one dict per GPU with the same keys
(:data:`FIELDS`) in fixed units — utilization %, memory used in bytes,
temperature °C, power W, SM clock MHz, the clock-event (throttle) bitmask,
cumulative energy in J — and ``None`` for anything the GPU or exporter does
not provide. Opening a source that cannot work raises :class:`GpuUnavailable`
with the reason ("nvidia-ml-py is not installed", "no NVIDIA driver", ...).

    src = NvmlSource()            # lazy ``import pynvml``; pass a module to fake it in tests
    src.open()                    # GpuUnavailable when there is no GPU
    rows = src.read()             # [{"gpu": "0", "name": "...", "temperature_c": 41.0, ...}]

    dcgm = DcgmSource("http://gpu-node:9400/metrics")
    rows = dcgm.parse(text)       # from the exporter's exposition text

Bits of the clock-event mask are named in :data:`CLOCK_EVENT_BITS` (the
NVML ``nvmlClocksEventReason*`` / DCGM ``DCGM_CLOCKS_EVENT_REASON_*`` values).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from infermeter.telemetry.exposition import parse_exposition

FIELDS = (
    "utilization_pct",
    "memory_used_bytes",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "clock_event_reasons",
    "energy_j",
)

CLOCK_EVENT_BITS = {
    "gpu_idle": 0x1,
    "clocks_setting": 0x2,
    "power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
#: Reasons that cut performance (idle, app-clock settings, sync boost and display clocks do not).
THROTTLE_REASONS = ("power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
THERMAL_REASONS = ("sw_thermal", "hw_thermal")
POWER_REASONS = ("power_cap", "hw_power_brake")

_SENTINEL = 9.0e18  # DCGM writes "blank"/unsupported int fields as huge sentinels


class GpuUnavailable(Exception):
    """No GPU telemetry here; the message says why."""


class NvmlSource:
    """Local GPUs through NVML. ``nvml`` is the ``pynvml`` module (imported lazily when ``None``)."""

    kind = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None, devices: list[int] | None = None) -> None:
        self._nvml = nvml
        self._devices = devices
        self._handles: list[tuple[int, Any, str | None]] = []

    def open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise GpuUnavailable("nvidia-ml-py is not installed (pip install 'infermeter[gpu]')") from exc
            self._nvml = pynvml
        n = self._nvml
        try:
            n.nvmlInit()
            count = int(n.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses, OSError for a missing libnvidia-ml
            raise GpuUnavailable(f"no NVIDIA driver/GPU: {exc}") from exc
        if count == 0:
            raise GpuUnavailable("no GPU: NVML reports 0 devices")
        indices = self._devices if self._devices is not None else list(range(count))
        for i in indices:
            if not 0 <= i < count:
                raise GpuUnavailable(f"GPU index {i} out of range (this host has {count})")
            h = n.nvmlDeviceGetHandleByIndex(i)
            name = self._try(lambda: n.nvmlDeviceGetName(h))
            if isinstance(name, bytes):
                name = name.decode()
            self._handles.append((i, h, name))

    def close(self) -> None:
        if self._nvml is not None and self._handles:
            self._try(self._nvml.nvmlShutdown)
        self._handles = []

    @staticmethod
    def _try(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - unsupported on this GPU/MIG/vGPU: unavailable
            return None

    def _reasons(self, h: Any) -> int | None:
        n = self._nvml
        for fname in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn: Callable[[Any], Any] | None = getattr(n, fname, None)
            if fn is None:
                continue
            try:
                return int(fn(h))
            except Exception:  # noqa: BLE001 - unsupported here: try the older name
                continue
        return None

    def read(self) -> list[dict[str, Any]]:
        n = self._nvml
        assert n is not None, "open() first"
        rows = []
        for i, h, name in self._handles:
            util = self._try(lambda: n.nvmlDeviceGetUtilizationRates(h))
            mem = self._try(lambda: n.nvmlDeviceGetMemoryInfo(h))
            temp = self._try(lambda: n.nvmlDeviceGetTemperature(h, getattr(n, "NVML_TEMPERATURE_GPU", 0)))
            power_mw = self._try(lambda: n.nvmlDeviceGetPowerUsage(h))
            sm = self._try(lambda: n.nvmlDeviceGetClockInfo(h, getattr(n, "NVML_CLOCK_SM", 1)))
            energy_mj = self._try(lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
            rows.append(
                {
                    "gpu": str(i),
                    "name": name,
                    "utilization_pct": None if util is None else float(util.gpu),
                    "memory_used_bytes": None if mem is None else float(mem.used),
                    "temperature_c": None if temp is None else float(temp),
                    "power_w": None if power_mw is None else power_mw / 1000.0,
                    "sm_clock_mhz": None if sm is None else float(sm),
                    "clock_event_reasons": self._reasons(h),
                    "energy_j": None if energy_mj is None else energy_mj / 1000.0,
                }
            )
        return rows


# DCGM field -> (our field, scale)
_DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", 1024.0 * 1024.0),  # MiB
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", 1.0),  # deprecated alias
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),  # mJ
}


class DcgmSource:
    """A DCGM exporter's ``/metrics`` (default port 9400); GPUs keyed by the ``gpu`` label."""

    kind = "dcgm"

    def __init__(self, url: str) -> None:
        if not url.startswith(("http://", "https://")):
            raise GpuUnavailable(f"DCGM exporter URL must start with http:// or https://, got {url!r}")
        self.url = url

    @staticmethod
    def parse(text: str) -> list[dict[str, Any]]:
        by_gpu: dict[str, dict[str, Any]] = {}
        for s in parse_exposition(text).samples:
            field = _DCGM_FIELDS.get(s.name)
            if field is None:
                continue
            key = s.labels.get("gpu", s.labels.get("UUID", "0"))
            row = by_gpu.setdefault(key, dict.fromkeys(FIELDS) | {"gpu": key, "name": s.labels.get("modelName")})
            if s.value != s.value or abs(s.value) >= _SENTINEL:
                continue
            name, scale = field
            row[name] = int(s.value) if name == "clock_event_reasons" else s.value * scale
        return sorted(by_gpu.values(), key=lambda r: r["gpu"].zfill(8))
