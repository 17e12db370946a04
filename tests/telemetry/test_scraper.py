import asyncio
import json

import aiohttp
import pyarrow.parquet as pq
import pytest

from infermeter.errors import ConfigError
from infermeter.telemetry.scraper import RAW_FILE, SERIES_FILE, MetricsScraper


class FakeVllm:
    """vLLM-format /metrics whose values the test changes between scrapes."""

    def __init__(self):
        self.running = 0.0
        self.waiting = 0.0
        self.kv = 0.0
        self.queries = 0.0
        self.hits = 0.0
        self.preemptions = 0.0
        self.ttft_sum = 0.0
        self.ttft_count = 0.0
        self.with_kv = True

    def text(self):
        lab = '{engine="0",model_name="smollm2"}'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lab} {self.running}",
            f"vllm:num_requests_waiting{lab} {self.waiting}",
            f"vllm:prefix_cache_queries_total{lab} {self.queries}",
            f"vllm:prefix_cache_hits_total{lab} {self.hits}",
            f"vllm:num_preemptions_total{lab} {self.preemptions}",
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="smollm2"}} {self.ttft_count}',
            f"vllm:time_to_first_token_seconds_sum{lab} {self.ttft_sum}",
            f"vllm:time_to_first_token_seconds_count{lab} {self.ttft_count}",
            'python_info{implementation="CPython"} 1.0',
        ]
        if self.with_kv:
            lines.append(f"vllm:kv_cache_usage_perc{lab} {self.kv}")
        return "\n".join(lines) + "\n"


async def _scenario(serve, clock, tmp_path):
    fake = FakeVllm()
    fake.queries, fake.hits, fake.preemptions = 100.0, 10.0, 1.0  # history before the run
    async with serve({"/metrics": fake.text}) as srv, aiohttp.ClientSession() as session:
        sc = MetricsScraper(srv.url, interval_s=3600, now=clock, headers={"Authorization": "Bearer s3cret"})
        await sc.start(session)  # baseline at t=0
        clock.t = 1.0
        fake.running, fake.waiting, fake.kv = 4.0, 2.0, 0.5
        fake.queries, fake.hits = 400.0, 160.0
        fake.ttft_sum, fake.ttft_count = 0.6, 4.0
        await sc.scrape_now()
        clock.t = 2.0
        fake.running, fake.waiting, fake.kv = 2.0, 0.0, 0.25
        fake.queries, fake.hits, fake.preemptions = 500.0, 210.0, 3.0
        fake.ttft_sum, fake.ttft_count = 1.0, 8.0
        await sc.stop()  # final scrape at t=2
        return sc, srv


def test_scraper_rows_and_summary_from_changing_metrics(serve, clock, tmp_path):
    sc, srv = asyncio.run(_scenario(serve, clock, tmp_path))
    rows = sc.samples()
    assert [r["t"] for r in rows] == [0.0, 1.0, 2.0]
    assert [r["kv_cache_usage"] for r in rows] == [0.0, 0.5, 0.25]
    assert [r["num_requests_running"] for r in rows] == [0.0, 4.0, 2.0]
    s = sc.summary()
    assert s["engine"] == "vllm"
    assert s["url"] == srv.url + "/metrics"
    assert s["scrapes"] == 3 and s["scrape_errors"] == 0
    assert s["kv_cache_usage_mean"] == pytest.approx(0.25)  # (0 + 0.5 + 0.25) / 3
    assert s["kv_cache_usage_max"] == 0.5
    assert s["num_requests_waiting_max"] == 2.0
    assert s["num_requests_running_max"] == 4.0
    # deltas over the run: hits 210-10=200, queries 500-100=400
    assert s["prefix_cache_hits"] == 200.0 and s["prefix_cache_queries"] == 400.0
    assert s["prefix_cache_hit_rate"] == 0.5
    assert s["prefix_cache_hit_rate_source"] == "counters"
    assert s["num_preemptions"] == 2.0
    assert s["server_ttft_mean_ms"] == pytest.approx(125.0)  # 1.0 s / 8 requests
    assert s["server_ttft_count"] == 8.0
    assert s["server_e2e_mean_ms"] is None  # not exposed by this server: unavailable, not 0
    assert "kv_cache_usage" in s["available"] and "e2e_seconds_count" in s["unavailable"]
    # the secret header was sent but is stored nowhere
    assert srv.headers[0]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in json.dumps(s)


def test_window_counters_add_up_and_gauges_are_local(serve, clock, tmp_path):
    sc, _ = asyncio.run(_scenario(serve, clock, tmp_path))
    w1, w2 = sc.window(0.0, 1.0), sc.window(1.0, 2.0)
    assert (w1["prefix_cache_hits"], w1["prefix_cache_queries"]) == (150.0, 300.0)
    assert (w2["prefix_cache_hits"], w2["prefix_cache_queries"]) == (50.0, 100.0)
    assert w1["kv_cache_usage_max"] == 0.5 and w2["kv_cache_usage_max"] == 0.25
    assert w2["num_preemptions"] == 2.0 and w1["num_preemptions"] == 0.0


def test_write_series_and_raw_files(serve, clock, tmp_path):
    sc, _ = asyncio.run(_scenario(serve, clock, tmp_path))
    written = sc.write(tmp_path)
    assert [p.name for p in written] == [SERIES_FILE, RAW_FILE]
    series = pq.read_table(tmp_path / SERIES_FILE).to_pydict()
    assert series["t"] == [0.0, 1.0, 2.0]
    assert series["kv_cache_usage"] == [0.0, 0.5, 0.25]
    assert series["e2e_seconds_count"] == [None, None, None]
    raw = pq.read_table(tmp_path / RAW_FILE).to_pylist()
    assert len(raw) == 3 * 10  # every sample (10 lines) of every scrape
    info = [r for r in raw if r["name"] == "python_info"]
    assert [r["t"] for r in info] == [0.0, 1.0, 2.0]
    assert json.loads(info[0]["labels"]) == {"implementation": "CPython"}
    hits = [r["value"] for r in raw if r["name"] == "vllm:prefix_cache_hits_total"]
    assert hits == [10.0, 160.0, 210.0]


def test_missing_metric_is_unavailable_never_zero(serve, clock):
    async def go():
        fake = FakeVllm()
        fake.with_kv = False
        async with serve({"/metrics": fake.text}) as srv, aiohttp.ClientSession() as session:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start(session)
            await sc.stop()
            return sc.summary()

    s = asyncio.run(go())
    assert s["kv_cache_usage_mean"] is None and s["kv_cache_usage_max"] is None
    assert "kv_cache_usage" in s["unavailable"]
    assert s["prefix_cache_hit_rate"] is None  # Δqueries == 0: no rate, not 0


def test_autodetects_trtllm_path_when_metrics_is_json(serve, clock):
    text = "trtllm_num_requests_running 2\ntrtllm_kv_cache_utilization 0.4\n"

    async def go():
        routes = {"/metrics": lambda: '[{"iterationCounter": 1}]', "/prometheus/metrics": lambda: text}
        async with serve(routes) as srv, aiohttp.ClientSession() as session:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start(session)
            await sc.stop()
            return sc, srv

    sc, srv = asyncio.run(go())
    s = sc.summary()
    assert s["engine"] == "trtllm" and s["url"].endswith("/prometheus/metrics")
    assert s["kv_cache_usage_max"] == 0.4
    assert srv.hits["/prometheus/metrics"] == 2  # the path is fixed after the first success


def test_server_without_metrics_never_raises(serve, clock, tmp_path):
    async def go():
        async with serve({"/v1/models": lambda: "{}"}) as srv, aiohttp.ClientSession() as session:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start(session)
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    s = sc.summary()
    assert s["scrapes"] == 0 and s["scrape_errors"] == 2
    assert "no Prometheus metrics" in s["last_error"]
    assert s["engine"] is None and s["available"] == []
    assert sc.write(tmp_path) == []


def test_unknown_server_is_scraped_raw_only(serve, clock, tmp_path):
    async def go():
        async with serve({"/metrics": lambda: "my_app_queue 3\n"}) as srv, aiohttp.ClientSession() as session:
            sc = MetricsScraper(srv.url, interval_s=3600, now=clock)
            await sc.start(session)
            await sc.stop()
            return sc

    sc = asyncio.run(go())
    assert sc.summary()["engine"] is None
    sc.write(tmp_path)
    raw = pq.read_table(tmp_path / RAW_FILE).to_pylist()
    assert [(r["name"], r["value"]) for r in raw] == [("my_app_queue", 3.0), ("my_app_queue", 3.0)]


def test_background_polling_takes_samples(serve):
    async def go():
        fake = FakeVllm()
        async with serve({"/metrics": fake.text}) as srv, aiohttp.ClientSession() as session:
            sc = MetricsScraper(srv.url, interval_s=0.02, now=lambda: 0.0)
            await sc.start(session)
            for _ in range(250):  # bounded: at most 5 s
                if len(sc.samples()) >= 4:
                    break
                await asyncio.sleep(0.02)
            await sc.stop()
            return len(sc.samples())

    assert asyncio.run(go()) >= 5  # >= 4 polled + the final scrape


def test_bad_settings_name_the_input():
    with pytest.raises(ConfigError, match="scrape-interval"):
        MetricsScraper("http://127.0.0.1:1", interval_s=0, now=lambda: 0.0)
    with pytest.raises(ConfigError, match="'vllm2'"):
        MetricsScraper("http://127.0.0.1:1", engine="vllm2", now=lambda: 0.0)
