"""What other tools would report for the same stream: vLLM's ``bench serve``, GuideLLM and AIPerf.

Metric names are shared between tools but their rules differ (docs/metrics.md, "infermeter vs
vllm bench vs GuideLLM vs AIPerf"). Given one response as it arrived -- its SSE payloads with
arrival times -- these functions apply each tool's published rule, so a user can put an
infermeter figure next to the one another tool prints::

    s = RecordedStream(sent_at=0.0, events=((0.100, '{"choices":[{"delta":{"role":"assistant","content":""}}]}'),
                                            (0.100, '{"choices":[{"delta":{"content":"Hi"}}]}'), ...))
    vllm_bench(s).ttft_s, guidellm(s).itl_s, aiperf(s).itl_s

Rules (read from each tool's source; file and line references in docs/metrics.md):

- **vllm bench serve**: TTFT ends at the first payload with non-empty ``choices`` -- in chat
  that is vLLM's empty role chunk; ITL is one gap per later payload with ``choices``, pooled over
  requests; TPOT = (last choices payload - TTFT) / (usage completion tokens - 1).
- **GuideLLM**: TTFT ends at the first payload with content (the role chunk is skipped); its
  ``inter_token_latency`` is one per-request mean (last content - first content) /
  (output tokens - 1) (weighted by output tokens - 1 across requests); its
  ``time_per_output_token`` = (last content - request start) / output tokens, TTFT included.
- **AIPerf**: TTFT ends at the first payload with content; ITL = (request latency - TTFT) /
  (output tokens - 1) per request, request latency ending at the last content payload (AIPerf
  counts output tokens by re-tokenising the text; the server's usage count is used here).

infermeter itself (``infermeter_rule``) runs the payloads through its own client code: TTFT
ends at the first token-bearing chunk; ITL pools one gap per token (a chunk of k tokens gives k
gaps of gap/k), starting at the first content chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infermeter.analysis.metrics import inter_token_latencies, request_metrics
from infermeter.client.openai import ClientConfig, OpenAIClient, StreamTally
from infermeter.records.record import RequestRecord, records_to_table


@dataclass(frozen=True)
class RecordedStream:
    """One response: request start (s), and each SSE payload (``data:`` text) with its arrival (s)."""

    sent_at: float
    events: tuple[tuple[float, str], ...]
    chat: bool = True


@dataclass(frozen=True)
class ToolMetrics:
    """One tool's figures for one request (seconds); ``itl_s`` is a list of gaps or one mean."""

    tool: str
    ttft_s: float | None
    itl_s: list[float] = field(default_factory=list)
    tpot_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int | None = None


def _parsed(s: RecordedStream) -> list[tuple[float, dict[str, Any]]]:
    out = []
    for t, data in s.events:
        if data == "[DONE]":
            continue
        obj = json.loads(data)
        if isinstance(obj, dict):
            out.append((t, obj))
    return out


def _content(obj: dict[str, Any], chat: bool) -> str:
    choices = obj.get("choices") or []
    if not choices:
        return ""
    c0 = choices[0]
    if chat:
        d = c0.get("delta") or {}
        return str(d.get("content") or "") + str(d.get("reasoning_content") or "")
    return str(c0.get("text") or "")


def _usage_tokens(events: list[tuple[float, dict[str, Any]]]) -> int | None:
    for _, obj in events:
        u = obj.get("usage")
        if isinstance(u, dict) and isinstance(u.get("completion_tokens"), int):
            return int(u["completion_tokens"])
    return None


def vllm_bench(s: RecordedStream) -> ToolMetrics:
    ev = _parsed(s)
    times = [t for t, obj in ev if obj.get("choices")]
    n = _usage_tokens(ev)
    if not times:
        return ToolMetrics("vllm bench serve", None, output_tokens=n)
    ttft = times[0] - s.sent_at
    latency = times[-1] - s.sent_at
    gaps = [b - a for a, b in zip(times, times[1:])]
    tpot = (latency - ttft) / (n - 1) if n and n > 1 else None
    return ToolMetrics("vllm bench serve", ttft, gaps, tpot, latency, n)


def _content_times(s: RecordedStream) -> tuple[list[float], int | None]:
    ev = _parsed(s)
    return [t for t, obj in ev if _content(obj, s.chat)], _usage_tokens(ev)


def guidellm(s: RecordedStream) -> ToolMetrics:
    times, n = _content_times(s)
    n = n if n is not None else len(times)
    if not times:
        return ToolMetrics("GuideLLM", None, output_tokens=n)
    first, last = times[0], times[-1]
    itl = [(last - first) / (n - 1)] if n > 1 else []
    tpot = (last - s.sent_at) / n if n else None  # GuideLLM's time_per_output_token: TTFT included
    return ToolMetrics("GuideLLM", first - s.sent_at, itl, tpot, last - s.sent_at, n)


def aiperf(s: RecordedStream) -> ToolMetrics:
    times, n = _content_times(s)
    n = n if n is not None else len(times)
    if not times:
        return ToolMetrics("AIPerf", None, output_tokens=n)
    ttft, latency = times[0] - s.sent_at, times[-1] - s.sent_at
    itl = [(latency - ttft) / (n - 1)] if n > 1 else []
    return ToolMetrics("AIPerf", ttft, itl, itl[0] if itl else None, latency, n)


def infermeter_rule(s: RecordedStream) -> ToolMetrics:
    """infermeter's own figures, from its client's handling of the same payloads."""
    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m", api="chat" if s.chat else "completions"),
                          session=None, clock=lambda: 0.0, http_client="aiohttp")  # type: ignore[arg-type]
    rec = RequestRecord(request_id=0, intended_at=s.sent_at, sent_at=s.sent_at, first_byte_at=s.sent_at)
    tally = StreamTally()
    for t, data in s.events:
        state = client._on_event(data, t, rec, tally, s.chat, rec.chunk_times)
        if state and rec.ended_at is None:
            rec.ended_at = t
    client._finish_tokens(rec, tally)
    table = records_to_table([rec])
    m = request_metrics(table)
    itl = [float(x) for x in inter_token_latencies(table)]
    tpot = float(m.tpot[0]) if np.isfinite(m.tpot[0]) else None
    return ToolMetrics("infermeter", float(m.ttft[0]), itl, tpot, float(m.e2e[0]), rec.completion_tokens)
