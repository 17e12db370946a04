"""``emulate --disaggregate``: the disaggregated twin served live (engines.emulator.disagg)."""

from __future__ import annotations

import asyncio
import time

from infermeter.engines.emulator.app import build_backend
from infermeter.engines.emulator.config import EmulatorConfig
from infermeter.engines.emulator.disagg import DisaggBackend
from infermeter.engines.emulator.simple import GenRequest
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import fake_twin
from infermeter.twin.disagg import DisaggSpec, DisaggTwin, Link
from infermeter.twin.predictor import LinearStepTime

SPEEDUP = 20.0


def _dt(latency_s: float) -> DisaggTwin:
    p = LinearStepTime(base_s=0.01, per_token_s=0.001)
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=16)
    return DisaggTwin(spec=DisaggSpec(prefill="h100-sxm", decode="h100-sxm"),
                      prefill=fake_twin(predictor=p, engine=cfg), decode=fake_twin(predictor=p, engine=cfg, lanes=2),
                      link=Link("test", "node", 1e12, latency_s, 1), kv_bytes_per_token=1000, layers=1)


def test_first_token_comes_from_decode_after_prefill_and_transfer():
    async def main():
        b = DisaggBackend(_dt(0.2), speedup=SPEEDUP)
        try:
            t0 = time.perf_counter()
            chunks = []
            async for k in b.generate(GenRequest(prompt_tokens=100, max_tokens=6, prompt_text="p" * 400)):
                chunks.append((time.perf_counter() - t0, k))
            return chunks, b, b.metrics_text()
        finally:
            await b.close()

    chunks, b, text = asyncio.run(main())
    assert sum(k for _, k in chunks) == 6
    # virtual: prefill 0.01 + 0.1, transfer 0.2, then the decode side's first step: never earlier / speedup
    assert chunks[0][0] >= (0.11 + 0.2 + 0.011) / SPEEDUP - 0.001
    pre, dec = b.engines[0], b.engines[1:]
    assert pre.prompt_tokens_total == 100 and sum(e.generation_tokens_total for e in dec) == 6
    assert b.metrics[0].ttft.count == 0 and sum(m.ttft.count for m in b.metrics[1:]) == 1
    assert b.kv_transfer.count == 1 and b.in_transfer == 0
    assert 'infermeter:disagg_pool_info{engine="0",model_name="fake-linear",pool="prefill"} 1.0' in text
    assert 'pool="decode"' in text and "infermeter:kv_transfer_seconds_count" in text
    assert 'vllm:num_requests_waiting{engine="2"' in text  # every engine of both pools


def test_emulate_config_builds_the_disaggregated_backend():
    b = build_backend(EmulatorConfig(model="llama-3.1-8b", disaggregate="prefill=h100-sxm,decode=2xh100-sxm:tp1"))
    assert isinstance(b, DisaggBackend) and b.npre == 1 and len(b.engines) == 3
    assert b.describe()["disaggregated"] is True
