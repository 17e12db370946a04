"""/metrics text: parses with prometheus_client, vLLM names/types/buckets, values from the engine."""

from __future__ import annotations

import pytest

from infermeter.engines.emulator.metrics import (
    ITL_BUCKETS,
    LATENCY_BUCKETS,
    TTFT_BUCKETS,
    EngineMetrics,
    Histogram,
    render_metrics,
    tokens_buckets,
)
from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import SimRequest

parser = pytest.importorskip("prometheus_client.parser")

MODEL = 'meta-llama/Llama-3.1-8B-Instruct "quoted"'


def _families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def _busy_engine():
    eng = Engine(LinearStepTime(), EngineConfig(max_num_seqs=2), 100)
    for i in range(3):
        eng.add(SimRequest(rid=i, arrival=0.0, prompt_tokens=40, max_tokens=5, keys=[7, 8]))
    d = eng.schedule(0.0)
    eng.complete(d)
    eng.schedule(d)
    return eng


def test_names_and_types_are_vllms():
    eng, m = _busy_engine(), EngineMetrics(2048)
    fam = _families(render_metrics(MODEL, [(eng, m)]))
    kinds = {name: f.type for name, f in fam.items()}
    assert kinds["vllm:num_requests_running"] == "gauge"
    assert kinds["vllm:num_requests_waiting"] == "gauge"
    assert kinds["vllm:kv_cache_usage_perc"] == "gauge"
    for c in ("prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "prompt_tokens",
              "generation_tokens", "request_success"):
        assert kinds[f"vllm:{c}"] == "counter", c  # the parser drops _total from counter families
    for h in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
              "request_queue_time_seconds", "request_prompt_tokens", "request_generation_tokens"):
        assert kinds[f"vllm:{h}"] == "histogram", h


def test_values_follow_the_engine():
    eng, m = _busy_engine(), EngineMetrics(2048)
    fam = _families(render_metrics(MODEL, [(eng, m)]))

    def value(name, sample=None):
        (s,) = [s for s in fam[name].samples if s.name == (sample or name)]
        assert s.labels["model_name"] == MODEL and s.labels["engine"] == "0"
        return s.value

    assert value("vllm:num_requests_running") == 2 == len(eng.running)
    assert value("vllm:num_requests_waiting") == 1
    assert value("vllm:kv_cache_usage_perc") == pytest.approx(eng.pool.usage)
    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == 80
    assert value("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total") == 80
    assert value("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == 0  # both in the same batch
    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == eng.generation_tokens_total == 2


def test_histograms_have_vllm_buckets_and_cumulative_counts():
    eng, m = _busy_engine(), EngineMetrics(2048)
    for v in (0.003, 0.03, 0.03, 7.0, 9999.0):
        m.ttft.observe(v)
    fam = _families(render_metrics(MODEL, [(eng, m)]))
    buckets = [(s.labels["le"], s.value) for s in fam["vllm:time_to_first_token_seconds"].samples
               if s.name.endswith("_bucket")]
    assert [float(le) for le, _ in buckets[:-1]] == list(TTFT_BUCKETS)
    assert buckets[-1] == ("+Inf", 5.0)
    counts = dict(buckets)
    assert counts["0.005"] == 1 and counts["0.04"] == 3 and counts["7.5"] == 4 and counts["2560.0"] == 4
    (total,) = [s.value for s in fam["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_sum")]
    assert total == pytest.approx(0.003 + 0.06 + 7.0 + 9999.0)
    assert len(ITL_BUCKETS) == 19 and len(LATENCY_BUCKETS) == 21 and len(TTFT_BUCKETS) == 22


def test_one_series_per_engine():
    e1, e2 = _busy_engine(), Engine(LinearStepTime(), EngineConfig(), 10)
    fam = _families(render_metrics("m", [(e1, EngineMetrics()), (e2, EngineMetrics())]))
    running = {s.labels["engine"]: s.value for s in fam["vllm:num_requests_running"].samples}
    assert running == {"0": 2.0, "1": 0.0}


def test_token_buckets_are_the_1_2_5_series():
    assert tokens_buckets(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def test_histogram_edges_are_inclusive():
    h = Histogram((1.0, 2.0))
    for v in (1.0, 1.5, 2.0, 3.0):
        h.observe(v)
    assert h.cumulative() == [1, 3] and h.count == 4
