"""Runs are easy to tell apart: default labels carry what differs; compare never reads "X vs X"
and calls no difference below the minimum effect a finding."""

import json

import numpy as np

from infermeter.analysis.compare import RequestArrays, compare_runs


def _run(cli, url, out, *args):
    p = cli("run", "--url", url, "--requests", "12", "--output-tokens", "4", "--out", str(out), *args)
    assert p.returncode == 0, p.stderr
    return json.loads((out / "summary.json").read_text())["label"]


def test_default_labels_carry_target_load_and_lengths_and_compare_names_both(emulator, cli, tmp_path):
    host = emulator.base_url.removeprefix("http://")
    a = _run(cli, emulator.base_url, tmp_path / "a", "--concurrency", "2", "--input-tokens", "50")
    b = _run(cli, emulator.base_url, tmp_path / "b", "--rate", "20", "--input-tokens", "80")
    assert a == f"infermeter-emulator {host} c2 in50-out4"
    assert b == f"infermeter-emulator {host} 20rps-poisson in80-out4"
    p = cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), env={"COLUMNS": "200"})
    assert f"{b} vs {a}" in p.stdout


def test_identical_labels_fall_back_to_the_directories(emulator, cli, tmp_path):
    for d in ("main", "pr"):
        _run(cli, emulator.base_url, tmp_path / d, "--concurrency", "2")
    p = cli("compare", str(tmp_path / "main"), str(tmp_path / "pr"), env={"COLUMNS": "200"})
    assert "pr vs main" in p.stdout


def _fixed_length_run(n: int, duration: float) -> RequestArrays:
    """n requests of exactly 100 output tokens each: the throughput's interval is (almost) zero-wide."""
    rng = np.random.default_rng(n)
    ttft = rng.lognormal(np.log(50), 0.2, n)
    return RequestArrays(ok=np.ones(n, bool), error=np.zeros(n, bool), sent_at=np.linspace(0, duration, n),
                         first_token_at=np.zeros(n), ended_at=np.zeros(n), ttft_ms=ttft, tpot_ms=ttft / 10,
                         e2e_ms=ttft * 20, output_tokens=np.full(n, 100.0))


def test_a_tiny_change_with_a_zero_width_interval_is_negligible_not_worse():
    base, cand = _fixed_length_run(2000, 60.0), _fixed_length_run(2000, 60.12)  # 0.2 % longer: 0.2 % less tok/s
    kw = dict(base_duration_s=60.0, cand_duration_s=60.12, metrics=("output_throughput",))
    raw = compare_runs(base, cand, rng=np.random.default_rng(0), min_effect=0.0, **kw).changes[0]
    assert raw.verdict == "worse, within threshold" and raw.ci_high < 0  # what compare used to say
    assert -0.01 < raw.change < 0
    c = compare_runs(base, cand, rng=np.random.default_rng(0), **kw).changes[0]
    assert c.verdict == "negligible" and c.change == raw.change
    # and a real drop is still found
    big = compare_runs(base, cand, rng=np.random.default_rng(0), threshold=0.05,
                       **{**kw, "cand_duration_s": 72.0}).changes[0]
    assert big.verdict == "regression"
