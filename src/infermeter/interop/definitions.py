"""How each other tool defines the metrics ``compare`` compares, where it differs from infermeter.

Promise: :data:`DEFINITIONS` maps a tool name (``run.json`` ``imported.tool``; infermeter's own runs are
``infermeter``) to {metric family: that tool's rule}, one entry per family whose imported values keep the
tool's rule (the timestamps or counts it recorded follow it). :func:`definition_warnings` lists, for two
runs, the compared families the two tools define differently. The rules are docs/metrics.md's table
"infermeter vs vllm bench vs GuideLLM vs AIPerf vs inference-benchmarker".
"""

from __future__ import annotations

from collections.abc import Iterable

TOOLS = ("infermeter", "vllm-bench", "guidellm", "aiperf", "inference-benchmarker")

INFERMETER = {
    "ttft": "from the send to the first token-bearing chunk",
    "tpot": "(end - first token) / (n - 1), the end being [DONE] or the final usage chunk",
    "itl": "pooled gaps between token-bearing chunks, one per token",
    "e2e": "from the send to [DONE] or the final usage chunk",
    "output_throughput": "output tokens of successful requests / (last end - first intended send)",
    "request_throughput": "successful requests / (last end - first intended send)",
}

DEFINITIONS: dict[str, dict[str, str]] = {
    "infermeter": {},
    "vllm-bench": {
        "ttft": "vllm bench ends TTFT at the first payload with choices (chat: the empty role chunk)",
        "tpot": "vllm bench's TPOT starts at its TTFT (the role chunk in chat) and ends at the last payload with choices",
        "itl": "vllm bench's ITL is one gap per payload with choices (not per token), from the role chunk in chat",
        "e2e": "vllm bench's latency ends at the last payload with choices, not at [DONE]",
    },
    "guidellm": {
        "itl": "GuideLLM stores no per-chunk times: ITL is each request's mean gap (last - first token) / (n - 1)",
        "e2e": "imported E2E ends at GuideLLM's last_request_iteration (its request_latency ends later, at request_end)",
    },
    "aiperf": {
        "e2e": "AIPerf's request_latency ends at the last content response, not at [DONE]",
        "tpot": "AIPerf's end is its last content response, not [DONE]",
    },
    "inference-benchmarker": {  # aggregates only (its results JSON has no per-request data)
        "ttft": "inference-benchmarker's TTFT ends at the first non-empty delta.content (reasoning deltas skipped)",
        "tpot": "inference-benchmarker's inter_token_latency (imported as TPOT) is a per-request mean over "
                "client-tokenised deltas, ending at the last content delta, not [DONE]",
        "output_throughput": "inference-benchmarker's token_throughput_secs counts client-tokenised output tokens "
                             "over the first completed response's start to the last end",
        "request_throughput": "inference-benchmarker's request_rate divides by the first completed response's "
                              "start to the last end",
    },
}


def families(metrics: Iterable[str]) -> set[str]:
    """Metric families of compare's metric names (``ttft_p95`` -> ``ttft``)."""
    out = set()
    for m in metrics:
        out.add(_FAMILY.get(m, m if m in ("output_throughput", "request_throughput", "error_rate") else m.split("_")[0]))
    return out


_FAMILY = {"output_tokens_per_s": "output_throughput", "output_token_throughput": "output_throughput",
           "requests_per_s": "request_throughput"}  # compare's catalog names


def tool_of(run: dict[str, object]) -> str:
    """The tool whose rules a run's figures follow: ``imported.tool``, else infermeter."""
    imp = run.get("imported")
    if isinstance(imp, dict) and isinstance(imp.get("tool"), str):
        return str(imp["tool"])
    return "infermeter"


def definition_warnings(base_tool: str, cand_tool: str, metrics: Iterable[str]) -> list[str]:
    """One line per compared metric family that the two runs' tools define differently."""
    if base_tool == cand_tool:
        return []
    out = []
    b, c = DEFINITIONS.get(base_tool, {}), DEFINITIONS.get(cand_tool, {})
    for fam in sorted(families(metrics)):
        rules = [r for r in (b.get(fam), c.get(fam)) if r]
        if rules:
            out.append(f"{fam} is defined differently ({base_tool} vs {cand_tool}): " + "; ".join(rules)
                       + (f"; infermeter: {INFERMETER[fam]}" if "infermeter" in (base_tool, cand_tool)
                          and fam in INFERMETER else ""))
    return out
