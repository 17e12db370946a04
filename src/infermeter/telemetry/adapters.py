"""Map each engine's metric names onto infermeter's common server signals.

Promise: for a parsed ``/metrics`` body, :func:`extract` returns one value per
common signal (see :data:`GAUGES`, :data:`COUNTERS`, :data:`HISTOGRAMS`) using
the engine's :class:`Adapter`; a signal the server does not expose is ``None``
(unavailable), never ``0``. Each signal has an ordered alias list — current
name first, older names after — and the first alias present wins, so an old
and a new name are never added together. :func:`detect` names the engine from
metric prefixes (``vllm:``, ``sglang:``, ``tgi_``, ``llamacpp:``, ``trtllm_``,
``nv_trt_llm_``); an unknown server gets ``None`` and is scraped raw only.

    >>> from infermeter.telemetry.exposition import parse_exposition
    >>> exp = parse_exposition('vllm:kv_cache_usage_perc{engine="0"} 0.25\\n')
    >>> detect(exp), extract(exp, ADAPTERS["vllm"])["kv_cache_usage"]
    ('vllm', 0.25)

Aggregation: vLLM series are summed over ``engine`` (data-parallel engines);
SGLang scheduler gauges take ``tp_rank``/``pp_rank`` 0 (every rank repeats the
same batch). Histograms yield ``<signal>_sum`` and ``<signal>_count`` so
window means are Δsum/Δcount.

Speculative decoding (:data:`~infermeter.telemetry.spec_decode.SPEC_SIGNALS`, outside
:data:`SIGNALS`: extracted only for the engines that name them, summarised by
:mod:`infermeter.telemetry.spec_decode`): vLLM V1's counters
``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}``
(one signal per position), SGLang's gauges ``sglang:spec_accept_rate`` and
``sglang:spec_accept_length``.
"""

from __future__ import annotations

from dataclasses import dataclass

from infermeter.telemetry.exposition import Exposition, select
from infermeter.telemetry.spec_decode import MAX_POSITIONS, POS_KEY

#: Gauges: state at the scrape instant.
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage", "prefix_cache_hit_rate")
#: Counters: cumulative since server start; use deltas.
COUNTERS = ("prefix_cache_hits", "prefix_cache_queries", "num_preemptions", "prompt_tokens", "generation_tokens")
#: Histograms (seconds): each yields ``<name>_sum`` and ``<name>_count``.
HISTOGRAMS = ("ttft_seconds", "e2e_seconds", "itl_seconds", "queue_time_seconds")
SIGNALS = GAUGES + COUNTERS + tuple(f"{h}_{p}" for h in HISTOGRAMS for p in ("sum", "count"))


@dataclass(frozen=True)
class Src:
    """Series ``name`` summed over labels; ``where`` must match; ``rank0`` labels, when present, must be ``"0"``."""

    name: str
    where: tuple[tuple[str, str], ...] = ()
    rank0: tuple[str, ...] = ()

    def value(self, exp: Exposition) -> float | None:
        return select(exp, self.name, dict(self.where), self.rank0)


@dataclass(frozen=True)
class Ratio:
    """``num / den``; unavailable when either is missing or ``den`` is 0."""

    num: Src
    den: Src

    def value(self, exp: Exposition) -> float | None:
        n, d = self.num.value(exp), self.den.value(exp)
        if n is None or d is None or d == 0:
            return None
        return n / d


@dataclass(frozen=True)
class Total:
    """Sum of several series; unavailable unless all are present."""

    parts: tuple[Src, ...]

    def value(self, exp: Exposition) -> float | None:
        vals = [p.value(exp) for p in self.parts]
        if any(v is None for v in vals):
            return None
        return float(sum(v for v in vals if v is not None))


Term = Src | Ratio | Total


@dataclass(frozen=True)
class Adapter:
    """One engine: signal -> ordered aliases; histogram -> ordered family names."""

    engine: str
    prefix: str
    metrics_path: str
    signals: dict[str, tuple[Term, ...]]
    histograms: dict[str, tuple[str, ...]]
    rank0: tuple[str, ...] = ()
    notes: str = ""


def _s(*names: str, rank0: tuple[str, ...] = (), **where: str) -> tuple[Term, ...]:
    return tuple(Src(n, tuple(sorted(where.items())), rank0) for n in names)


_SGL_RANKS = ("tp_rank", "pp_rank")

_VLLM_SPEC: dict[str, tuple[Term, ...]] = {
    "spec_decode_drafts": _s("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts"),
    "spec_decode_draft_tokens": _s("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens"),
    "spec_decode_accepted_tokens": _s("vllm:spec_decode_num_accepted_tokens_total",
                                      "vllm:spec_decode_num_accepted_tokens"),
    **{POS_KEY.format(i): _s("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                             "vllm:spec_decode_num_accepted_tokens_per_pos", position=str(i))
       for i in range(MAX_POSITIONS)},
}
_SGL_SPEC: dict[str, tuple[Term, ...]] = {
    "spec_accept_rate": _s("sglang:spec_accept_rate", rank0=_SGL_RANKS + ("dp_rank",)),
    "spec_accept_length": _s("sglang:spec_accept_length", rank0=_SGL_RANKS + ("dp_rank",)),
}

ADAPTERS: dict[str, Adapter] = {
    "vllm": Adapter(
        "vllm", "vllm:", "/metrics",
        signals={
            "num_requests_running": _s("vllm:num_requests_running"),
            "num_requests_waiting": _s("vllm:num_requests_waiting"),
            "kv_cache_usage": _s("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "prefix_cache_hit_rate": _s("vllm:gpu_prefix_cache_hit_rate"),
            "prefix_cache_hits": _s("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "prefix_cache_queries": _s("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            "num_preemptions": _s("vllm:num_preemptions_total"),
            "prompt_tokens": _s("vllm:prompt_tokens_total"),
            "generation_tokens": _s("vllm:generation_tokens_total"),
            **_VLLM_SPEC,
        },
        histograms={
            "ttft_seconds": ("vllm:time_to_first_token_seconds",),
            "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
            "itl_seconds": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            "queue_time_seconds": ("vllm:request_queue_time_seconds",),
        },
        notes="pre-0.9 prefix counters (gpu_prefix_cache_*) count blocks, not tokens",
    ),
    "sglang": Adapter(
        "sglang", "sglang:", "/metrics",
        signals={
            "num_requests_running": _s("sglang:num_running_reqs", rank0=_SGL_RANKS),
            "num_requests_waiting": _s("sglang:num_queue_reqs", rank0=_SGL_RANKS),
            "kv_cache_usage": _s("sglang:token_usage", rank0=_SGL_RANKS),
            "prefix_cache_hits": _s("sglang:cached_tokens_total"),
            "prefix_cache_queries": _s("sglang:prompt_tokens_total"),
            "num_preemptions": _s("sglang:num_retracted_requests_total", rank0=_SGL_RANKS),
            "prompt_tokens": _s("sglang:prompt_tokens_total"),
            "generation_tokens": _s("sglang:generation_tokens_total"),
            **_SGL_SPEC,
        },
        histograms={
            "ttft_seconds": ("sglang:time_to_first_token_seconds",),
            "e2e_seconds": ("sglang:e2e_request_latency_seconds",),
            "itl_seconds": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
            "queue_time_seconds": ("sglang:queue_time_seconds",),
        },
        notes="token counters move only when requests finish; needs --enable-metrics",
    ),
    "tgi": Adapter(
        "tgi", "tgi_", "/metrics",
        signals={
            "num_requests_running": _s("tgi_batch_current_size"),
            "num_requests_waiting": _s("tgi_queue_size"),
            "kv_cache_usage": (Ratio(Src("tgi_batch_current_max_tokens"), Src("tgi_batch_max_total_tokens")),),
            "prompt_tokens": _s("tgi_request_input_length_sum"),
            "generation_tokens": _s("tgi_request_generated_tokens_sum"),
        },
        histograms={
            "e2e_seconds": ("tgi_request_duration",),
            "itl_seconds": ("tgi_request_mean_time_per_token_duration",),
            "queue_time_seconds": ("tgi_request_queue_duration",),
        },
        notes="KV usage is a proxy: current batch max tokens / max total tokens",
    ),
    "llamacpp": Adapter(
        "llamacpp", "llamacpp:", "/metrics",
        signals={
            "num_requests_running": _s("llamacpp:requests_processing"),
            "num_requests_waiting": _s("llamacpp:requests_deferred"),
            "kv_cache_usage": _s("llamacpp:kv_cache_usage_ratio"),
            "prefix_cache_hits": _s("llamacpp:prompt_tokens_cached_total"),
            "prefix_cache_queries": (
                Total((Src("llamacpp:prompt_tokens_total"), Src("llamacpp:prompt_tokens_cached_total"))),
            ),
            "prompt_tokens": _s("llamacpp:prompt_tokens_total"),
            "generation_tokens": _s("llamacpp:tokens_predicted_total"),
        },
        histograms={},
        notes="needs --metrics; KV usage only on builds before mid-2025",
    ),
    "trtllm": Adapter(
        "trtllm", "trtllm_", "/prometheus/metrics",
        signals={
            "num_requests_running": _s("trtllm_num_requests_running"),
            "num_requests_waiting": _s("trtllm_num_requests_waiting"),
            "kv_cache_usage": _s("trtllm_kv_cache_utilization"),
            "prefix_cache_hit_rate": _s("trtllm_kv_cache_hit_rate"),
            "prefix_cache_hits": _s("trtllm_kv_cache_reused_blocks_total"),
            "prefix_cache_queries": (
                Total((Src("trtllm_kv_cache_reused_blocks_total"), Src("trtllm_kv_cache_missed_blocks_total"))),
            ),
            "prompt_tokens": _s("trtllm_prompt_tokens_total"),
            "generation_tokens": _s("trtllm_generation_tokens_total"),
        },
        histograms={
            "ttft_seconds": ("trtllm_time_to_first_token_seconds",),
            "e2e_seconds": ("trtllm_e2e_request_latency_seconds",),
            "itl_seconds": ("trtllm_time_per_output_token_seconds",),
            "queue_time_seconds": ("trtllm_request_queue_time_seconds",),
        },
        notes="prefix-cache counters are in KV blocks",
    ),
    "triton": Adapter(
        "triton", "nv_trt_llm_", "/metrics",
        signals={
            "num_requests_running": _s("nv_trt_llm_request_metrics", request_type="active"),
            "num_requests_waiting": _s("nv_trt_llm_request_metrics", request_type="waiting"),
            "kv_cache_usage": _s("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction")
            + (
                Ratio(
                    Src("nv_trt_llm_kv_cache_block_metrics", (("kv_cache_block_type", "used"),)),
                    Src("nv_trt_llm_kv_cache_block_metrics", (("kv_cache_block_type", "max"),)),
                ),
            ),
        },
        histograms={},
        notes="Triton with the TensorRT-LLM backend (port 8002)",
    ),
}

METRIC_DIALECTS = tuple(ADAPTERS)  # the engines whose /metrics names telemetry reads
#: Info series read from the raw scrape elsewhere (``measure.calibrate``: vLLM's KV capacity).
INFO_NAMES = ("vllm:cache_config_info",)


def _term_names(term: Term) -> tuple[str, ...]:
    if isinstance(term, Src):
        return (term.name,)
    if isinstance(term, Ratio):
        return (term.num.name, term.den.name)
    return tuple(p.name for p in term.parts)


def used_names() -> frozenset[str]:
    """Every sample name some adapter reads (signals, histogram ``_sum``/``_count``) plus
    :data:`INFO_NAMES`: the series a scraper keeps first when a server exposes too many."""
    names: set[str] = set(INFO_NAMES)
    for ad in ADAPTERS.values():
        for terms in ad.signals.values():
            for term in terms:
                names.update(_term_names(term))
        for families in ad.histograms.values():
            for fam in families:
                names.update((f"{fam}_sum", f"{fam}_count"))
    return frozenset(names)


def detect(exp: Exposition) -> str | None:
    """Engine whose prefix has the most samples in ``exp``; ``None`` when none matches."""
    best, best_n = None, 0
    for name, ad in ADAPTERS.items():
        n = sum(1 for s in exp.samples if s.name.startswith(ad.prefix))
        if n > best_n:
            best, best_n = name, n
    return best


def _first(terms: tuple[Term, ...], exp: Exposition) -> float | None:
    for term in terms:
        v = term.value(exp)
        if v is not None:
            return v
    return None


def extract(exp: Exposition, adapter: Adapter | None) -> dict[str, float | None]:
    """All :data:`SIGNALS` for one scrape; ``None`` marks unavailable."""
    out: dict[str, float | None] = dict.fromkeys(SIGNALS)
    if adapter is None:
        return out
    for key, terms in adapter.signals.items():
        out[key] = _first(terms, exp)
    for key, families in adapter.histograms.items():
        for fam in families:
            count = Src(f"{fam}_count").value(exp)
            if count is not None:
                out[f"{key}_count"] = count
                out[f"{key}_sum"] = Src(f"{fam}_sum").value(exp)
                break
    return out
