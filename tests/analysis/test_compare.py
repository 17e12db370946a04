"""compare: per-request metrics, the closed-form bootstrap, and regression verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infermeter.analysis.compare import (
    METRICS,
    RequestArrays,
    _bootstrap,
    compare_runs,
    per_request_metrics,
)
from infermeter.records.record import rows_to_table


def synthetic(n: int, seed: int, ttft_scale: float = 1.0, tokens_scale: float = 1.0, error_rate: float = 0.0) -> RequestArrays:
    rng = np.random.default_rng(seed)
    error = rng.random(n) < error_rate
    ok = ~error
    sent = np.arange(n) / 20.0
    ttft = rng.lognormal(np.log(0.2 * ttft_scale), 0.4, n)
    tpot = rng.lognormal(np.log(0.02), 0.2, n)
    tokens = np.round(rng.integers(50, 300, n) * tokens_scale)
    first, end = sent + ttft, sent + ttft + tpot * (tokens - 1)
    nan = np.nan
    return RequestArrays(
        ok=ok, error=error, sent_at=sent, first_token_at=np.where(ok, first, nan), ended_at=end,
        ttft_ms=np.where(ok, ttft * 1e3, nan), tpot_ms=np.where(ok, tpot * 1e3, nan),
        e2e_ms=np.where(ok, (end - sent) * 1e3, nan), output_tokens=np.where(ok, tokens, 0.0),
    )


def run(base: RequestArrays, cand: RequestArrays, **kw):
    return compare_runs(base, cand, base_duration_s=100.0, cand_duration_s=100.0, rng=np.random.default_rng(1), **kw)


def verdicts(result) -> dict[str, str]:
    return {c.spec.name: c.verdict for c in result.changes}


def test_per_request_metrics_from_records():
    table = rows_to_table([
        {"request_id": 0, "phase": "warmup", "outcome": "ok", "sent_at": 0.0, "first_token_at": 0.5, "ended_at": 1.0,
         "completion_tokens": 5},
        {"request_id": 1, "phase": "measure", "outcome": "ok", "sent_at": 1.0, "first_token_at": 1.25, "ended_at": 2.25,
         "completion_tokens": 5},
        {"request_id": 2, "phase": "measure", "outcome": "ok", "sent_at": 2.0, "first_token_at": 2.1, "ended_at": 2.1,
         "completion_tokens": 1},
        {"request_id": 3, "phase": "measure", "outcome": "error", "sent_at": 3.0, "ended_at": 3.5},
        {"request_id": 4, "phase": "measure", "outcome": "dropped"},
    ])
    m = per_request_metrics(table)
    assert m.n == 4  # the warmup row is left out
    assert m.ok.tolist() == [True, True, False, False]
    assert m.error.tolist() == [False, False, True, False]
    assert m.ttft_ms[:2] == pytest.approx([250.0, 100.0])
    assert m.e2e_ms[:2] == pytest.approx([1250.0, 100.0])
    assert m.tpot_ms[0] == pytest.approx(250.0)  # (2.25 - 1.25) s / (5 - 1)
    assert math.isnan(m.tpot_ms[1])  # one token: no TPOT
    assert np.isnan(m.ttft_ms[2:]).all()
    assert m.output_tokens.tolist() == [5.0, 1.0, 0.0, 0.0]


def test_quantile_bootstrap_matches_explicit_resampling():
    """The Beta order-statistic draw equals resampling with replacement (fast path vs slow reference)."""
    values = np.random.default_rng(3).lognormal(0, 1, 40)
    spec = METRICS["ttft_p95_ms"]
    fast = _bootstrap(spec, values, 1.0, 40_000, np.random.default_rng(4))
    rng = np.random.default_rng(5)
    resampled = values[rng.integers(0, values.size, size=(40_000, values.size))]
    slow = np.quantile(resampled, 0.95, axis=1, method="inverted_cdf")
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        assert np.quantile(fast, q) == pytest.approx(np.quantile(slow, q), rel=0.03)


def test_noise_passes():
    for seed in (0, 10, 20):
        result = run(synthetic(2000, seed), synthetic(2000, seed + 1))
        assert not result.regressed, [(c.spec.name, c.change, c.ci_low) for c in result.changes]


def test_real_ttft_regression_fails_and_names_the_metrics():
    result = run(synthetic(2000, 0), synthetic(2000, 1, ttft_scale=1.3))
    v = verdicts(result)
    assert result.regressed
    assert v["ttft_p50_ms"] == v["ttft_p95_ms"] == "regression"
    assert v["tpot_p50_ms"] != "regression"  # TPOT did not change
    ttft = next(c for c in result.changes if c.spec.name == "ttft_p50_ms")
    assert ttft.ci_low > 0.05 and ttft.ci_low < 0.3 < ttft.ci_high
    assert ttft.change == pytest.approx(0.3, abs=0.08)


def test_throughput_drop_is_a_regression_and_a_rise_an_improvement():
    base = synthetic(3000, 0)
    assert verdicts(run(base, synthetic(3000, 1, tokens_scale=0.8)))["output_tokens_per_s"] == "regression"
    assert verdicts(run(base, synthetic(3000, 1, tokens_scale=1.25)))["output_tokens_per_s"] == "improvement"


def test_error_rate_uses_percentage_points():
    base = synthetic(3000, 0)
    bad = run(base, synthetic(3000, 1, error_rate=0.1))
    err = next(c for c in bad.changes if c.spec.name == "error_rate")
    assert err.verdict == "regression"
    assert err.baseline == 0.0 and err.candidate == pytest.approx(10.0, abs=1.5)  # percent
    assert err.change == pytest.approx(0.1, abs=0.015) and not err.relative
    small = run(base, synthetic(3000, 1, error_rate=0.003), error_threshold=0.01)
    assert verdicts(small)["error_rate"] != "regression"


def test_latency_improvement_is_not_a_regression():
    result = run(synthetic(2000, 0, ttft_scale=1.5), synthetic(2000, 1))
    assert verdicts(result)["ttft_p50_ms"] == "improvement"
    assert not result.regressed


def test_missing_data_and_bad_arguments():
    empty = synthetic(10, 0, error_rate=1.0)  # nothing completed
    result = run(empty, synthetic(10, 1), metrics=("ttft_p50",))  # an old spelling: an alias of ttft_p50_ms
    assert result.changes[0].verdict == "no data" and result.changes[0].baseline is None
    with pytest.raises(ValueError, match="unknown metric"):
        run(synthetic(10, 0), synthetic(10, 1), metrics=("ttft_p42",))
    with pytest.raises(ValueError, match="confidence"):
        run(synthetic(10, 0), synthetic(10, 1), confidence=1.5)


def test_a_percentile_with_fewer_samples_than_the_summary_needs_is_not_compared():
    """40 requests: p50/p95 compare (their floors are 1 and 20), p99 is left empty like summary.json leaves it,
    even though the candidate is 3x slower; at 100 requests p99 is compared and regresses."""
    few = run(synthetic(40, 0), synthetic(40, 1, ttft_scale=3.0), metrics=("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms"))
    v = verdicts(few)
    assert v["ttft_p50_ms"] == v["ttft_p95_ms"] == "regression"
    p99 = next(c for c in few.changes if c.spec.name == "ttft_p99_ms")
    assert (p99.verdict, p99.baseline, p99.candidate, p99.n_baseline) == ("too few samples", None, None, 40)
    enough = run(synthetic(100, 0), synthetic(100, 1, ttft_scale=3.0), metrics=("ttft_p99_ms",))
    assert verdicts(enough)["ttft_p99_ms"] == "regression"
