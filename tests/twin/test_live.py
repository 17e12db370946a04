"""The twin as the emulator's backend: token timing in scaled real time, aborts, /metrics over HTTP."""

from __future__ import annotations

import asyncio
import time

import pytest

from infermeter.engines.emulator.live import RequestRejected, TwinBackend
from infermeter.engines.emulator.simple import GenRequest
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime

P = LinearStepTime(base_s=0.01, per_token_s=0.001)
SPEEDUP = 20.0


def _backend(**kw):
    return TwinBackend(fake_twin(predictor=P, num_blocks=kw.pop("blocks", 512), engine=kw.pop("engine", None)),
                       speedup=SPEEDUP, **kw)


async def _collect(backend, req):
    t0 = time.perf_counter()
    chunks = []
    async for k in backend.generate(req):
        chunks.append((time.perf_counter() - t0, k))
    return chunks


def test_tokens_arrive_at_the_simulated_times_scaled_by_speedup():
    async def main():
        b = _backend()
        try:
            return await _collect(b, GenRequest(prompt_tokens=100, max_tokens=6, prompt_text="p" * 400)), b
        finally:
            await b.close()

    chunks, b = asyncio.run(main())
    assert sum(k for _, k in chunks) == 6
    # virtual: prefill 0.110 s, then 5 decode steps of 0.011 s -> 0.165 s; real = virtual / 20
    first, last = chunks[0][0], chunks[-1][0]
    # never early; late only by event-loop delays (loose bound for a busy machine)
    assert 0.110 / SPEEDUP - 0.001 <= first <= 0.110 / SPEEDUP + 0.1  # upper slack: a loaded machine
    assert 0.165 / SPEEDUP - 0.001 <= last <= 0.165 / SPEEDUP + 0.1
    eng = b.engines[0]
    assert eng.generation_tokens_total == 6 and eng.prompt_tokens_total == 100
    m = b.metrics[0]
    assert m.success == 1 and m.ttft.count == 1 and m.itl.count == 5
    # observed in real seconds: the simulated times / speedup (+ the engine's wake-up delay)
    assert 0.110 / SPEEDUP <= m.ttft.sum <= 0.110 / SPEEDUP + 0.1
    assert m.e2e.sum - m.ttft.sum == pytest.approx(0.055 / SPEEDUP, rel=1e-6)


def test_concurrent_requests_share_batches_and_the_cache():
    async def main():
        b = _backend()
        text = "shared prefix " * 40
        try:
            first = await _collect(b, GenRequest(prompt_tokens=140, max_tokens=3, prompt_text=text))
            rest = await asyncio.gather(*[_collect(b, GenRequest(prompt_tokens=140, max_tokens=3, prompt_text=text))
                                          for _ in range(4)])
            return b, first, rest
        finally:
            await b.close()

    b, first, rest = asyncio.run(main())
    assert all(sum(k for _, k in c) == 3 for c in [first, *rest])
    eng = b.engines[0]
    assert eng.prefix_hits == 4 * 128  # 8 full blocks of the repeated prompt, for each later request
    assert eng.idle and eng.pool.num_free == eng.pool.num_blocks


def test_abandoned_streams_are_aborted_and_counted():
    async def main():
        b = _backend()
        try:
            gen = b.generate(GenRequest(prompt_tokens=50, max_tokens=500, prompt_text="x" * 200))
            assert await gen.__anext__() >= 1
            await gen.aclose()  # the client went away
            await asyncio.sleep(0.05)
            return b
        finally:
            await b.close()

    b = asyncio.run(main())
    assert b.engines[0].idle and b.metrics[0].aborted == 1
    assert b.engines[0].pool.num_free == 512


def test_requests_that_cannot_fit_are_rejected():
    async def main():
        b = _backend(blocks=8, engine=EngineConfig(max_num_seqs=4, max_num_batched_tokens=64))
        try:
            async for _ in b.generate(GenRequest(prompt_tokens=100, max_tokens=100, prompt_text="y")):
                pass
        finally:
            await b.close()

    with pytest.raises(RequestRejected, match="max_model_len"):
        asyncio.run(main())


def test_metrics_endpoint_parses_and_follows_the_run():
    parser = pytest.importorskip("prometheus_client.parser")
    aiohttp = pytest.importorskip("aiohttp")
    from infermeter.engines.emulator.server import make_app, serve

    async def main():
        b = TwinBackend(fake_twin(predictor=P, num_blocks=512), speedup=5.0, model_name="twin-test")
        async with serve(make_app(b)) as url, aiohttp.ClientSession() as s:
            body = {"model": "twin-test", "prompt": "word " * 80, "max_tokens": 40, "stream": True}

            async def one():
                async with s.post(url + "/v1/completions", json=body) as r:
                    assert r.status == 200
                    return await r.read()

            tasks = [asyncio.create_task(one()) for _ in range(3)]
            mid = ""
            for _ in range(200):  # scrape until all three are running (bounded)
                async with s.get(url + "/metrics") as r:
                    mid = await r.text()
                if 'vllm:num_requests_running{engine="0",model_name="twin-test"} 3.0' in mid:
                    break
                await asyncio.sleep(0.002)
            await asyncio.gather(*tasks)
            async with s.get(url + "/metrics") as r:
                end = await r.text()
        await b.close()
        return mid, end

    mid, end = asyncio.run(main())

    def values(text):
        out = {}
        for fam in parser.text_string_to_metric_families(text):
            for smp in fam.samples:
                if smp.labels.get("model_name") == "twin-test" and "le" not in smp.labels:
                    out[smp.name] = out.get(smp.name, 0.0) + smp.value
        return out

    v_mid, v_end = values(mid), values(end)
    assert v_mid["vllm:num_requests_running"] == 3
    assert v_mid["vllm:generation_tokens_total"] < 120
    assert v_end["vllm:num_requests_running"] == 0 and v_end["vllm:num_requests_waiting"] == 0
    assert v_end["vllm:generation_tokens_total"] == 120
    assert v_end["vllm:prompt_tokens_total"] == 3 * 100  # the server's own count: 400 characters / 4
    assert v_end["vllm:time_to_first_token_seconds_count"] == 3
    assert v_end["vllm:e2e_request_latency_seconds_count"] == 3
    assert v_end["vllm:inter_token_latency_seconds_count"] == 3 * 39


def test_twin_backend_from_flags():
    from infermeter.engines.emulator.app import twin_backend
    from infermeter.errors import ConfigError

    b = twin_backend("llama-3.1-8b", "h100-sxm", max_num_seqs=64, speedup=2.0)
    d = b.describe()
    assert d["max_num_seqs"] == 64 and d["speedup"] == 2.0 and d["hardware"] == "h100-sxm"
    assert b.model_name == "meta-llama/Llama-3.1-8B-Instruct"
    with pytest.raises(ConfigError, match="--speedup"):
        twin_backend(speedup=0)
    with pytest.raises(ConfigError, match="--max-num-seqs"):
        twin_backend(max_num_seqs=0)
