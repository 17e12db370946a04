"""Simulated runs carry 80% bands on their headline figures (``summary.json`` ``prediction_intervals``)."""

import pytest

from infermeter.measure.config import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.perfmodel.uncertainty import interval, regime_of
from infermeter.twin.deploy import build_twin


def _run(tmp_path, name, **load):
    cfg = RunConfig(model="llama-3.1-8b", input_tokens="512", output_tokens="128", seed=1,
                    out=str(tmp_path / name), **load)
    return SimPlan(cfg, twin=build_twin("llama-3.1-8b", "h100-sxm"), token_times="off").run()


def test_a_simulated_run_carries_the_models_band_for_its_regime(tmp_path):
    s = _run(tmp_path, "c8", concurrency=8, requests=200).summary
    pi = s["prediction_intervals"]
    for key, value in (("ttft_ms", s["ttft_ms"]["p50"]), ("tpot_ms", s["tpot_ms"]["p50"]),
                       ("output_token_throughput", s["output_token_throughput"])):
        assert pi[key]["lo"] < value == pi[key]["value"] < pi[key]["hi"], key
    # the same band the planner gives this deployment in this regime
    d = build_twin("llama-3.1-8b", "h100-sxm").predictor
    lo, hi, basis = interval("tpot_ms", s["tpot_ms"]["p50"], regime_of(d, "tpot_ms", 512, 128, 8))
    assert (pi["tpot_ms"]["lo"], pi["tpot_ms"]["hi"], pi["tpot_ms"]["basis"]) == (pytest.approx(lo), pytest.approx(hi), basis)
    assert "leave-one-publication-out" in basis
    # eight users in the system: the first token takes the queued spread, one user alone its model class's
    from infermeter.perfmodel.freshpub import QUEUED
    from infermeter.perfmodel.uncertainty import table_of

    assert f"fresh-publication spread {table_of().fresh_tau(QUEUED):.2f}" in pi["ttft_ms"]["basis"]
    one = _run(tmp_path, "c1", concurrency=1, requests=20).summary["prediction_intervals"]["ttft_ms"]
    assert f"fresh-publication spread {table_of().fresh_tau('dense'):.2f}" in one["basis"] and one["hi"] / one["lo"] < (pi["ttft_ms"]["hi"] / pi["ttft_ms"]["lo"]) / 10


def test_a_saturated_runs_ttft_gets_no_band(tmp_path):
    # one H100 serves 8B at well under 200 req/s of 512/128: an open loop at that rate saturates
    s = _run(tmp_path, "over", rate=200.0, arrival="constant", duration_s=20.0, grace_s=5.0).summary
    assert s["saturated"] is True
    pi = s["prediction_intervals"]
    assert "lo" not in pi["ttft_ms"] and pi["ttft_ms"]["why"].startswith("saturated")
    assert pi["tpot_ms"]["lo"] < pi["tpot_ms"]["hi"]


def test_the_report_and_the_console_show_the_bands(tmp_path, cli):
    res = _run(tmp_path, "c4", concurrency=4, requests=60)
    pi = res.summary["prediction_intervals"]["tpot_ms"]
    p = cli("report", str(res.run_dir), "--out", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Predicted figures: 80% prediction intervals" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {res.summary['label']} |") and "interval" in line)
    assert f"{pi['lo']:.2f}" in row and f"{pi['hi']:.2f}" in row
    show = cli("simulate", "--model", "llama-3.1-8b", "--concurrency", "4", "--requests", "60", "--input-tokens", "512",
               "--output-tokens", "128", "--out", str(tmp_path / "sim"))
    assert show.returncode == 0 and "80% intervals" in show.stdout and "TPOT p50" in show.stdout


def test_an_open_loop_the_server_keeps_up_with_has_its_throughput_set_by_the_load(tmp_path):
    # 2 req/s x 128 tokens: 256 tok/s is all the schedule offers; a band around it would be the model's, not the run's
    s = _run(tmp_path, "easy", rate=2.0, arrival="constant", requests=60).summary
    assert s["saturated"] is False
    pi = s["prediction_intervals"]
    assert "lo" not in pi["output_token_throughput"] and pi["output_token_throughput"]["why"].startswith("set by")
    assert pi["tpot_ms"]["lo"] < s["tpot_ms"]["p50"] < pi["tpot_ms"]["hi"]
