from infermeter.telemetry.adapters import ADAPTERS, SIGNALS, detect, extract
from infermeter.telemetry.exposition import parse_exposition

VLLM_V1 = '''
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 5000.0
vllm:generation_tokens_total{engine="0",model_name="m"} 7000.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 10.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 30.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 990.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 19.8
'''

# 0.10-era: both the new and deprecated names, same values: never added together
VLLM_BOTH = '''
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 4.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.4
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.4
'''

# pre-0.9 (V0): old names only, and a hit-rate gauge instead of counters
VLLM_V0 = '''
vllm:num_requests_running{model_name="m"} 5.0
vllm:num_requests_waiting{model_name="m"} 1.0
vllm:num_requests_swapped{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.3
vllm:num_preemptions_total{model_name="m"} 4.0
vllm:time_per_output_token_seconds_count{model_name="m"} 8.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.2
'''

SGLANG = '''
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 162.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 162.0
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 2826.0
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 2826.0
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.28
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0"} 0.28
sglang:cache_hit_rate{model_name="m",tp_rank="0"} 0.0075
sglang:prompt_tokens_total{model_name="m"} 8.128902e+06
sglang:cached_tokens_total{model_name="m"} 2.0e+06
sglang:generation_tokens_total{model_name="m"} 1.0e+06
sglang:num_retracted_requests_total{model_name="m",tp_rank="0"} 3.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 20.0
sglang:time_to_first_token_seconds_count{model_name="m"} 40.0
sglang:time_per_output_token_seconds_sum{model_name="m"} 1.0
sglang:time_per_output_token_seconds_count{model_name="m"} 100.0
'''

TGI = '''
# TYPE tgi_queue_size gauge
tgi_queue_size 4
tgi_batch_current_size 32
tgi_batch_current_max_tokens 4096
tgi_batch_max_total_tokens 16384
tgi_request_success 1503
tgi_request_input_length_sum 120000
tgi_request_input_length_count 1503
tgi_request_generated_tokens_sum 90000
tgi_request_duration_sum 3006.0
tgi_request_duration_count 1503
tgi_request_queue_duration_bucket{le="0.00015"} 0
tgi_request_queue_duration_sum 12.7
tgi_request_queue_duration_count 1503
'''

LLAMACPP = '''
llamacpp:prompt_tokens_total 33065
llamacpp:prompt_seconds_total 235.743
llamacpp:tokens_predicted_total 7801
llamacpp:requests_processing 4
llamacpp:requests_deferred 2
'''

LLAMACPP_OLD = LLAMACPP + "llamacpp:kv_cache_usage_ratio 0.125\n"

TRTLLM = '''
trtllm_num_requests_running{model_name="m"} 6
trtllm_num_requests_waiting{model_name="m"} 1
trtllm_kv_cache_utilization{model_name="m"} 0.6
trtllm_kv_cache_hit_rate{model_name="m"} 0.2
trtllm_kv_cache_reused_blocks_total{model_name="m"} 30
trtllm_kv_cache_missed_blocks_total{model_name="m"} 70
trtllm_prompt_tokens_total{model_name="m"} 900
trtllm_generation_tokens_total{model_name="m"} 1200
trtllm_time_to_first_token_seconds_sum{model_name="m"} 2.0
trtllm_time_to_first_token_seconds_count{model_name="m"} 8
'''

TRITON = '''
nv_trt_llm_request_metrics{model="ensemble",request_type="active",version="1"} 7
nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="ensemble",request_type="max",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="ensemble",version="1"} 25
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="ensemble",version="1"} 100
nv_inference_request_success{model="ensemble",version="1"} 50
'''


def run(text, engine=None):
    exp = parse_exposition(text)
    name = engine or detect(exp)
    return name, extract(exp, ADAPTERS.get(name) if name else None)


def test_vllm_current_names_sum_over_engines():
    name, v = run(VLLM_V1)
    assert name == "vllm"
    assert v["num_requests_running"] == 4.0
    assert v["num_requests_waiting"] == 2.0
    assert v["kv_cache_usage"] == 0.25
    assert (v["prefix_cache_hits"], v["prefix_cache_queries"]) == (400.0, 1000.0)
    assert v["num_preemptions"] == 2.0
    assert (v["prompt_tokens"], v["generation_tokens"]) == (5000.0, 7000.0)
    assert (v["ttft_seconds_sum"], v["ttft_seconds_count"]) == (1.5, 10.0)
    assert (v["e2e_seconds_sum"], v["e2e_seconds_count"]) == (30.0, 10.0)
    assert (v["itl_seconds_sum"], v["itl_seconds_count"]) == (19.8, 990.0)
    assert v["prefix_cache_hit_rate"] is None  # V1 exposes counters, not the V0 gauge
    assert v["queue_time_seconds_count"] is None


def test_vllm_new_and_deprecated_names_are_not_added():
    _, v = run(VLLM_BOTH)
    assert v["kv_cache_usage"] == 0.5
    assert (v["itl_seconds_sum"], v["itl_seconds_count"]) == (0.4, 4.0)


def test_vllm_pre_09_names():
    name, v = run(VLLM_V0)
    assert name == "vllm"
    assert v["kv_cache_usage"] == 0.75
    assert v["prefix_cache_hit_rate"] == 0.3
    assert v["prefix_cache_hits"] is None and v["prefix_cache_queries"] is None
    assert v["num_preemptions"] == 4.0
    assert (v["itl_seconds_sum"], v["itl_seconds_count"]) == (0.2, 8.0)


def test_sglang_takes_rank_zero_for_scheduler_gauges():
    name, v = run(SGLANG)
    assert name == "sglang"
    assert v["num_requests_running"] == 162.0
    assert v["num_requests_waiting"] == 2826.0
    assert v["kv_cache_usage"] == 0.28
    assert v["prefix_cache_hits"] == 2.0e6
    assert v["prefix_cache_queries"] == 8.128902e6
    assert v["num_preemptions"] == 3.0
    assert (v["ttft_seconds_sum"], v["ttft_seconds_count"]) == (20.0, 40.0)
    assert (v["itl_seconds_sum"], v["itl_seconds_count"]) == (1.0, 100.0)  # old ITL name


def test_tgi_kv_proxy_and_missing_signals():
    name, v = run(TGI)
    assert name == "tgi"
    assert v["num_requests_running"] == 32.0
    assert v["num_requests_waiting"] == 4.0
    assert v["kv_cache_usage"] == 4096 / 16384
    assert v["prompt_tokens"] == 120000.0
    assert v["generation_tokens"] == 90000.0
    assert (v["e2e_seconds_sum"], v["e2e_seconds_count"]) == (3006.0, 1503.0)
    assert (v["queue_time_seconds_sum"], v["queue_time_seconds_count"]) == (12.7, 1503.0)
    for missing in ("prefix_cache_hits", "num_preemptions", "ttft_seconds_count"):
        assert v[missing] is None


def test_llamacpp_current_build_has_no_kv_usage():
    name, v = run(LLAMACPP)
    assert name == "llamacpp"
    assert (v["num_requests_running"], v["num_requests_waiting"]) == (4.0, 2.0)
    assert v["kv_cache_usage"] is None
    assert v["prompt_tokens"] == 33065.0 and v["generation_tokens"] == 7801.0
    assert v["prefix_cache_queries"] is None  # needs the cached counter too
    assert run(LLAMACPP_OLD)[1]["kv_cache_usage"] == 0.125


def test_trtllm():
    name, v = run(TRTLLM)
    assert name == "trtllm"
    assert ADAPTERS["trtllm"].metrics_path == "/prometheus/metrics"
    assert (v["num_requests_running"], v["num_requests_waiting"], v["kv_cache_usage"]) == (6.0, 1.0, 0.6)
    assert (v["prefix_cache_hits"], v["prefix_cache_queries"]) == (30.0, 100.0)
    assert v["prefix_cache_hit_rate"] == 0.2
    assert (v["ttft_seconds_sum"], v["ttft_seconds_count"]) == (2.0, 8.0)


def test_triton_trtllm_backend_uses_label_selected_series():
    name, v = run(TRITON)
    assert name == "triton"
    assert (v["num_requests_running"], v["num_requests_waiting"]) == (7.0, 3.0)
    assert v["kv_cache_usage"] == 0.25  # used / max when the fraction series is absent


def test_unknown_server_has_every_signal_unavailable():
    name, v = run("http_requests_total 5\nprocess_cpu_seconds_total 1.5\n")
    assert name is None
    assert set(v) == set(SIGNALS)
    assert all(x is None for x in v.values())
