"""The emulator as a reasoning model (``--reasoning-tokens N``): the first N tokens stream as thinking,
and a client measures ``ttfo - ttft`` = N x ITL (within 10 %), with the simple backend and the twin."""

from __future__ import annotations

import asyncio

import pytest

from infermeter.analysis.accumulator import build_summary
from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.client.session import make_session
from infermeter.engines.emulator.app import build_app
from infermeter.engines.emulator.config import EmulatorConfig
from infermeter.engines.emulator.live import TwinBackend
from infermeter.engines.emulator.server import serve
from infermeter.errors import ConfigError
from infermeter.records.record import RequestRecord, records_to_table
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime
from infermeter.workload.spec import RequestSpec


def _spec(max_tokens: int) -> RequestSpec:
    return RequestSpec(index=0, prompt=None, messages=({"role": "user", "content": "why? " * 20},),
                       max_tokens=max_tokens, input_tokens=25)


async def _send(cfg: EmulatorConfig, max_tokens: int, backend=None, api: str = "chat", n: int = 1):
    app = build_app(cfg, backend)
    recs = []
    try:
        async with serve(app, port=0) as url, make_session() as session:
            loop = asyncio.get_running_loop()
            client = OpenAIClient(ClientConfig(base_url=url, model="m", api=api), session, loop.time)
            for i in range(n):
                rec = RequestRecord(request_id=i)
                await client.send(_spec(max_tokens), rec)
                recs.append(rec)
    finally:
        if backend is not None:
            await backend.close()
    return recs


def test_simple_backend_thinking_lasts_n_inter_token_gaps():
    itl_s, n_think = 0.010, 30
    cfg = EmulatorConfig(ttft_ms=20, itl_ms=itl_s * 1000, reasoning_tokens="30")
    (rec,) = asyncio.run(_send(cfg, max_tokens=40))
    assert rec.outcome == "ok", rec.error_detail
    assert rec.reasoning_tokens == n_think and rec.answer_tokens == 10 and rec.completion_tokens == 40
    thought = rec.first_answer_at - rec.first_token_at
    assert thought == pytest.approx(n_think * itl_s, rel=0.10)
    s = build_summary(records_to_table([rec]))
    assert (s.ttfo_ms.mean - s.ttft_ms.mean) == pytest.approx(n_think * itl_s * 1000, rel=0.10)
    assert s.total_reasoning_tokens == n_think and s.total_answer_tokens == 10


def test_twin_thinking_tokens_are_decode_steps():
    """The twin at batch 1: a decode step of one sequence costs 0.010 + 0.001 x 1 s, so 20 thinking tokens
    after the first take 20 steps, 0.22 s; the thinking tokens are generated like any (the engine counts them)."""
    step = LinearStepTime(base_s=0.01, per_token_s=0.001)
    backend = TwinBackend(fake_twin(predictor=step, num_blocks=512), speedup=1.0)
    cfg = EmulatorConfig(reasoning_tokens="20")
    (rec,) = asyncio.run(_send(cfg, max_tokens=30, backend=backend))
    assert rec.outcome == "ok", rec.error_detail
    assert rec.reasoning_tokens == 20 and rec.answer_tokens == 10
    assert rec.first_answer_at - rec.first_token_at == pytest.approx(20 * 0.011, rel=0.10)
    assert backend.engines[0].generation_tokens_total == 30  # thinking is generation: KV and steps like the answer


def test_completions_stream_thinking_inside_think_tags():
    cfg = EmulatorConfig(ttft_ms=5, itl_ms=2, reasoning_tokens="8")
    (rec,) = asyncio.run(_send(cfg, max_tokens=12, api="completions"))
    assert rec.outcome == "ok", rec.error_detail
    assert rec.reasoning_tokens + rec.answer_tokens == 12 and rec.first_answer_at > rec.first_token_at
    # exact unless a late chunk carried several tokens: the count is then spread by characters, tags included
    assert abs(rec.reasoning_tokens - 8) <= 1


def test_thinking_that_reaches_max_tokens_leaves_no_answer():
    cfg = EmulatorConfig(ttft_ms=5, itl_ms=1, reasoning_tokens="50")
    (rec,) = asyncio.run(_send(cfg, max_tokens=10))
    assert rec.outcome == "ok" and rec.reasoning_tokens == 10 and rec.answer_tokens == 0
    assert rec.first_answer_at is None


def test_a_thinking_distribution_draws_per_request():
    cfg = EmulatorConfig(ttft_ms=1, itl_ms=0.5, reasoning_tokens="20,8,5,40")
    recs = asyncio.run(_send(cfg, max_tokens=60, n=6))
    drawn = [r.reasoning_tokens for r in recs]
    assert all(5 <= d <= 40 for d in drawn) and len(set(drawn)) > 1
    assert all(r.answer_tokens == 60 - d for r, d in zip(recs, drawn))


@pytest.mark.parametrize("bad", ["many", "-5", "10,2,30,20"])
def test_a_bad_thinking_value_names_the_flag(bad):
    with pytest.raises(ConfigError, match="--reasoning-tokens"):
        EmulatorConfig.from_args(["--reasoning-tokens", bad])
