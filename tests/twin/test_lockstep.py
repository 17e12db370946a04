"""The twin and the performance model agree on a benchmark's closed loop of equal lengths.

Sixteen users of 1,024-token prompts and 128-token answers stay in step in the twin's scheduler (cohorts of prompts
that fill the token budget arrive together), so their mean first token is several times one prompt's prefill;
varied lengths let them drift apart. :func:`perfmodel.serving.at_concurrency` with ``lockstep`` states the first; its
default the second.
"""

from __future__ import annotations

import json

import pytest

from infermeter.perfmodel.api import build_deployment
from infermeter.perfmodel.serving import at_concurrency

ARGS = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "16", "--requests", "200",
        "--no-enable-prefix-caching", "--json")


def _simulated(cli, out, inputs: str, outputs: str) -> dict:
    p = cli("simulate", *ARGS, "--input-tokens", inputs, "--output-tokens", outputs, "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


def test_equal_lengths_stay_in_step_in_the_twin_as_the_model_says(cli, tmp_path):
    d = build_deployment("llama-3.1-8b", "h100-sxm")
    locked = at_concurrency(d, 1024, 128, 16, lockstep=True, requests=200)
    drifting = at_concurrency(d, 1024, 128, 16)
    assert locked.ttft_s > 3 * drifting.ttft_s
    equal = _simulated(cli, tmp_path / "equal", "1024", "128")
    varied = _simulated(cli, tmp_path / "varied", "1024,300,400,1648", "128,40,60,196")
    twin_equal, twin_varied = equal["ttft_ms"]["mean"], varied["ttft_ms"]["mean"]
    # the model's lockstep is the twin's closed loop: first token, decode step and throughput
    assert 0.6 * locked.ttft_s * 1e3 < twin_equal < 1.6 * locked.ttft_s * 1e3
    assert equal["tpot_ms"]["mean"] == pytest.approx(locked.tpot_s * 1e3, rel=0.15)
    assert equal["output_token_throughput"] == pytest.approx(locked.output_tokens_per_s, rel=0.15)
    assert twin_varied < 0.5 * twin_equal  # varied lengths break the cohorts apart
    assert twin_varied < 2 * drifting.ttft_s * 1e3
