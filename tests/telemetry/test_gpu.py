import asyncio
import sys
from types import SimpleNamespace

import aiohttp
import pyarrow.parquet as pq
import pytest

from infermeter.errors import ConfigError
from infermeter.telemetry.gpu import GPU_FILE, GpuSampler
from infermeter.telemetry.gpu_sources import DcgmSource


class NVMLError(Exception):
    pass


def fake_nvml(state, count=1):
    """A stand-in for the pynvml module; ``state[i]`` holds GPU i's current readings."""

    def need(h, key):
        v = state[h][key]
        if v is None:
            raise NVMLError("Not Supported")
        return v

    return SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=need(h, "util"), memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=need(h, "mem"), total=80 * 2**30, free=0),
        nvmlDeviceGetTemperature=lambda h, kind: need(h, "temp"),
        nvmlDeviceGetPowerUsage=lambda h: need(h, "power_mw"),
        nvmlDeviceGetClockInfo=lambda h, kind: need(h, "sm"),
        nvmlDeviceGetTotalEnergyConsumption=lambda h: need(h, "energy_mj"),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: need(h, "reasons"),
    )


def test_nvml_rows_and_summary(clock, tmp_path):
    gpu0 = {"util": 90, "mem": 40 * 2**30, "temp": 60, "power_mw": 500_000, "sm": 1980,
            "energy_mj": 1_000_000, "reasons": 0x0}
    state = {0: gpu0}

    async def go():
        g = GpuSampler(interval_s=3600, now=clock, nvml=fake_nvml(state))
        await g.start()  # t=0
        clock.t = 1.0
        gpu0.update(temp=80, power_mw=700_000, energy_mj=1_600_000, reasons=0x20 | 0x4)  # thermal + power cap
        await g.sample_now()
        clock.t = 3.0
        gpu0.update(temp=70, power_mw=600_000, energy_mj=2_800_000, reasons=0x1)  # idle: not throttling
        await g.stop()  # t=3
        return g

    g = asyncio.run(go())
    rows = g.samples()
    assert [r["t"] for r in rows] == [0.0, 1.0, 3.0]
    assert rows[1] == {"t": 1.0, "gpu": "0", "name": "NVIDIA H100 80GB HBM3", "utilization_pct": 90.0,
                       "memory_used_bytes": float(40 * 2**30), "temperature_c": 80.0, "power_w": 700.0,
                       "sm_clock_mhz": 1980.0, "clock_event_reasons": 0x24, "energy_j": 1600.0}
    s = g.summary(output_tokens=900)
    assert s["available"] is True and s["source"] == "nvml" and s["gpus"] == 1
    assert s["temperature_c_mean"] == pytest.approx(70.0)
    assert s["temperature_c_max"] == 80.0
    assert s["power_w_max"] == 700.0
    # hold weights: t=0 holds 1 s, t=1 holds 2 s, t=3 gets the mean gap 1.5 s -> total 4.5 s
    assert s["throttled_fraction"] == pytest.approx(2.0 / 4.5)
    assert s["thermal_throttled_fraction"] == pytest.approx(2.0 / 4.5)
    assert s["power_throttled_fraction"] == pytest.approx(2.0 / 4.5)
    assert s["throttle_fraction"]["gpu_idle"] == pytest.approx(1.5 / 4.5)
    assert s["throttle_fraction"]["hw_slowdown"] == 0.0
    assert s["energy_j"] == pytest.approx(1800.0) and s["energy_source"] == "counter"
    assert s["energy_per_output_token_j"] == pytest.approx(2.0)
    g.write(tmp_path)
    table = pq.read_table(tmp_path / GPU_FILE).to_pydict()
    assert table["temperature_c"] == [60.0, 80.0, 70.0]
    assert table["gpu"] == ["0", "0", "0"]
    assert table["clock_event_reasons"] == [0, 0x24, 0x1]


def test_energy_falls_back_to_power_integral_when_counter_unsupported(clock):
    gpu0 = {"util": 50, "mem": 1, "temp": 50, "power_mw": 100_000, "sm": 1000, "energy_mj": None, "reasons": None}

    async def go():
        g = GpuSampler(interval_s=3600, now=clock, nvml=fake_nvml({0: gpu0}))
        await g.start()
        clock.t = 2.0
        gpu0["power_mw"] = 300_000
        await g.stop()
        return g

    s = asyncio.run(go()).summary(output_tokens=40)
    assert s["energy_j"] == pytest.approx(400.0)  # trapezoid: 2 s * (100 + 300) / 2 W
    assert s["energy_source"] == "power_integral"
    assert s["energy_per_output_token_j"] == pytest.approx(10.0)
    assert s["throttled_fraction"] is None  # reasons unsupported: unavailable, not 0


def test_no_driver_reports_reason_and_carries_on(clock, tmp_path):
    broken = SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(NVMLError("Driver Not Loaded")))

    async def go():
        g = GpuSampler(interval_s=0.01, now=clock, nvml=broken)
        await g.start()
        await g.sample_now()
        await g.stop()
        return g

    g = asyncio.run(go())
    s = g.summary(output_tokens=10)
    assert s == {"source": "nvml", "interval_s": 0.01, "available": False,
                 "reason": "no NVIDIA driver/GPU: Driver Not Loaded"}
    assert g.write(tmp_path) == []


def test_missing_nvidia_ml_py_says_how_to_install(clock, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError

    async def go():
        g = GpuSampler(now=clock)
        await g.start()
        await g.stop()
        return g.summary()

    s = asyncio.run(go())
    assert s["available"] is False and "infermeter[gpu]" in s["reason"]


DCGM = '''# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="n1"}} {sm0}
DCGM_FI_DEV_SM_CLOCK{{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="n1"}} 1980
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"}} {t0}
DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"}} 50
DCGM_FI_DEV_MEMORY_TEMP{{gpu="0",UUID="GPU-a"}} 9223372036854775794
DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-a"}} {p0}
DCGM_FI_DEV_POWER_USAGE{{gpu="1",UUID="GPU-b"}} 300.0
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a"}} 97
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-b"}} 9223372036854775794
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-a"}} 72011
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="GPU-a"}} {e0}
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="1",UUID="GPU-b"}} {e1}
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{gpu="0",UUID="GPU-a"}} {r0}
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{gpu="1",UUID="GPU-b"}} 0
DCGM_FI_PROF_DRAM_ACTIVE{{gpu="0",UUID="GPU-a"}} 0.81
'''


def test_dcgm_parse_units_and_sentinels():
    rows = DcgmSource.parse(DCGM.format(sm0=1755, t0=71, p0=612.4, e0=5_000_000, e1=1_000, r0=0x40))
    assert [r["gpu"] for r in rows] == ["0", "1"]
    r0, r1 = rows
    assert r0["memory_used_bytes"] == 72011 * 2**20
    assert r0["energy_j"] == 5000.0
    assert r0["clock_event_reasons"] == 0x40
    assert (r0["temperature_c"], r0["power_w"], r0["sm_clock_mhz"], r0["utilization_pct"]) == (71.0, 612.4, 1755.0, 97.0)
    assert r0["name"] == "NVIDIA H100 80GB HBM3"
    assert r1["utilization_pct"] is None  # the sentinel means "blank", not a huge number
    assert r1["memory_used_bytes"] is None


def test_dcgm_exporter_over_http(serve, clock, tmp_path):
    vals = dict(sm0=1980, t0=60, p0=500.0, e0=1_000_000, e1=2_000_000, r0=0)

    async def go():
        async with serve({"/metrics": lambda: DCGM.format(**vals)}) as srv, aiohttp.ClientSession() as session:
            g = GpuSampler(interval_s=3600, now=clock, dcgm_url=srv.url + "/metrics")
            await g.start(session)
            clock.t = 1.0
            vals.update(sm0=1500, t0=84, e0=1_700_000, e1=2_300_000, r0=0x40)  # HW thermal slowdown on GPU 0
            await g.stop()
            return g

    g = asyncio.run(go())
    s = g.summary(output_tokens=500)
    assert s["source"] == "dcgm" and s["gpus"] == 2 and s["samples"] == 4
    assert s["temperature_c_max"] == 84.0
    assert s["temperature_c_mean"] == pytest.approx((60 + 50 + 84 + 50) / 4)
    # GPU 0 throttled for the second of its two equal holds, GPU 1 never: mean over GPUs 0.25
    assert s["thermal_throttled_fraction"] == pytest.approx(0.25)
    assert s["throttle_fraction"]["hw_thermal"] == pytest.approx(0.25)
    assert s["energy_j"] == pytest.approx(700.0 + 300.0)
    assert s["energy_per_output_token_j"] == pytest.approx(2.0)
    assert s["sm_clock_mhz_min"] == 1500.0
    g.write(tmp_path)
    assert pq.read_table(tmp_path / GPU_FILE).num_rows == 4


def test_dcgm_url_is_validated():
    with pytest.raises(ConfigError, match="gpu-node:9400"):
        GpuSampler(now=lambda: 0.0, dcgm_url="gpu-node:9400/metrics")
