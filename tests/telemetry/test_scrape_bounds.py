"""Hostile /metrics: a huge body, churning labels, a slow server; scraping runs off the caller's loop."""

import asyncio
import threading
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from infermeter.analysis.verdict import Facts, judge
from infermeter.errors import ConfigError
from infermeter.telemetry.gpu import GpuSampler
from infermeter.telemetry.scraper import MetricsScraper

from .test_gpu import fake_nvml

GAUGES = ('vllm:num_requests_running{engine="0"} 4\n'
          'vllm:num_requests_waiting{engine="0"} 1\n'
          'vllm:kv_cache_usage_perc{engine="0"} 0.5\n')


def junk(n, gen=0, names=1):
    return "".join(f'junk_{i % names}{{id="{i}",gen="{gen}"}} {i}\n' for i in range(n))


def codes(summary_block, interval_s=1.0):
    run = {"server_metrics": {"interval_s": interval_s, "scrape": summary_block}}
    return {f.code for f in judge(Facts(completed=1, run=run)).findings}


def test_huge_metrics_stops_at_the_size_cap_and_keeps_few_series(serve, clock):
    body = GAUGES + junk(60_000, names=50)  # about 2.2 MB

    async def go():
        async with serve({"/metrics": lambda: body}) as srv:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock, max_bytes=1 << 20, max_series=300,
                                max_labelsets=20)
            await sc.start()
            await sc.scrape_now()
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    s = sc.summary()
    cost = s["scrape"]
    assert s["scrapes"] == 3 and s["scrape_errors"] == 0
    assert cost["truncated"] == 3 and cost["bytes_max"] <= 1 << 20 < len(body)
    assert cost["series_kept"] <= 3 + 300  # the engine gauges plus the cap
    assert len(sc._raw.keys) == cost["series_kept"]
    assert cost["series_dropped_max"] > 20_000
    # the engine's gauges came first and are read from every scrape
    assert [r["num_requests_running"] for r in sc.samples()] == [4.0, 4.0, 4.0]
    assert s["engine"] == "vllm"
    assert {"scrape_truncated", "scrape_capped"} <= codes(cost)


def test_churning_labels_do_not_grow_the_store(serve, clock):
    gen = {"n": 0}

    def body():
        gen["n"] += 1
        return junk(500, gen["n"], names=5) + GAUGES

    async def go():
        async with serve({"/metrics": body}) as srv:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock, max_series=200, max_labelsets=30)
            await sc.start()
            sizes = []
            for _ in range(30):
                await sc.scrape_now()
                sizes.append((len(sc._raw.keys), len(sc._raw._text)))
            await sc.stop()
            return sc, sizes

    sc, sizes = asyncio.run(go())
    assert gen["n"] == 32
    kept = sc.summary()["scrape"]["series_kept"]
    assert kept == 3 + 5 * 30  # 30 label sets for each of 5 junk names, plus the 3 engine gauges
    assert sizes[-1] == sizes[0]  # nothing more after the first scrape filled the caps
    assert all(r["kv_cache_usage"] == 0.5 for r in sc.samples())


def test_engine_series_are_kept_even_when_other_series_fill_the_cap(serve, clock):
    body = junk(5_000) + GAUGES  # the engine's lines come last

    async def go():
        async with serve({"/metrics": lambda: body}) as srv:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock, max_series=10, max_labelsets=10)
            await sc.start()
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    assert sc.summary()["engine"] == "vllm"
    assert sc.samples()[0]["num_requests_waiting"] == 1.0
    assert sc.summary()["scrape"]["series_kept"] == 13


def test_body_without_final_newline_and_bad_lines(serve, clock):
    async def go():
        async with serve({"/metrics": lambda: 'a 1\nnot a metric line {\nb{x="1"} 2'}) as srv:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start()
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    assert sorted(sc._raw.keys) == [("a", "{}"), ("b", '{"x":"1"}')]
    assert sc.summary()["scrape"]["bad_lines"] == 2  # once per scrape


@asynccontextmanager
async def slow_server(release):
    async def metrics(_):
        await asyncio.wait_for(release.wait(), timeout=10)
        return web.Response(text=GAUGES)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        release.set()
        await runner.cleanup()


def test_slow_metrics_hits_the_time_cap_and_never_raises(clock):
    async def go():
        release = asyncio.Event()
        async with slow_server(release) as url:
            sc = MetricsScraper(url, interval_s=3600, now=clock, timeout_s=0.2, path="/metrics")
            await sc.start()
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    s = sc.summary()
    assert s["scrapes"] == 0 and s["scrape_errors"] == 2
    assert s["scrape"]["timed_out"] == 2 and "within 0.2 s" in s["last_error"]
    assert "scrape_truncated" in codes(s["scrape"])


def test_scrape_parses_on_its_own_thread_not_the_callers_loop(serve, clock):
    async def go():
        loop_thread = threading.get_ident()
        async with serve({"/metrics": lambda: GAUGES}) as srv:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start()
            await sc.scrape_now()
            await sc.stop()
        return sc, loop_thread

    sc, loop_thread = asyncio.run(go())
    assert len(sc.samples()) == 3
    assert sc.parse_threads and loop_thread not in sc.parse_threads


def test_gpu_sampler_reads_on_its_own_thread(clock):
    readers = set()
    state = [dict(util=50, mem=1, temp=40, power_mw=100_000, sm=1500, energy_mj=1000, reasons=0)]
    nvml = fake_nvml(state)
    temp = nvml.nvmlDeviceGetTemperature

    def spy(h, kind):
        readers.add(threading.get_ident())
        return temp(h, kind)

    nvml.nvmlDeviceGetTemperature = spy

    async def go():
        g = GpuSampler(interval_s=3600, now=clock, nvml=nvml)
        await g.start()
        await g.sample_now()
        await g.stop()
        return g, threading.get_ident()

    g, loop_thread = asyncio.run(go())
    assert len(g.samples()) == 3
    assert readers and loop_thread not in readers


def test_verdict_names_a_heavy_scrape_and_stays_quiet_on_a_light_one():
    light = {"count": 10, "cpu_share": 0.01, "cpu_ms_mean": 1.0, "bytes_max": 2000, "truncated": 0,
             "timed_out": 0, "series_dropped_max": 0}
    assert not {c for c in codes(light) if c.startswith("scrape_")}
    heavy = dict(light, cpu_share=0.2, cpu_ms_mean=200.0, bytes_max=6_500_000)
    found = [f for f in judge(Facts(completed=1, run={"server_metrics": {"interval_s": 1.0, "scrape": heavy}})).findings
             if f.code == "scrape_heavy"]
    assert found and found[0].severity == "warning" and "20% of a core" in found[0].message


def test_bad_caps_name_the_input():
    with pytest.raises(ConfigError, match="scrape-max-mb"):
        MetricsScraper("http://127.0.0.1:1", now=lambda: 0.0, max_bytes=0)


def test_a_scraper_never_stopped_ends_with_the_loop_that_started_it(serve, clock):
    sc_box = {}

    async def go():
        async with serve({"/metrics": lambda: GAUGES}) as srv:
            sc = MetricsScraper(srv.url, interval_s=0.05, now=clock)
            await sc.start()  # and never stop(): the run raised before it
            sc_box["sc"] = sc

    asyncio.run(go())
    thread = sc_box["sc"]._bg._thread
    thread.join(10)  # bounded: the watchdog checks once a second
    assert not thread.is_alive()
