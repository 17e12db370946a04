"""What each number in a report means: the definitions shown on every report page.

The contract: :data:`DEFINITIONS` is an ordered list of (term, definition)
that agrees with :mod:`infermeter.analysis.metrics` and
:func:`infermeter.analysis.summary.build_summary`; both report formats print
it verbatim, so a reader needs no other document::

    >>> dict(DEFINITIONS)["TTFT"][:40]
    'Time to first token: first_token_at − se'
"""

from __future__ import annotations

DEFINITIONS: list[tuple[str, str]] = [
    ("TTFT", "Time to first token: first_token_at − sent_at, for requests that completed (ms)."),
    ("TTFO", "Time to first output token, for reasoning models: first_answer_at − sent_at, where the answer's "
     "first chunk is the first that is not the model's thinking (reasoning_content, reasoning, <think> tags); "
     "TTFO − TTFT is the thinking time. Shown only for runs in which some request thought (ms)."),
    ("TTFT from intended send", "first_token_at − intended_at: includes any wait before the client could send, "
     "so a saturated client or server cannot hide queueing (coordinated omission)."),
    ("TPOT", "Time per output token after the first: (ended_at − first_token_at) / (output tokens − 1), "
     "for requests with at least two output tokens (ms)."),
    ("ITL", "Inter-token latency: gaps between token-bearing stream chunks, pooled over requests; a chunk "
     "carrying k tokens counts as k gaps of gap/k (ms)."),
    ("E2E", "End-to-end latency: ended_at − sent_at (ms)."),
    ("Schedule lag", "sent_at − intended_at: how late the client sent compared with the load plan. A large "
     "p99 means the client, not the server, limited the load."),
    ("Throughput", "Completed requests (req/s) or tokens (tok/s) divided by the measured window, from the first "
     "measured request's intended send to the last measured end. Output tokens come from the server's usage "
     "report when it sent one, otherwise from the stream."),
    ("Goodput", "Completed requests per second that met every SLO of the run (latencies from the intended send)."),
    ("Error rate", "Failed requests / (completed + failed). Dropped requests (never sent) are counted separately."),
    ("Offered load", "The target request rate of an open-loop run; for closed-loop runs (fixed concurrency) the "
     "achieved send rate is used."),
    ("p50 / p90 / p95 / p99 / p99.9", "Percentiles with linear interpolation between order statistics "
     "(numpy's default)."),
    ("Valid", "infermeter's verdict on the run itself: invalid when, for example, the client could not keep the "
     "schedule, sends were dropped, or too few requests completed. Numbers of invalid runs are shown but never "
     "marked best."),
    ("Measured / simulated", "Measured runs sent real requests to a server; simulated runs come from infermeter's "
     "performance model or digital twin and write the same files. Simulated series are drawn dashed."),
    ("$ per 1M tokens", "Hourly price of the configuration / (tokens per second × 3600) × 1e6, at the run's "
     "measured throughput and full utilization. \"$/1M output\" charges the whole hour to output tokens; "
     "\"$/1M total\" to input + output tokens. Prices and their sources are listed under Prices used."),
    ("Break-even", "Monthly cost against monthly output-token volume: a configuration costs its monthly price for "
     "each deployment needed (capacity = measured output tokens/s × 3600 × 720 h); a per-token API costs "
     "volume × its price. Where the lines cross, the two cost the same."),
]
