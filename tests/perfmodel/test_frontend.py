"""The API server's serial per-request work (issue 29, blind set 3 miss a): a served replica's request-rate ceiling."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel import build_deployment
from infermeter.perfmodel.calibration import Calibration, load_calibration, parse_calibration
from infermeter.perfmodel.corpus import Row
from infermeter.perfmodel.fit import fit
from infermeter.perfmodel.lengths import Lengths
from infermeter.perfmodel.serving import saturation
from infermeter.perfmodel.validate import served


def _frontend(ms: float, engine: str = "vllm") -> Calibration:
    cal = load_calibration()
    kept = tuple(e for e in cal.entries if e.phase != "frontend")  # a fitted value would win over the engine's prior
    return cal.with_entries(kept, tuple(replace(e, frontend_ms=ms) if e.name == engine else e for e in cal.engines))


def test_a_served_replica_finishes_at_most_one_request_per_frontend_cost():
    d = build_deployment("qwen3-14b", "h100-sxm", calibration=_frontend(25.0))
    gpu, _ = saturation(d, 128, 4, served=False)
    capped, _ = saturation(d, 128, 4)
    assert gpu / 4 > 1 / 0.025  # the GPU alone would serve more than 40 requests a second of 128 in / 4 out
    assert capped == pytest.approx(4 / 0.025)  # the server's one process: 40 requests a second, 160 output tokens
    two = build_deployment("qwen3-14b", "2xh100-sxm:tp1", calibration=_frontend(25.0))
    assert saturation(two, 128, 4)[0] == pytest.approx(2 * 4 / 0.025)  # a server per replica


def test_the_ceiling_leaves_runs_the_gpu_bounds_alone():
    d = build_deployment("qwen3-14b", "h100-sxm", calibration=_frontend(25.0))
    sharegpt = Lengths.of("sharegpt", 217, 202)
    for args in ((4000, 200, None, None), (217, 202, sharegpt, 1000)):
        assert saturation(d, *args) == saturation(d, *args, served=False)


def test_more_frontend_work_lowers_short_requests_only_once_it_binds():
    rates = [saturation(build_deployment("qwen3-14b", "h100-sxm", calibration=_frontend(ms)), 128, 4)[0] for ms in (1.0, 20.0, 40.0)]
    assert rates[0] > rates[1] > rates[2]
    assert rates[1] == pytest.approx(2 * rates[2])


def test_harmony_rendered_chats_pay_no_frontend_cost():
    """vLLM and SGLang render gpt-oss chats with openai-harmony, not a Jinja2 template and a tokenizer call."""
    cal = _frontend(25.0)
    oss = build_deployment("gpt-oss-20b", "a100-80gb", calibration=cal)
    assert oss.harmony_chat and oss.frontend_s == 0.0
    assert saturation(oss, 128, 4) == saturation(oss, 128, 4, served=False)
    qwen = build_deployment("qwen3-14b", "a100-80gb", calibration=cal)
    assert not qwen.harmony_chat and qwen.frontend_s == pytest.approx(0.025)
    assert oss.with_values(mfu=oss.mfu, mbu=oss.mbu, step_overhead_ms=1.0, layer_overhead_us=0.0, kv_reread=0.0,
                           request_overhead_ms=10.0, seq_overhead_us=10.0, frontend_ms=50.0).frontend_s == 0.0


def _row(row_id: str, *, conditions: str = "", scenario: str = "saturated", value: float = 176.0, output: int = 4,
         concurrency: int | None = None) -> Row:
    return Row(id=row_id, model="qwen3-14b", hardware="h100-sxm", gpus=1, tp=1, pp=1, weight_dtype="bf16", engine="vllm",
               scenario=scenario, concurrency=concurrency, input_tokens=128, output_tokens=output,
               metric="output_tokens_per_s", value=value, conditions=conditions, settings=(("requests", 1000),))


def test_rows_are_served_unless_an_offline_harness_or_a_static_batch_ran_them():
    assert served(_row("a", conditions="client: vllm bench serve --backend openai-chat"))
    assert not served(_row("b", conditions="python benchmarks/benchmark_throughput.py --num-prompts 1000"))
    assert not served(_row("c", conditions="measured by trtllm-bench throughput"))
    assert not served(_row("d", scenario="static_batch", concurrency=64))


def test_the_fit_takes_the_frontend_cost_from_short_served_runs_only():
    short = [_row(f"s{v}", conditions="vllm bench serve", value=v) for v in (170.0, 180.0)]
    cal = fit(short, _frontend(10.0))
    got = next(e for e in cal.entries if e.phase == "frontend" and e.fitted)
    assert got.engine == "vllm" and got.value > 15.0  # 44 requests a second: about 23 ms a request, up from the 10 ms prior
    assert "s170" in got.source
    offline = [_row(f"o{v}", conditions="benchmark_throughput.py", value=v) for v in (170.0, 180.0)]
    long_out = [_row("l", conditions="vllm bench serve", output=200, value=3000.0)]
    assert not any(e.phase == "frontend" and e.fitted for e in fit(offline + long_out, _frontend(10.0)).entries)


def test_a_negative_frontend_cost_is_refused():
    raw = {"engines": {"x": {"overhead_ms": 1, "request_overhead_ms": 1, "per_seq_us": 1, "max_num_seqs": 8,
                             "max_batched_tokens": 64, "frontend_ms": -1, "source": "test"}}}
    with pytest.raises(ConfigError, match="frontend_ms"):
        parse_calibration(raw, "test")
