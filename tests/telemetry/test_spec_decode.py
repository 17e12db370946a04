"""Speculative-decoding counters read from a fake /metrics body: vLLM's counters (deltas between the first
and last scrape, per position), SGLang's gauges, and nothing at all from a server without them."""

import pytest

from infermeter.telemetry.adapters import ADAPTERS, extract
from infermeter.telemetry.exposition import parse_exposition
from infermeter.telemetry.spec_decode import spec_decode_summary


def _vllm(drafts, draft_tokens, accepted, per_pos, engines=("0",)):
    lines = []
    for e in engines:
        lab = f'engine="{e}",model_name="m"'
        lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {draft_tokens}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
                  f"vllm:num_requests_running{{{lab}}} 1.0"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}'
                  for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _rows(*texts, engine="vllm"):
    return [dict(t=float(i), **extract(parse_exposition(x), ADAPTERS[engine])) for i, x in enumerate(texts)]


def test_vllm_counters_give_deltas_over_the_run():
    rows = _rows(_vllm(1000, 3000, 1500, [700, 500, 300]),  # what the server did before the run
                 _vllm(1100, 3300, 1600, [750, 530, 320]),
                 _vllm(1400, 4200, 2100, [950, 700, 450]))
    s = spec_decode_summary(rows)
    assert s["source"] == "counters"
    assert (s["drafts"], s["draft_tokens"], s["accepted_tokens"]) == (400, 1200, 600)
    assert s["num_speculative_tokens"] == 3
    assert s["acceptance_rate"] == pytest.approx(600 / 1200)
    assert s["mean_accepted_length"] == pytest.approx(1 + 600 / 400)
    assert s["per_position_acceptance"] == pytest.approx([250 / 400, 200 / 400, 150 / 400])
    assert s["conditional_acceptance"] == pytest.approx(600 / (600 + 400 - 150))


def test_engines_are_summed_and_a_counter_reset_is_survived():
    rows = _rows(_vllm(10, 20, 5, [4, 1], engines=("0", "1")), _vllm(30, 60, 25, [15, 10], engines=("0", "1")),
                 _vllm(5, 10, 5, [3, 2], engines=("0", "1")))  # restarted
    s = spec_decode_summary(rows)
    assert s["drafts"] == 2 * (20 + 5) and s["accepted_tokens"] == 2 * (20 + 5)
    assert s["acceptance_rate"] == pytest.approx(50 / 100)


def test_counters_without_the_total_suffix_are_read_too():
    a = _vllm(0, 0, 0, [0, 0]).replace("_total{", "{")
    b = _vllm(10, 20, 8, [6, 2]).replace("_total{", "{")
    s = spec_decode_summary(_rows(a, b))
    assert s["acceptance_rate"] == pytest.approx(0.4) and s["per_position_acceptance"] == pytest.approx([0.6, 0.2])


def test_sglang_gauges_are_averaged():
    def body(rate, length):
        return (f'sglang:spec_accept_rate{{dp_rank="0",model_name="m",tp_rank="0"}} {rate}\n'
                f'sglang:spec_accept_rate{{dp_rank="0",model_name="m",tp_rank="1"}} {rate}\n'
                f'sglang:spec_accept_length{{dp_rank="0",model_name="m",tp_rank="0"}} {length}\n'
                f'sglang:num_running_reqs{{model_name="m",tp_rank="0"}} 2\n')
    s = spec_decode_summary(_rows(body(0.5, 2.0), body(0.7, 3.0), engine="sglang"))
    assert s["source"] == "gauge"
    assert s["acceptance_rate"] == pytest.approx(0.6) and s["mean_accepted_length"] == pytest.approx(2.5)


def test_a_server_without_speculative_decoding_has_no_block():
    plain = 'vllm:num_requests_running{engine="0"} 1\nvllm:generation_tokens_total{engine="0"} 5\n'
    assert spec_decode_summary(_rows(plain, plain)) is None
    one = _rows(_vllm(10, 20, 5, [4, 1]))
    assert spec_decode_summary(one) is None  # one scrape has no delta
