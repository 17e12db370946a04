"""The twin's Prometheus ``/metrics``: vLLM V1's names, types, labels and histogram buckets.

Any tool that reads vLLM reads the twin. One series per engine (label ``engine``, as
vLLM V1 does for data-parallel engine cores; sum over it for server totals), label
``model_name`` on every series::

    m = EngineMetrics()                       # one per engine
    m.ttft.observe(0.042)                     # seconds
    text = render_metrics("meta-llama/Llama-3.1-8B-Instruct", [(engine, m)])
    # vllm:num_requests_running{engine="0",model_name="meta-llama/..."} 3.0
    # vllm:time_to_first_token_seconds_bucket{engine="0",le="0.05",model_name="..."} 1.0

Exposed (text format 0.0.4, counters with ``_total`` in their TYPE line as
``prometheus_client`` writes them):

- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc`` (a fraction 0-1: used blocks / all blocks; cached
  blocks no request holds count as free), ``vllm:cache_config_info`` (= 1, config as
  labels);
- counters ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (tokens),
  ``vllm:num_preemptions_total``, ``vllm:request_success_total{finished_reason}``;
- histograms ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``,
  ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``,
  ``vllm:iteration_tokens_total``, with vLLM's default buckets;
- with speculative decoding (``emulate --speculative``; as vLLM V1 with a speculative config):
  counters ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}``.

Counters and gauges are read from the engine at render time; histograms are fed by
the caller (the live backend observes in the time base its clients see).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from infermeter.twin.engine import Engine

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def tokens_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 series up to ``max_model_len`` (request_prompt/generation_tokens)."""
    out: list[int] = []
    mantissa, exp = (1, 2, 5), 1
    while True:
        for m in mantissa:
            v = m * exp
            if v > max_model_len:
                return tuple(out)
            out.append(v)
        exp *= 10


class Histogram:
    """Cumulative-bucket histogram (what a Prometheus histogram exposes)."""

    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * len(self.bounds)  # per bucket (not cumulative)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        i = bisect.bisect_left(self.bounds, value)
        if i < len(self.counts):
            self.counts[i] += n
        self.count += n
        self.sum += value * n

    def cumulative(self) -> list[int]:
        out, acc = [], 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


class EngineMetrics:
    """The histograms one engine exposes (counters and gauges come from the Engine itself)."""

    def __init__(self, max_model_len: int = 131072) -> None:
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.prompt_tokens = Histogram(tokens_buckets(max_model_len))
        self.generation_tokens = Histogram(tokens_buckets(max_model_len))
        self.iteration_tokens = Histogram(ITERATION_BUCKETS)
        self.success = 0  # requests finished (finished_reason="length": the twin always runs to max_tokens)
        self.aborted = 0


_HELP = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
    "vllm:prompt_tokens_total": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens_total": ("counter", "Number of generation tokens processed."),
    "vllm:prefix_cache_queries_total": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
    "vllm:prefix_cache_hits_total": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
    "vllm:num_preemptions_total": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:request_success_total": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
    "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
    "vllm:request_prompt_tokens": ("histogram", "Number of prefill tokens processed."),
    "vllm:request_generation_tokens": ("histogram", "Number of generation tokens processed."),
    "vllm:iteration_tokens_total": ("histogram", "Histogram of number of tokens per engine_step."),
    "vllm:spec_decode_num_drafts_total": ("counter", "Number of spec decoding drafts."),
    "vllm:spec_decode_num_draft_tokens_total": ("counter", "Number of draft tokens."),
    "vllm:spec_decode_num_accepted_tokens_total": ("counter", "Number of accepted tokens."),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": ("counter", "Accepted tokens per draft position."),
}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(pairs.items())) + "}"


def _num(v: float) -> str:
    return repr(float(v))


def _le(b: float) -> str:
    return repr(float(b))


def render_metrics(model_name: str, engines: Sequence[tuple[Engine, EngineMetrics]],
                   cache_info: dict[str, str] | None = None) -> str:
    """Prometheus text exposition of every engine (see the module docstring)."""
    out: list[str] = []
    base = [({"engine": str(i), "model_name": model_name}, e, m) for i, (e, m) in enumerate(engines)]

    def head(name: str) -> None:
        kind, text = _HELP[name]
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")

    def series(name: str, value_of: Callable[[Engine, EngineMetrics], float]) -> None:
        head(name)
        for lab, e, m in base:
            out.append(f"{name}{_labels(lab)} {_num(value_of(e, m))}")

    series("vllm:num_requests_running", lambda e, m: len(e.running))
    series("vllm:num_requests_waiting", lambda e, m: len(e.waiting))
    series("vllm:kv_cache_usage_perc", lambda e, m: e.pool.usage)
    head("vllm:cache_config_info")
    for lab, e, _ in base:
        info = {**lab, "block_size": str(e.block_size), "num_gpu_blocks": str(e.pool.num_blocks),
                "enable_prefix_caching": str(e.config.enable_prefix_caching), **(cache_info or {})}
        out.append(f"vllm:cache_config_info{_labels(info)} 1.0")
    series("vllm:prompt_tokens_total", lambda e, m: e.prompt_tokens_total)
    series("vllm:generation_tokens_total", lambda e, m: e.generation_tokens_total)
    series("vllm:prefix_cache_queries_total", lambda e, m: e.prefix_queries)
    series("vllm:prefix_cache_hits_total", lambda e, m: e.prefix_hits)
    series("vllm:num_preemptions_total", lambda e, m: e.num_preemptions)
    head("vllm:request_success_total")
    for lab, _, m in base:
        out.append(f"vllm:request_success_total{_labels({**lab, 'finished_reason': 'length'})} {_num(m.success)}")
        out.append(f"vllm:request_success_total{_labels({**lab, 'finished_reason': 'abort'})} {_num(m.aborted)}")
    if any(e.spec is not None for _, e, _ in base):
        spec = [(lab, e) for lab, e, _ in base if e.spec is not None]
        for name, attr in (("vllm:spec_decode_num_drafts_total", "spec_drafts"),
                           ("vllm:spec_decode_num_draft_tokens_total", "spec_draft_tokens"),
                           ("vllm:spec_decode_num_accepted_tokens_total", "spec_accepted")):
            head(name)
            for lab, e in spec:
                out.append(f"{name}{_labels(lab)} {_num(getattr(e, attr))}")
        head("vllm:spec_decode_num_accepted_tokens_per_pos_total")
        for lab, e in spec:
            for pos, n in enumerate(e.spec_accepted_per_pos):
                out.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total"
                           f"{_labels({**lab, 'position': str(pos)})} {_num(n)}")
    for name, attr in (("vllm:time_to_first_token_seconds", "ttft"), ("vllm:inter_token_latency_seconds", "itl"),
                       ("vllm:e2e_request_latency_seconds", "e2e"), ("vllm:request_queue_time_seconds", "queue"),
                       ("vllm:request_prompt_tokens", "prompt_tokens"),
                       ("vllm:request_generation_tokens", "generation_tokens"),
                       ("vllm:iteration_tokens_total", "iteration_tokens")):
        head(name)
        for lab, _, m in base:
            h: Histogram = getattr(m, attr)
            for b, c in zip(h.bounds, h.cumulative()):
                out.append(f"{name}_bucket{_labels({**lab, 'le': _le(b)})} {_num(c)}")
            out.append(f"{name}_bucket{_labels({**lab, 'le': '+Inf'})} {_num(h.count)}")
            out.append(f"{name}_count{_labels(lab)} {_num(h.count)}")
            out.append(f"{name}_sum{_labels(lab)} {_num(h.sum)}")
    return "\n".join(out) + "\n"
