"""``simulate`` and the emulated server (measured by ``run``'s pipeline) agree on the same workload.

Same model and hardware, same workload and Poisson schedule (same seed); the live run
goes ``SPEEDUP`` times faster, so its times are scaled back before comparing.
Stated tolerance: request and token throughput within 5 %, mean TPOT and E2E within
10 %, mean TTFT within 25 % or 25 ms (the client and HTTP stack add real
milliseconds, which the speedup multiplies: typically +7 to +14 ms); prefix-cache hit rates within 0.05.
"""

from __future__ import annotations

import asyncio

import pytest

from infermeter.engines.emulator.live import TwinBackend
from infermeter.measure import Measurement, RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.twin.spec import TwinSpec

SPEEDUP = 4.0
RATE = 8.0  # virtual requests/s
N = 48
WORKLOAD = {"input_tokens": "256", "output_tokens": "48", "prefix_tokens": 128, "prefix_groups": 2}


def test_emulate_and_simulate_agree(tmp_path):
    from infermeter.engines.emulator.server import make_app, serve
    from infermeter.workload import load_tokenizer

    sim = SimPlan(RunConfig(model="llama-3.1-8b", rate=RATE, requests=N, seed=3, out=str(tmp_path / "sim"),
                            **WORKLOAD), TwinSpec(model="llama-3.1-8b", gpu="h100-sxm"))
    s_sim = sim.run().summary

    async def live():
        backend = TwinBackend(sim.twin, speedup=SPEEDUP, chars_per_block=sim.chars_per_block)
        app = make_app(backend, count_tokens=load_tokenizer(None).count)
        async with serve(app) as url:
            cfg = RunConfig(url=url, rate=RATE * SPEEDUP, requests=N, seed=3, out=str(tmp_path / "emu"),
                            scrape_interval_s=0.25, **WORKLOAD)
            result = await Measurement(cfg).run()
        await backend.close()
        return result.summary, backend.max_lag_s

    s_emu, lag_s = asyncio.run(live())
    assert s_emu["completed"] == s_sim["completed"] == N
    assert s_emu["request_throughput"] / SPEEDUP == pytest.approx(s_sim["request_throughput"], rel=0.05)
    assert s_emu["output_token_throughput"] / SPEEDUP == pytest.approx(s_sim["output_token_throughput"], rel=0.05)
    # On a loaded machine the emulator's loop can fall behind (it then delivers tokens late, and says by how much
    # at worst: max_lag_s). A request's E2E grows by at most that lag and its TPOT by at most the lag over its
    # token gaps, so that allowance (scaled back to virtual time) is added to the stated 10 %.
    out_tokens = int(WORKLOAD["output_tokens"])
    allowance = {"tpot_ms": lag_s * 1000 * SPEEDUP / (out_tokens - 1), "e2e_ms": lag_s * 1000 * SPEEDUP}
    for key in ("tpot_ms", "e2e_ms"):
        emu, sim_mean = s_emu[key]["mean"] * SPEEDUP, s_sim[key]["mean"]
        assert abs(emu - sim_mean) <= 0.10 * sim_mean + allowance[key], (key, emu, sim_mean, lag_s)
    ttft_sim, ttft_emu = s_sim["ttft_ms"]["mean"], s_emu["ttft_ms"]["mean"] * SPEEDUP
    assert abs(ttft_emu - ttft_sim) <= max(0.25 * ttft_sim, 25.0) + lag_s * 1000 * SPEEDUP
    hit_sim = s_sim["server_metrics"]["prefix_cache_hit_rate"]
    hit_emu = s_emu["server_metrics"]["prefix_cache_hit_rate"]  # scraped from the twin's /metrics
    assert hit_sim > 0.3
    assert hit_emu == pytest.approx(hit_sim, abs=0.05)
