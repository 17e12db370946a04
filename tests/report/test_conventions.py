"""One recorded chat stream, four rules: the figures each tool would print for it (docs/metrics.md)."""

import json

import pytest

from infermeter.report.conventions import RecordedStream, aiperf, guidellm, infermeter_rule, vllm_bench


def chunk(content=None, role=None, finish=None, usage=None, choices=True):
    delta = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


# vLLM-like: the empty role chunk 10 ms before the first token (a slow first read), then tokens at
# 100, 140, 200 (one chunk carrying 2 tokens) and 240 ms, the finish ("length": no EOS token), usage
# (5 tokens) and [DONE].
STREAM = RecordedStream(sent_at=0.0, events=(
    (0.090, chunk(content="", role="assistant")),
    (0.100, chunk(content="Hel")),
    (0.140, chunk(content="lo")),
    (0.200, chunk(content=", wor")),  # two tokens in one chunk
    (0.240, chunk(content="ld")),
    (0.240, chunk(content="", finish="length")),
    (0.241, chunk(choices=False, usage={"prompt_tokens": 12, "completion_tokens": 5})),
    (0.241, "[DONE]"),
))


def test_vllm_bench_counts_the_role_chunk_and_one_gap_per_chunk():
    m = vllm_bench(STREAM)
    assert m.ttft_s == pytest.approx(0.090)  # the role chunk ends TTFT
    assert m.itl_s == pytest.approx([0.010, 0.040, 0.060, 0.040, 0.000])  # 5 gaps, incl. role->first and finish
    assert m.e2e_s == pytest.approx(0.240)
    assert m.tpot_s == pytest.approx((0.240 - 0.090) / 4)  # 37.5 ms


def test_guidellm_and_aiperf_skip_the_role_chunk_and_average_per_request():
    g, a = guidellm(STREAM), aiperf(STREAM)
    assert g.ttft_s == pytest.approx(0.100) and a.ttft_s == pytest.approx(0.100)
    assert g.itl_s == pytest.approx([0.035]) and a.itl_s == pytest.approx([0.035])  # (240-100)/(5-1)
    assert g.tpot_s == pytest.approx(0.048)  # GuideLLM's TPOT: 240 ms / 5 tokens, TTFT included


def test_infermeter_splits_multi_token_chunks_into_gaps():
    m = infermeter_rule(STREAM)
    assert m.ttft_s == pytest.approx(0.100) and m.output_tokens == 5
    # 4 token gaps from the first content chunk: 40 ms, then the 2-token chunk's 60 ms as 2 x 30 ms, then 40 ms
    assert sorted(m.itl_s) == pytest.approx([0.030, 0.030, 0.040, 0.040])
    assert m.tpot_s == pytest.approx(0.035) and m.e2e_s == pytest.approx(0.240)
