"""Engine steps recovered from the client's records, and the linear step-time fit, on runs of known timing."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from infermeter.analysis.stepfit import engine_steps, fit_linear, frontend_overhead
from infermeter.errors import DataError
from infermeter.measure.feeder import local_stream
from infermeter.measure.simulate import simulate
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.sources import ClosedLoopSource
from infermeter.workload import build_workload

TRUE = LinearStepTime(base_s=0.013, per_token_s=0.0005, per_seq_s=0.0008)


def _run(tmp_path, concurrency, n, name, overhead=0.0, input_tokens="128", output_tokens="64,16"):
    work = build_workload(input_tokens=input_tokens, output_tokens=output_tokens, seed=concurrency)
    twin = fake_twin(predictor=TRUE)
    twin = type(twin)(**{**twin.__dict__, "request_overhead_s": overhead}) if overhead else twin
    src = ClosedLoopSource(concurrency, local_stream(None, iter(work.requests()), keys=False), requests=n)
    res = simulate(twin, src, out_dir=tmp_path / name, run={"load": {"open_loop": False}}, token_times=True)
    return pq.read_table(res.run_dir / "requests.parquet")


def test_the_fit_recovers_the_engines_step_time_from_two_concurrencies(tmp_path):
    steps = engine_steps([_run(tmp_path, 1, 20, "c1"), _run(tmp_path, 4, 40, "c4")])
    assert steps.n > 500 and steps.prefills.sum() > 0  # decode steps, and steps with a prefill inside
    fit = fit_linear(steps, kv=False)  # one length mix: the context term is not identifiable (calibrate leaves it out)
    assert fit.base_s == pytest.approx(TRUE.base_s, rel=0.02)
    assert fit.per_token_s == pytest.approx(TRUE.per_token_s, rel=0.02)
    assert fit.per_seq_s == pytest.approx(TRUE.per_seq_s, rel=0.05)
    assert fit.residuals["median_abs_pct"] < 1.0 and fit.dropped == ()


def test_the_front_end_overhead_is_what_the_engine_never_saw(tmp_path):
    table = _run(tmp_path, 1, 20, "c1o", overhead=0.040)
    fit = fit_linear(engine_steps([table, _run(tmp_path, 4, 40, "c4o")]))
    assert frontend_overhead(table, fit) == pytest.approx(0.040, abs=0.003)


def test_one_batch_shape_cannot_tell_the_coefficients_apart(tmp_path):
    fit = fit_linear(engine_steps(_run(tmp_path, 1, 10, "only1")))
    # every back-to-back step is one decode of one sequence: base, token and sequence costs are one number
    assert len(fit.dropped) == 2
    assert fit.predict(1, 1) == pytest.approx(TRUE.step_time(1, 0, 1), rel=0.01)


def test_records_without_token_times_are_a_clear_error(tmp_path):
    from infermeter.records.record import RequestRecord, records_to_table

    t = records_to_table([RequestRecord(request_id=0, sent_at=0.0, first_token_at=0.1, ended_at=0.2, prompt_tokens=5,
                                        completion_tokens=2)])
    with pytest.raises(DataError, match="per-token times"):
        engine_steps(t)


def test_steps_stretched_by_a_noisy_neighbour_do_not_bend_the_fit(tmp_path):
    from infermeter.analysis.stepfit import Steps

    steps = engine_steps([_run(tmp_path, 1, 20, "n1"), _run(tmp_path, 4, 40, "n4")])
    rng = np.random.default_rng(0)
    hit = rng.random(steps.n) < 0.1  # one step in ten lost its core for 5-30 ms
    noisy = Steps(steps.duration_s + hit * rng.uniform(0.005, 0.030, steps.n), steps.new_tokens, steps.num_seqs,
                  steps.prefills, steps.kv_tokens)
    fit = fit_linear(noisy, kv=False)
    assert fit.base_s == pytest.approx(TRUE.base_s, rel=0.03)
    assert fit.per_token_s == pytest.approx(TRUE.per_token_s, rel=0.03)
    assert fit.per_seq_s == pytest.approx(TRUE.per_seq_s, rel=0.10)
    assert fit.residuals["outliers"] >= 0.8 * hit.sum()
