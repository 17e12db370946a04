"""A study that decides: the decision follows from the tables, load steps realize their label, partial reports,
configurations that do not fit, claims checked against the physical ceiling."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from infermeter.study.claims import check_claims
from infermeter.study.config import build_study, example_text, load_study_text
from infermeter.study.runner import run_study

TODAY = dt.date(2026, 11, 30)
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
STUDY = {
    "title": "decision test", "model": "llama-3.1-8b", "profiles": ["code"],
    "configurations": ["h100-sxm", "a100-80gb", {"config": "rtx-4090", "name": "4090-70b", "model": "llama-3.1-70b"}],
    "load": {"sync_requests": 20, "saturation_requests": 512, "rate_fractions": [0.3, 0.6, 0.9], "requests": 120},
    "slo": {"ttft_ms": 2000, "tpot_ms": 80}, "pricing": {"provider": "aws"},
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_study(build_study(STUDY, "test"), tmp_path_factory.mktemp("decide") / "out", today=TODAY, now=NOW)


def test_the_decision_is_the_cheapest_comparable_cell_and_its_margin(result: Any) -> None:
    d = result.decisions["code"]
    costs = {c.config: result.prices.cost[c.key].value("usd_per_1m_requests") for c in result.cells
             if result.prices.cost[c.key].comparable}
    ranked = sorted((v, k) for k, v in costs.items() if v is not None)
    assert d.best.cell.config == ranked[0][1] and d.runner_up.cell.config == ranked[1][1]
    assert d.margin == pytest.approx(ranked[1][0] / ranked[0][0] - 1)
    # the search bracket bounds the cost from below by the bracket's width
    search = d.best.search
    assert search is not None and search.hi == pytest.approx(d.best.value) and search.lo < search.hi
    # the performance model's 80% interval on the throughput, inverted onto the cost
    model = d.best.model
    assert model is not None and model.lo < d.best.value < model.hi and "80%" in model.basis
    from infermeter.perfmodel.uncertainty import interval, regime_of

    assert d.best.interval.lo == min(search.lo, model.lo) and d.best.interval.hi == max(search.hi, model.hi)
    assert interval and regime_of  # the API it comes from
    # too close to call exactly when the paired cost ratio's interval includes 1; without a paired ratio, when
    # the two intervals overlap (the per-cell intervals can overlap while the paired ratio stays above 1)
    if d.ratio is not None:
        assert d.too_close == (d.ratio.lo <= 1.0)
    else:
        assert d.too_close == d.best.interval.overlaps(d.runner_up.interval)
    data = json.loads(result.files["json"].read_text())
    assert data["decisions"]["code"]["best"]["config"] == d.best.cell.config


def test_the_report_opens_with_the_decision(result: Any) -> None:
    md = result.files["markdown"].read_text()
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Decision", "## Findings"]
    d = result.decisions["code"]
    card = md.split("## Decision", 1)[1].split("## Findings", 1)[0]
    from infermeter.study.decision import times_text

    ratio = times_text(1 + d.margin)  # "27.0% more" below 2x, "2.6x as much" above: never "159.6% more"
    assert f"**rent {d.best.cell.config} — " in card and f"{d.runner_up.cell.config} costs {ratio}" in card
    assert "% more" not in ratio or d.margin < 1
    html = result.files["html"].read_text()
    assert html.index('id="decision"') < html.index('id="findings"') < html.index("<details>")
    assert html.count('<div class="card ') == 1  # one card per profile


def test_open_loop_steps_realize_their_target_rate(result: Any) -> None:
    rates = [(s["target_rate"], s["offered_rate"]) for c in result.cells for s in c.steps if s["kind"] == "rate"]
    assert len(rates) >= 6
    assert all(abs(real / target - 1) < 0.02 for target, real in rates), rates


def test_slo_capacity_is_bracketed_within_the_precision(result: Any) -> None:
    for c in (c for c in result.cells if c.capacity):
        cap = c.capacity
        if cap["knee_high_rps"] is not None:
            assert cap["knee_precision"] <= 0.05 + 1e-9 or len([s for s in c.steps if s["kind"] == "rate"]) == 3 + 6
            assert cap["knee_low_rps"] < cap["knee_high_rps"]


def test_a_configuration_that_does_not_fit_is_a_row_not_a_crash(result: Any) -> None:
    cell = result.cell("4090-70b", "code")
    assert cell.unavailable.startswith("does not fit: llama-3.1-70b on rtx-4090")
    assert not result.prices.cost[cell.key].comparable
    md = result.files["markdown"].read_text()
    matrix = md.split("### Output tokens/s at saturation", 1)[1].split("###", 1)[0]
    assert any(line.startswith("| 4090-70b | does not fit |") for line in matrix.splitlines())
    assert any(x.startswith("4090-70b: does not fit") for x in result.decisions["code"].excluded)


def test_a_stopped_study_leaves_a_partial_report_and_resumes(tmp_path: Path) -> None:
    study = build_study({**STUDY, "configurations": ["h100-sxm", "a100-80gb"],
                         "load": {**STUDY["load"], "refine": 0}}, "test")
    seen: list[str] = []

    def stop_after_first(event: Any) -> None:
        seen.append(event.kind)
        if event.kind == "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "s", events=stop_after_first, today=TODAY, now=NOW)
    md = (tmp_path / "s" / "report.md").read_text()
    assert "PARTIAL REPORT: 1 of 2 cells done; still to run: a100-80gb × code" in md
    assert json.loads((tmp_path / "s" / "study.json").read_text())["pending"] == ["a100-80gb × code"]
    assert seen[0] == "cell" and "step" in seen
    lines: list[str] = []
    done = run_study(study, tmp_path / "s", resume=True, progress=lines.append, today=TODAY, now=NOW)
    assert sum("kept from the previous run" in x for x in lines) == 1 and len(done.cells) == 2
    assert "PARTIAL" not in done.files["markdown"].read_text()


def test_seed_003_claims_are_checked_against_the_ceiling() -> None:
    study = load_study_text(example_text("seed-003"), "seed-003")
    checks = {c.claim.text.split(":")[0] + c.claim.text[-20:]: c for c in check_claims(study, [])
              if c.claim.canonical_metric == "decode_tokens_per_s"}  # the speed claims (cost claims: test_card)
    verdicts = {c.claim.configuration: c.verdict for c in checks.values()}
    # 70B at 4 bits streams ~37 GB of weights per token: 115 tok/s needs more than an H100's 3.35 TB/s
    assert verdicts["h100 (lambda)"] == "impossible" and verdicts["a100-80gb (runpod)"] == "impossible"
    assert verdicts["rtx-4090 8b (vast.ai)"] != "impossible" and verdicts["a100-80gb 8b (runpod)"] != "impossible"
    h100 = next(c for c in checks.values() if c.claim.configuration == "h100 (lambda)")
    assert h100.ceiling < h100.claim.value and h100.ratio_to_ceiling > 1


def test_per_configuration_model_dtype_provider_and_calibration(tmp_path: Path) -> None:
    from infermeter.errors import ConfigError

    cal = tmp_path / "cal.yaml"
    cal.write_text("{}\n")
    s = build_study({"model": "llama-3-70b", "configurations": [
        {"config": "h100-sxm", "name": "a", "dtype": "awq", "provider": "lambda", "calibration": str(cal)},
        {"config": "rtx-4090", "name": "b", "model": "llama-3-8b", "dtype": "fp16", "provider": "vastai"}]}, "t")
    a, b = s.configurations
    assert (s.model_for(a), s.sim_for(a).dtype, s.pricing_for(a).provider) == ("llama-3-70b", "awq", "lambda")
    assert (s.model_for(b), s.sim_for(b).dtype, s.pricing_for(b).provider) == ("llama-3-8b", "fp16", "vastai")
    from infermeter.study.pricing import resolve_prices

    prices = resolve_prices(s, TODAY)
    assert prices["a"].provider == "lambda" and prices["b"].provider == "vastai"
    for bad, needle in [({"config": "h100-sxm", "calibration": str(tmp_path / "none.yaml")}, "no such file"),
                        ({"config": "h100-sxm", "model": "llama-9"}, "configuration h100-sxm: model"),
                        ({"config": "h100-sxm", "dtype": "fp8", "sim": {"dtype": "fp8"}}, "not both")]:
        with pytest.raises(ConfigError, match=needle):
            build_study({"configurations": [bad]}, "t")


def test_the_study_page_draws_every_chart_with_nothing_clipped(result: Any, chromium_browser: Any) -> None:
    cdp = chromium_browser.driver
    page = chromium_browser.inspect(result.files["html"], {"clipped": cdp.CLIPPED_TEXT, "empty": cdp.EMPTY_PLOTS,
                                                           "ready": "document.body.getAttribute('data-charts-ready')"},
                                    before=cdp.OPEN_ALL)
    assert (page.console_errors, page.exceptions, page.log_errors) == ([], [], [])
    assert json.loads(page.values["clipped"]) == [] and json.loads(page.values["empty"]) == []
    ids = {c["id"] for c in page.charts}
    assert {"chart-decision", "chart-study-throughput", "chart-study-load", "chart-study-break-even"} <= ids
    assert all(c["std"] > 8 and c["colored"] > 40 for c in page.charts), page.charts


def test_a_configuration_with_a_calibration_file_runs_on_its_fitted_twin(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_calfile", Path(__file__).parents[1] / "analysis" /
                                                  "test_calibration_file.py")
    assert spec is not None and spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    from infermeter.measure.calibrate import calibrate

    cal = calibrate([helper.measured_like(tmp_path, 1, 20, "c1"), helper.measured_like(tmp_path, 4, 40, "c4")],
                    engine="vllm-cpu", hardware="test-cpu")
    path = cal.write(tmp_path / "cal.yaml")
    study = build_study({"model": "llama-3.1-8b", "profiles": ["code"], "profile_overrides": {"code": {"output_tokens": "64"}},
                         "configurations": [{"config": "h100-sxm", "name": "ours", "calibration": str(path)}, "h100-sxm"],
                         "load": {"kind": "concurrency", "concurrency": 1, "saturation_requests": 20}}, "test")
    res = run_study(study, tmp_path / "s", today=TODAY, now=NOW)
    ours, shipped = res.cell("ours", "code"), res.cell("h100-sxm", "code")
    assert ours.target["calibration"]["applied"] is True
    # one stream: a step is base + one token + one sequence = 14.3 ms on the fitted engine, ~6 ms on the model's H100
    tpot = ours.latency["saturation"]["tpot_ms"]["p50"]
    assert tpot == pytest.approx(1000 * (0.013 + 0.0005 + 0.0008), rel=0.15)
    assert shipped.latency["saturation"]["tpot_ms"]["p50"] < 0.7 * tpot
