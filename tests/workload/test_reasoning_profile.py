"""The ``reasoning`` profile: a question, an instruction to think, and thousands of tokens out."""

from infermeter.workload import build_workload
from infermeter.workload.synthetic import REASONING_INSTRUCTION


def test_reasoning_requests_ask_to_think_and_allow_long_outputs():
    wl = build_workload(profile="reasoning", seed=2)
    specs = [s for _, s in zip(range(200), wl.requests())]
    outs = [s.max_tokens for s in specs]
    assert min(outs) >= 2048 and max(outs) <= 16384 and sum(outs) / len(outs) > 6000  # thousands of thinking tokens
    assert all(256 <= s.input_tokens <= 2048 for s in specs)
    text = specs[0].messages[0]["content"] if specs[0].messages else specs[0].prompt
    assert text.endswith(REASONING_INSTRUCTION)
    assert len({(s.messages or [{}])[0].get("content") for s in specs}) == len(specs)  # distinct questions
    assert wl.describe()["profile"] == "reasoning" and not wl.text_optional


def test_the_generic_length_flags_set_the_reasoning_lengths():
    wl = build_workload(profile="reasoning", output_tokens="3000", input_tokens="400", seed=0)
    spec = next(iter(wl.requests()))
    assert spec.max_tokens == 3000 and spec.input_tokens == 400


def test_reasoning_questions_share_no_prefix():
    from infermeter.workload.reuse import ideal_prefix_reuse

    wl = build_workload(profile="reasoning", seed=10)
    assert ideal_prefix_reuse([s for _, s in zip(range(300), wl.requests())]) < 0.01
