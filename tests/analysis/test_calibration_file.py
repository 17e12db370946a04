"""``calibrate``: runs of one deployment in, a calibration file out that the twin reads back.

The runs here are simulated on a linear engine of known timing and relabelled as measured (with the
vLLM ``cache_config_info`` a scrape would have kept), so the fitted numbers can be checked exactly.
"""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from infermeter.errors import ConfigError
from infermeter.measure.calibrate import calibrate, simulated_like
from infermeter.measure.feeder import local_stream
from infermeter.measure.simulate import simulate
from infermeter.twin.calibration import DeploymentCalibration, calibrated_twin
from infermeter.twin.deploy import fake_twin
from infermeter.twin.config import EngineConfig
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.sources import ClosedLoopSource
from infermeter.workload import build_workload

TRUE = LinearStepTime(base_s=0.013, per_token_s=0.0005, per_seq_s=0.0008)
INFO = {"block_size": "128", "kv_cache_size_tokens": "93184", "enable_prefix_caching": "True"}


def measured_like(tmp_path, concurrency, n, name, frontend=(0.03, 0.0), predictor=TRUE, model="m"):
    """A closed-loop run of the ``predictor`` engine behind a front end of (fixed cost, serial work) seconds,
    serving ``model``, as if measured."""
    work = build_workload(input_tokens="128", output_tokens="64,16", seed=concurrency)
    twin = fake_twin(predictor=predictor, engine=EngineConfig(frontend_overhead_s=frontend[0], frontend_service_s=frontend[1]))
    src = ClosedLoopSource(concurrency, local_stream(None, iter(work.requests()), keys=False), requests=n)
    config = {"concurrency": concurrency, "requests": n, "input_tokens": "128", "output_tokens": "64,16",
              "seed": concurrency, "model": model}
    run = {"load": {"open_loop": False, "describe": f"closed loop, concurrency {concurrency}"}, "model": model,
           "config": config}
    res = simulate(twin, src, out_dir=tmp_path / name, run=run, token_times=True)
    head = json.loads((res.run_dir / "run.json").read_text())
    head.update(source="measured", target={"url": "http://127.0.0.1:8000"}, server_metrics={"engine": "vllm"})
    (res.run_dir / "run.json").write_text(json.dumps(head))
    pq.write_table(pa.table({"t": [0.0], "name": ["vllm:cache_config_info"], "labels": [json.dumps(INFO)],
                             "value": [1.0]}), res.run_dir / "server_metrics_raw.parquet")
    return res.run_dir


def test_a_calibration_recovers_the_engine_and_reads_back(tmp_path):
    dirs = [measured_like(tmp_path, 1, 20, "c1"), measured_like(tmp_path, 4, 40, "c4")]
    cal = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu")
    assert cal.step_time.base_s == pytest.approx(0.013, rel=0.03)
    assert cal.step_time.per_token_s == pytest.approx(0.0005, rel=0.03)
    assert cal.frontend.overhead_s == pytest.approx(0.03, abs=0.003)
    assert (cal.engine.block_size, cal.engine.kv_capacity_tokens, cal.engine.max_num_seqs) == (128, 93184, 128)
    assert "cache_config_info" in cal.engine.source and "vllm-cpu defaults" in cal.engine.source
    # simulated back, the fit reproduces its own runs
    for check in cal.checks:
        assert abs(check["tpot_p50_err_pct"]) < 3 and abs(check["output_tokens_per_s_err_pct"]) < 3, check
    path = cal.write(tmp_path / "cal.yaml")
    back = DeploymentCalibration.read(path)
    assert back == cal
    twin = calibrated_twin(back, max_num_seqs=8)
    assert twin.config.max_num_seqs == 8 and twin.predictor.step_time(10, 0, 2) == pytest.approx(
        cal.step_time.base_s + 10 * cal.step_time.per_token_s + 2 * cal.step_time.per_seq_s)


def test_a_sub_millisecond_serial_front_end_is_fitted_and_splits_the_first_wave(tmp_path):
    # vLLM CPU here: 0.9 ms before the engine for a request alone, and four sent at once reach the engine one
    # after another, so the first is prefilled alone and the other three wait for that step (1 + 3). A service
    # time could once only be carved out of the fixed cost in whole milliseconds: this one fitted 0 and the twin
    # prefilled all four together (the right TTFT p50 at c4 by chance; a 512-token mix then missed by 35 %).
    front = (0.0004, 0.0005)
    dirs = [measured_like(tmp_path, 1, 20, "c1", front), measured_like(tmp_path, 4, 40, "c4", front)]
    cal = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu")
    assert cal.frontend.service_s > 0, cal.frontend
    assert cal.frontend.service_s + cal.frontend.overhead_s == pytest.approx(sum(front), abs=0.0002)
    assert "serial service time" in cal.fit.frontend_basis and "more than measured" not in cal.fit.frontend_basis
    c4 = next(c for c in cal.checks if c["run_dir"].endswith("c4"))
    assert abs(c4["ttft_p50_err_pct"]) < 3, c4
    # the split itself, in the "measured" run and simulated back: the first request of the first wave alone
    simulated_like(cal, dirs[1], tmp_path / "back")
    for run in (dirs[1], tmp_path / "back"):
        t = pq.read_table(run / "requests.parquet").to_pydict()
        wave = sorted(zip(t["sent_at"], t["first_token_at"]))[:4]
        ttft = [f - s for s, f in wave]
        assert ttft[0] < 0.5 * min(ttft[1:]), (run, ttft)


def test_one_length_mix_bounds_the_context_cost_from_the_architecture(tmp_path):
    from infermeter.errors import ConfigError
    from infermeter.measure.calibrate import context_cost
    from infermeter.perfmodel.models import get_model

    spec = get_model("smollm2")  # the name vLLM CPU serves SmolLM2-135M under here (a catalog alias)
    per_kv = context_cost(0.013, spec)  # 13 ms x 11,520 K/V elements per token / 134.5 M streamed weights
    assert per_kv == pytest.approx(0.013 * 11520 / 134_515_008)
    true = LinearStepTime(base_s=0.013, per_token_s=0.0005, per_seq_s=0.0008, per_kv_token_s=per_kv)
    dirs = [measured_like(tmp_path, c, n, f"c{c}", predictor=true, model="smollm2") for c, n in ((1, 20), (4, 40))]
    cal = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu")
    # one length mix: the term is not fitted but estimated; the fixed point of base and context cost recovers
    # all three (without it the context's cost lands in the per-sequence term: ~1.0 ms instead of 0.8)
    assert cal.step_time.per_kv_token_s == pytest.approx(per_kv, rel=0.05)
    assert cal.step_time.base_s == pytest.approx(0.013, rel=0.05)
    assert cal.step_time.per_seq_s == pytest.approx(0.0008, rel=0.1)
    assert "estimated from smollm2-135m's architecture" in cal.fit.context_basis
    assert "per_kv_token_s" not in cal.fit.dropped and not cal.fit.warnings  # the estimate fits these runs
    assert cal.fit.residuals["median_abs_pct"] < 3  # over the measured step lengths, the context term included
    # a model the catalog does not know: left out, and said so; one asked for by name must exist
    other = calibrate([measured_like(tmp_path, c, n, f"m{c}") for c, n in ((1, 20), (4, 40))], engine="vllm-cpu")
    assert other.step_time.per_kv_token_s == 0 and "per_kv_token_s" in other.fit.dropped
    assert other.fit.context_basis.startswith("not identifiable")
    with pytest.raises(ConfigError, match="no-such-model"):
        calibrate(dirs, engine="vllm-cpu", model_spec="no-such-model")


def test_bad_calibration_files_name_the_file_the_line_and_the_field(tmp_path):
    p = tmp_path / "cal.yaml"
    p.write_text("kind: infermeter-calibration\nschema_version: 1\ndeployment: {model: m, hardware: h, engine: e}\n"
                 "step_time:\n  base_s: -1\n  per_token_s: 0.001\nengine: {max_num_seqs: 8, max_num_batched_tokens: 64,"
                 " kv_capacity_tokens: 1000}\n")
    with pytest.raises(ConfigError, match=r"cal.yaml, line 5: step_time.base_s: Input should be greater than or equal"):
        DeploymentCalibration.read(p)
    p.write_text("kind: something-else\n")
    with pytest.raises(ConfigError, match="not an infermeter calibration file"):
        DeploymentCalibration.read(p)


def test_only_measured_runs_of_one_deployment_calibrate(tmp_path):
    a = measured_like(tmp_path, 1, 10, "a")
    b = measured_like(tmp_path, 4, 20, "b")
    head = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**head, "target": {"url": "http://elsewhere:1"}}))
    with pytest.raises(ConfigError, match="different deployments"):
        calibrate([a, b])
    (a / "run.json").write_text(json.dumps({**json.loads((a / "run.json").read_text()), "source": "simulated"}))
    with pytest.raises(ConfigError, match="measured runs only"):
        calibrate([a])


def test_simulate_with_a_calibration_just_works(tmp_path, cli):
    dirs = [measured_like(tmp_path, 1, 20, "c1"), measured_like(tmp_path, 4, 40, "c4")]
    cal = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu")
    path = cal.write(tmp_path / "cal.yaml")
    out = tmp_path / "sim"
    p = cli("simulate", "--calibration", str(path), "--concurrency", "8", "--input-tokens", "128", "--output-tokens",
            "32", "--requests", "40", "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    s, run = json.loads((out / "summary.json").read_text()), json.loads((out / "run.json").read_text())
    assert s["completed"] == 40 and s["hardware"] == "test-cpu" and s["source"] == "simulated"
    emulated = run["target"]["emulated"]
    assert emulated["calibrated"] is True and emulated["step_time"]["base_s"] == pytest.approx(cal.step_time.base_s)
    # a decode step of 8 sequences: the calibrated base + 8 x (per token + per sequence)
    tpot = cal.step_time.base_s + 8 * (cal.step_time.per_token_s + cal.step_time.per_seq_s)
    assert s["tpot_ms"]["p50"] == pytest.approx(tpot * 1000, rel=0.15)
    wrong = cli("simulate", "--calibration", str(path), "--model", "llama-3.1-70b", "--requests", "5",
                "--out", str(tmp_path / "x"))
    assert wrong.returncode == 2 and "calibrates m on test-cpu, not --model llama-3.1-70b" in wrong.stderr
    # the calibration saw batches of at most 4: a batch of 8 is extrapolated, and the run says so
    assert cal.fit.max_seqs == 4
    extrapolated = [f for f in s["findings"] if f["code"] == "extrapolated"]
    assert extrapolated and "reached 8 sequences" in extrapolated[0]["message"] and "at most 4" in extrapolated[0]["message"]
    # beyond the calibrated batches no band is given, and the run says why
    pi = s["prediction_intervals"]["tpot_ms"]
    assert "lo" not in pi and pi["why"].startswith("extrapolated")


def test_a_prediction_inside_the_calibrated_batches_is_not_flagged(tmp_path):
    from infermeter.measure.calibrate import simulated_like

    dirs = [measured_like(tmp_path, 1, 20, "c1"), measured_like(tmp_path, 4, 40, "c4")]
    cal = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu", check=False)
    s = simulated_like(cal, dirs[1], tmp_path / "c2", concurrency=2, requests=20)
    assert s.completed == 20 and "extrapolated" not in [f.code for f in s.findings]
    # its figures carry 80% bands, on the basis of a calibrated deployment
    pi = s.prediction_intervals["tpot_ms"]
    assert pi["lo"] < s.tpot_ms.p50 == pi["value"] < pi["hi"] and "calibrated deployment" in pi["basis"]
    # one length mix (128 in): the context term is not identifiable, and calibrate leaves it out
    assert cal.step_time.per_kv_token_s == 0.0 and "per_kv_token_s" in cal.fit.dropped


def test_the_context_term_is_fitted_only_when_two_length_mixes_tell_it_apart(tmp_path):
    from infermeter.analysis.stepfit import engine_steps, fit_linear

    kv_engine = LinearStepTime(base_s=0.010, per_token_s=0.0004, per_kv_token_s=4e-6)

    def run(inp, name):
        work = build_workload(input_tokens=inp, output_tokens="48", seed=3)
        src = ClosedLoopSource(4, local_stream(None, iter(work.requests()), keys=False), requests=24)
        res = simulate(fake_twin(predictor=kv_engine), src, out_dir=tmp_path / name, token_times=True,
                       run={"load": {"open_loop": False}, "model": "m", "config": {}})
        return pq.read_table(res.run_dir / "requests.parquet")

    short, long = run("128", "short"), run("1536", "long")
    both = fit_linear(engine_steps([short, long]))
    assert both.per_kv_token_s == pytest.approx(4e-6, rel=0.15)
    # four decoding sequences at 1,600 tokens of context each: the step the engine takes
    assert float(both.predict(4, 4, 6400)) == pytest.approx(kv_engine.step_time(4, 6400, 4), rel=0.03)
    # one mix alone: context per sequence hardly varies, and calibrate leaves the term out
    steps = engine_steps([short])
    ctx = steps.kv_tokens / steps.num_seqs
    assert ctx.std() < 0.2 * ctx.mean()


def test_plan_with_a_calibration_simulates_the_calibrated_deployment(tmp_path, cli):
    dirs = [measured_like(tmp_path, 1, 20, "c1"), measured_like(tmp_path, 4, 40, "c4")]
    path = calibrate(dirs, engine="vllm-cpu", hardware="test-cpu", check=False).write(tmp_path / "cal.yaml")
    p = cli("plan", "--calibration", str(path), "--input-tokens", "128", "--output-tokens", "32", "--concurrency", "2",
            "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    plan = json.loads(p.stdout)
    assert plan["model"] == "m" and plan["hardware"] == "test-cpu" and plan["kv_capacity_tokens"] == 93184
    # two users decode together: TPOT is the true engine's step of two sequences (its context term is 0)
    assert plan["tpot_ms"] == pytest.approx(1000 * TRUE.step_time(2, 0, 2), rel=0.05)
    lo, hi = plan["intervals"]["tpot_ms"]
    assert lo < plan["tpot_ms"] < hi
    # saturation: the engine's 128-sequence batch, far beyond the 4 the calibration saw: said, and not banded
    assert plan["saturation_concurrency"] == 128 and plan["saturation_output_tokens_per_s"] > plan["output_tokens_per_s"]
    assert any("reached 128 sequences" in n for n in plan["notes"])
    assert "saturation_output_tokens_per_s" not in plan["intervals"]
    ignored = cli("plan", "--calibration", str(path), "--tp", "2", "--dtype", "fp8")
    assert ignored.returncode == 2 and "drop --tp, --dtype" in ignored.stderr
    wrong = cli("plan", "--calibration", str(path), "--model", "llama-3.1-8b")
    assert wrong.returncode == 2 and "calibrates m, not --model llama-3.1-8b" in wrong.stderr


def test_the_context_estimate_needs_a_base_step_to_scale():
    import numpy as np

    from infermeter.analysis.stepfit import Steps
    from infermeter.measure.calibrate import fit_with_context_estimate
    from infermeter.perfmodel.models import get_model

    n = np.array([1, 2, 4, 8, 1, 4] * 20, dtype=float)
    ctx = n * 200.0
    spec = get_model("smollm2")
    no_base = Steps(duration_s=0.002 * n, new_tokens=n, num_seqs=n, prefills=np.zeros_like(n), kv_tokens=ctx)
    assert fit_with_context_estimate(no_base, spec) is None  # a step of nothing but per-token cost: nothing to scale
    with_base = Steps(duration_s=0.010 + 0.002 * n, new_tokens=n, num_seqs=n, prefills=np.zeros_like(n), kv_tokens=ctx)
    got = fit_with_context_estimate(with_base, spec)
    assert got is not None and got.per_kv_token_s == pytest.approx(got.base_s * 11520 / 134_515_008, rel=0.01)
