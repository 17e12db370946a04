"""The API server as a FIFO single server in front of the engine, and the KV block size of a deployment."""

from __future__ import annotations

import itertools

import pytest

from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import build_twin, fake_twin
from infermeter.twin.engine import Engine
from infermeter.twin.hashing import KeyMaker, spec_keys, text_block_keys
from infermeter.twin.loop import ListSource, VirtualClock, run_virtual
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.request import SimRequest
from infermeter.twin.spec import TwinSpec

# vLLM CPU's shape: per step c0 + a x tokens + b x sequences
P = LinearStepTime(base_s=0.013, per_token_s=0.0005, per_seq_s=0.0008)


def _wave(service: float, overhead: float = 0.002):
    eng = Engine(P, EngineConfig(max_num_seqs=128, max_num_batched_tokens=2048, block_size=128), 728)
    reqs = [SimRequest(rid=i, arrival=0.0, prompt_tokens=128, max_tokens=8) for i in range(4)]
    done: list[SimRequest] = []
    run_virtual(eng, ListSource(reqs), done.append, VirtualClock(), frontend=(overhead, service))
    return sorted(done, key=lambda r: r.rid)


def test_four_requests_sent_at_once_split_one_plus_three_behind_a_serial_front_end():
    o, s = 0.002, 0.003
    d = _wave(service=s, overhead=o)
    t1 = o + s  # the first is alone in the API server, then alone in the engine
    prefill1 = P.step_time(128, 128, 1)
    assert d[0].scheduled_at == pytest.approx(t1)
    assert d[0].first_token_at == pytest.approx(t1 + prefill1)
    # the other three left the API server during that step (o + 2s, o + 3s, o + 4s < its end)
    assert all(r.scheduled_at == pytest.approx(t1 + prefill1) for r in d[1:])
    step2 = P.step_time(1 + 3 * 128, 128 + 1 + 3 * 128, 4)
    assert [r.first_token_at for r in d[1:]] == pytest.approx([t1 + prefill1 + step2] * 3)
    # records keep the send time: TTFT counts the front end
    assert all(r.arrival == 0.0 for r in d)


def test_without_front_end_work_the_four_share_one_prefill():
    d = _wave(service=0.0)
    assert len({r.first_token_at for r in d}) == 1
    assert d[0].first_token_at == pytest.approx(0.002 + P.step_time(512, 512, 4))


def test_the_front_end_comes_from_the_deployment():
    twin = fake_twin(engine=EngineConfig(frontend_overhead_s=0.004, frontend_service_s=0.001))
    assert twin.frontend == (0.004, 0.001)
    assert twin.describe()["frontend_service_s"] == 0.001
    spec = TwinSpec(model="llama-3.1-8b", gpu="h100-sxm", frontend_service_s=0.002)
    t = spec.twin()
    assert t.frontend[1] == 0.002 and t.frontend[0] == t.request_overhead_s  # overhead: the model's by default


def test_block_size_sets_capacity_granularity_and_max_model_len():
    small = build_twin("llama-3.1-8b", "h100-sxm")
    big = TwinSpec(model="llama-3.1-8b", gpu="h100-sxm", block_size=128).twin()
    cap = small.details["kv_capacity_tokens"]
    assert small.num_blocks == cap // 16 and big.num_blocks == cap // 128
    assert big.describe()["block_size"] == 128 and big.block_size == 128
    assert big.config.max_model_len <= big.num_blocks * 128


def test_only_full_blocks_are_cached_and_at_most_num_tokens_minus_one_hit():
    def run(prompt, block_size):
        eng = Engine(P, EngineConfig(block_size=block_size), 64)
        keys = list(range(1, prompt // block_size + 1))
        reqs = [SimRequest(rid=i, arrival=float(i), prompt_tokens=prompt, max_tokens=2, keys=keys) for i in range(2)]
        done: list[SimRequest] = []
        run_virtual(eng, ListSource(reqs), done.append, VirtualClock())
        eng.pool.check()
        return sorted(done, key=lambda r: r.rid)[1].cached_tokens

    assert run(128, 128) == 0  # one full block: the last token must be computed, so no hit
    assert run(128, 16) == 112  # the same prompt on 16-token blocks
    assert run(300, 128) == 256  # two full blocks of 128 hit
    assert run(257, 128) == 256


def test_text_keys_follow_the_block_size():
    text = "abcdefgh" * 400
    assert len(text_block_keys(text, 300, chars_per_block=512, block_size=128)) == 2
    assert len(text_block_keys(text, 127, chars_per_block=512, block_size=128)) == 0

    class Spec:  # a chat turn whose history the next turn resends
        def __init__(self, prompt, cid):
            self.prompt, self.messages, self.input_tokens = prompt, None, len(prompt) // 4
            self.conversation_id, self.prefix_group = cid, None

    maker = KeyMaker(64, 16)
    a, b = Spec(text[:1600], 7), Spec(text[:1600] + "zyx" * 300, 7)
    assert maker(a) == spec_keys(a, 64, 16)
    assert maker(b) == spec_keys(b, 64, 16)  # reused keys are the same keys


def test_chat_turns_keyed_from_their_new_messages_get_the_keys_of_their_whole_text():
    from dataclasses import replace

    from infermeter.workload import build_workload

    specs = list(itertools.islice(build_workload(profile="chat", seed=3).requests(), 400))
    assert len({s.conversation_id for s in specs}) < len(specs) / 2  # conversations come back, turn after turn
    odd = []
    for i, s in enumerate(specs):
        if i % 7 == 3:  # a turn whose messages are equal copies, not the history's own objects
            s = replace(s, messages=tuple(dict(m) for m in s.messages))
        if i % 11 == 5:  # fewer tokens than the text has chunks: keys capped by the token count
            s = replace(s, input_tokens=max(16, s.input_tokens // 3))
        odd.append(s)
    prompts = list(itertools.islice(build_workload(profile="chat", seed=4, api="completions").requests(), 300))
    mixed = [s for pair in itertools.zip_longest(odd, prompts) for s in pair if s is not None]
    for stream in (specs, odd, prompts, mixed):
        want = [spec_keys(s, 64, 16) for s in stream]
        maker = KeyMaker(64, 16, cache=8)  # a small cache: conversations fall out and come back
        assert [maker(s) for s in stream] == want
        for size in (1, 7, 64, len(stream)):  # batches: a conversation continued several times in one
            maker, got = KeyMaker(64, 16, cache=8), []
            for i in range(0, len(stream), size):
                got += maker.lists(stream[i : i + size])  # KeyMaker.batch, one list per spec
            assert got == want, size
