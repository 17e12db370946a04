"""Golden summaries: fixed-seed simulated runs give the same figures as when the files were made.

The three ``tests/data/golden/*.summary.json`` files were written by ``infermeter simulate`` with
the commands in ``CASES``: first at commit dee2cbe, before the summary builders were merged into
one accumulator (issue 17; the figures held through that refactor), then again when the
performance model was refitted on the enlarged corpus (issue 14 changes the predicted step times
on purpose: TTFT p50 of the 5 req/s case 70.8 -> 60.3 ms), and ``sim-closed-c16`` once more when
the corpus gained the TensorRT-LLM v0.10/v0.11 A100 70B rows (branch corpus3: the Ampere serving-group
FP16 efficiencies it draws on were refitted; TPOT p50 12.04 -> 13.14 ms, duration 157.5 -> 175.2 s;
the two H100 cases did not change), and the two chat cases once more when the prompts' openings were made
truly distinct (issue 16: `workload/compose.py` had repeated a few openings; the chat text changed, and
with it a few character-chunk keys: TTFT p50 60.35 -> 60.62 ms and 42,691 -> 42,602 ms, prefix hit rate
72.10 -> 72.10 % and 71.81 -> 71.87 %), and all three when issue 29 refitted the model on 258 rows with vLLM's own
H100 rows (vLLM on Hopper no longer borrows TensorRT-LLM's efficiencies: its step times rose 8-15 %, and its fitted
per-request floor is 49.8 ms: TTFT p50 of the 5 req/s case 60.6 -> 132.4 ms, TPOT p50 28.9 -> 48.9 ms near that
profile's capacity; the 10 req/s case completes 1,463 of 1,500 before their timeouts; c16 TPOT 13.14 -> 14.70 ms),
and all three when issue 29's third round refitted it on 301 rows with its new terms (length distributions, vLLM V0's
per-sequence and TP-broadcast costs, MXFP4 experts keyed apart: gpt-oss no longer pulls A100 vLLM BF16 down, and the
vLLM per-request floor is 46.7 ms): 5 req/s TTFT p50 132.4 -> 119.6 ms, TPOT p50 48.9 -> 41.7 ms; the 10 req/s case
completes all 1,500 (1,463 before); c16 TPOT p50 14.70 -> 12.18 ms, duration 195.0 -> 169.5 s.
Then all three again when the MoE round refitted it on 334 rows (the tektonc rate calibration's dense vLLM 0.15.1
H100/L40S rows join the Hopper vLLM fit, and MoE rows no longer fit dense values: TTFT p50 of the 5 req/s case
119.6 -> 123.3 ms, TPOT p50 41.7 -> 42.1 ms; c16 TPOT 12.18 -> 12.16 ms), and ``sim-closed-c16`` once more when
issue 29's fourth round refitted it on 395 rows (blind set 2 folded in; its ROCm and H200 dense rows move the Ampere
serving-group fit a little: c16 TPOT p50 12.16 -> 12.23 ms, duration 169.6 -> 170.2 s; the H100 cases' figures did
not change, only their interval bands, which this test does not compare), and two of them again when vLLM V1's
limits were made to follow the device in the model and in the twin's scheduler (``perfmodel.engines.hardware_limits``:
an A100 gets vLLM's 2048-token budget, an H100 1024 sequences): c16 on the A100 TPOT p50 12.23 -> 13.79 ms, TTFT p50
716.3 -> 525.2 ms, duration 170.2 -> 170.8 s; the saturated 10 req/s H100 case TPOT p50 64.3 -> 89.5 ms, TTFT p50
49.4 -> 34.2 s, 3,857 -> 3,730 tok/s; the 5 req/s case (never above 256 sequences) unchanged; and all three when issue 29's
fifth round refitted the model on 469 rows (blind set 3 folded in: GPUStack's H100 vLLM pages join the Hopper vLLM BF16
fit; its new terms; each row weighted 1/sqrt(rows of its publication)): 5 req/s TTFT p50 123.3 -> 150.8 ms, TPOT p50
42.1 -> 57.3 ms; 10 req/s TTFT p50 34.2 -> 40.8 s, TPOT p50 89.5 -> 99.3 ms; c16 on the A100 TTFT p50 525.2 ->
328.9 ms, TPOT p50 13.79 -> 16.75 ms; and all three when its sixth round refitted it on 548 rows (blind set 4 folded
in, with the run-in-waves and MLA prefill fixes): 5 req/s TTFT p50 150.8 -> 153.2 ms, TPOT p50 57.3 -> 59.0 ms; 10 req/s
TTFT p50 40.82 -> 40.81 s, TPOT p50 99.3 -> 99.4 ms; c16 on the A100 TTFT p50 328.9 -> 371.9 ms, TPOT p50 16.75 ->
17.38 ms (blind set 4's GPUStack Qwen3-14B A100 rows join the Ampere vLLM BF16 fit); and all three when its seventh
round refitted it on 600 rows with Huber's loss (blind set 5 folded in; a publication far off no longer pulls the shared
Ampere vLLM BF16 values as hard): 5 req/s TTFT p50 153.2 -> 154.5 ms, TPOT p50 59.0 -> 58.6 ms; 10 req/s TTFT p50
40.81 -> 41.12 s, TPOT p50 99.4 -> 100.2 ms; c16 on the A100 TTFT p50 371.9 -> 457.2 ms, TPOT p50 17.38 -> 13.17 ms;
and all three when its eighth round refitted it on 705 rows (blind sets 6 and 7 folded in: vLLM issues, an inference
benchmark and GPUStack's GLM page join the Hopper vLLM BF16 fit, decode efficiency 0.708 -> 0.640): 5 req/s TTFT p50
154.5 -> 187.3 ms, TPOT p50 58.6 -> 80.1 ms (near the chat profile's capacity a slower step queues more); 10 req/s
TTFT p50 41.12 -> 45.65 s, TPOT p50 100.2 -> 105.7 ms; c16 on the A100 TTFT p50 457.2 -> 458.9 ms, TPOT p50 13.17 ->
13.33 ms; and all three when its ninth round refitted it on 762 rows (blind set 8 folded in): 5 req/s TPOT p50 80.07 ->
79.32 ms; 10 req/s TTFT p50 45.65 -> 45.52 s, TPOT p50 105.7 -> 105.5 ms; c16 on the A100 TTFT p50 458.9 -> 459.1 ms,
TPOT p50 13.33 -> 13.22 ms; and all three when its eleventh round refitted it on 818 rows (blind sets 9 and 10 folded
in, and the eager-launch term, which no case here pays): 5 req/s TTFT p50 188.9 -> 172.5 ms, TPOT p50 79.32 -> 75.13 ms;
10 req/s TTFT p50 45.52 -> 44.44 s, TPOT p50 105.5 -> 104.1 ms, 1,194 -> 1,209 completed; c16 on the A100 TTFT p50
459.1 -> 460.7 ms, TPOT p50 13.22 -> 12.77 ms; and all three when its twelfth round refitted it on 865 rows (blind set 11
folded in; the NCCL term touches no case here): 5 req/s TTFT p50 172.5 -> 174.3 ms, TPOT p50 75.13 -> 75.07 ms; 10 req/s
TTFT p50 44.44 -> 43.87 s, 1,209 -> 1,208 completed; c16 on the A100 TTFT p50 460.7 -> 462.5 ms, TPOT p50 12.77 ->
13.31 ms (blind set 11's A100 rows, a Qwen2.5-7B sweep and Mixtral-8x22B, join the Ampere vLLM fit); and all three
when its thirteenth round refitted it on 906 rows (blind set 12 folded in; the output cap touches no case here): 5 req/s
TTFT p50 174.3 -> 173.2 ms, TPOT p50 75.07 -> 76.70 ms; 10 req/s TTFT p50 43.87 -> 44.61 s, 1,208 -> 1,206 completed;
c16 on the A100 TTFT p50 462.5 -> 472.2 ms, TPOT p50 13.31 -> 13.12 ms (blind set 12's France-Travail and staru09 A100
rows join the Ampere vLLM fit); and all three when its fourteenth round refitted it on 948 rows (blind set 13 and its
capped rows folded in; the network term touches no case here): 5 req/s TTFT p50 173.2 -> 163.0 ms, TPOT p50 76.70 ->
69.26 ms; 10 req/s TTFT p50 44.61 -> 42.99 s, 1,206 -> 1,274 completed; c16 on the A100 TTFT p50 472.2 -> 468.3 ms,
TPOT p50 13.12 -> 13.27 ms (AccelMark's and CloudRift's rows join the Hopper and Ampere vLLM fits); and all three when
its fifteenth round refitted it on 979 rows (blind set 14 and its capped rows folded in; the lockstep closed loop, a
term of the performance model's closed loop that the twin's own scheduler already shows): 5 req/s TTFT p50 163.0 ->
161.4 ms, TPOT p50 69.26 -> 69.33 ms; 10 req/s TTFT p50 42.99 -> 43.06 s, 1,274 -> 1,276 completed; c16 on the A100
TTFT p50 468.3 -> 437.3 ms, TPOT p50 13.27 -> 13.36 ms.
Regenerate them only for a deliberate
change of the model, and say so. Every figure those files hold (counts, throughputs, every
statistic of every distribution, token totals, server metrics) must come out the same; what the
verdict says about the run (``valid``, reasons, warnings, and keys added since) may grow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parents[1] / "data" / "golden"

CASES = {
    "sim-open-5rps": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "5", "--requests", "1500",
                      "--seed", "7", "--profile", "chat", "--slo", "ttft_ms=500,tpot_ms=50"],
    "sim-open-10rps-saturated": ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "10", "--requests", "1500",
                                 "--seed", "7", "--profile", "chat", "--slo", "ttft_ms=500,tpot_ms=50"],
    "sim-closed-c16": ["--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--concurrency", "16", "--requests", "1200",
                       "--seed", "3", "--input-tokens", "512", "--output-tokens", "128"],
}

# What a run says about itself, not what it measured: allowed to change (schema 2 added keys, and
# the verdict learned new rules in issue 13).
VERDICT_KEYS = {"schema_version", "valid", "invalid_reasons", "warnings", "run_dir", "label", "summary_method",
                # issue 14: the bands around the figures (tests/twin/test_prediction_intervals.py checks them)
                "prediction_intervals"}
# Issue 16: the twin reports its waiting queue over the first and last tenth of the run
# (server_metrics num_requests_waiting_start/_end), which the verdict reads as saturation evidence:
# the verdict's copy of them, its evidence and its findings may say more than the files.
VERDICT_PATHS = {"findings", "saturation.waiting_start", "saturation.waiting_end", "saturation.evidence",
                 # the verdict's completion rate is measured between the earliest- and latest-intended
                 # completions (analysis.accumulator._Edges), no longer between the extreme completion times
                 "saturation.completion_rate", "saturation.rate_ratio"}


def _figures(d: object, prefix: str = "") -> dict[str, object]:
    """Flatten a summary into path -> leaf value."""
    out: dict[str, object] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_figures(v, f"{prefix}{k}."))
    else:
        out[prefix.rstrip(".")] = d
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulated_summary_matches_golden(name, tmp_path, cli):
    out = tmp_path / name
    p = cli("simulate", *CASES[name], "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    got = _figures(json.loads((out / "summary.json").read_text()))
    want = _figures(json.loads((GOLDEN / f"{name}.summary.json").read_text()))
    compared = 0
    for key, value in want.items():
        if key.split(".")[0] in VERDICT_KEYS or key in VERDICT_PATHS:
            continue
        assert key in got, f"{name}: {key} missing"
        if isinstance(value, float) and isinstance(got[key], float):
            assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), (name, key, got[key], value)
        else:
            assert got[key] == value, (name, key, got[key], value)
        compared += 1
    assert compared > 80  # the figures, not just a few keys
    sm = json.loads((out / "summary.json").read_text())["server_metrics"]
    assert got["saturation.waiting_end"] == sm["num_requests_waiting_end"] is not None
    if name == "sim-open-10rps-saturated":  # the queue grew: one more piece of evidence
        assert any("waiting queue grew" in e for e in json.loads((out / "summary.json").read_text())["saturation"]
                   ["evidence"])
