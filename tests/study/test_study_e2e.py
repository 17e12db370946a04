"""A small study end to end through the twin: files, physically necessary orderings, traceable findings, soak."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from infermeter.study.config import build_study
from infermeter.study.findings import shown, write_findings
from infermeter.study.matrix import fmt_sig
from infermeter.study.pricing import price_study
from infermeter.study.report import study_content
from infermeter.study.runner import run_study

TODAY = dt.date(2026, 11, 30)
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
GPUS = ["h200", "h100-sxm", "a100-80gb", "a100-40gb"]
STUDY = {
    "title": "test study", "model": "llama-3.1-8b", "configurations": GPUS, "profiles": ["chat"],
    "load": {"sync_requests": 2, "saturation_requests": 512, "rate_fractions": [0.5], "requests": 60, "refine": 0,
             "converge": False},
    "slo": {"ttft_ms": 5000}, "pricing": {"provider": "aws"},
    "soak": {"duration_s": 120, "rate_per_s": 1.0, "window_s": 60, "configurations": ["h100-sxm"]},
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("study")
    return run_study(build_study(STUDY, "test"), out, today=TODAY, now=NOW)


def _sat(result: Any, config: str) -> dict[str, Any]:
    return result.cell(config, "chat").saturation


def test_writes_the_report_files(result: Any) -> None:
    names = {k: p.name for k, p in result.files.items()}
    assert names == {"html": "report.html", "markdown": "report.md", "json": "study.json", "csv": "cells.csv"}
    data = json.loads(result.files["json"].read_text())
    assert [(c["config"], c["profile"], c["source"]) for c in data["cells"]] == [(g, "chat", "simulated") for g in GPUS]
    md = result.files["markdown"].read_text()
    for c in result.cells:  # each cell's headline figure is in the Markdown matrix: 3 significant figures, simulated
        assert f"{fmt_sig(c.saturation['output_tokens_per_s'])} (sim.)" in md
    assert result.files["html"].read_text().startswith("<!doctype html>")
    assert len(result.files["csv"].read_text().splitlines()) == 1 + len(GPUS)


def test_more_memory_bandwidth_never_lowers_throughput(result: Any) -> None:
    out = {g: _sat(result, g)["output_tokens_per_s"] for g in GPUS}
    assert out["h200"] >= out["h100-sxm"] >= out["a100-80gb"]


def test_a_40gb_kv_cache_fills_before_an_80gb_one(result: Any) -> None:
    small, big = result.cell("a100-40gb", "chat").server, result.cell("a100-80gb", "chat").server
    assert small["kv_cache_usage_max"] >= 0.95 > big["kv_cache_usage_max"]
    assert small["num_requests_running_max"] < big["num_requests_running_max"]
    assert small["num_preemptions"] > 0 == big["num_preemptions"]
    kv = [f.text for f in result.findings if f.topic == "kv"]
    # (an H100 may be KV-limited too: vLLM V1 admits up to 1024 sequences on it, 256 on an A100)
    assert any(t.startswith("chat: the KV cache limited a100-40gb at saturation") for t in kv), kv
    assert not any(t.startswith("chat: the KV cache limited a100-80gb") for t in kv), kv


def test_every_finding_points_at_a_cell_showing_its_number(result: Any) -> None:
    content = study_content(result)
    tables = {t.key: t for s in content.sections for t in s.tables}
    checked = 0
    for f in result.findings:
        for r in f.refs:
            table = tables[r.table]
            col = table.columns.index(r.column)
            row = next(row for row in table.rows if row[0].display == r.row)
            assert row[col].display == r.display, (f.text, r)
            assert shown(r) in f.text
            checked += 1
    assert checked >= 10


def test_cells_are_sweeps_other_commands_read(result: Any) -> None:
    from infermeter.analysis.cost import load_subject
    from infermeter.report.rundir import load_run_dir

    cell = result.cell("h100-sxm", "chat")
    run = load_run_dir(cell.run_dir)
    assert [s.name for s in run.steps] == [str(s["k"]) for s in cell.steps]
    assert [s["kind"] for s in cell.steps] == ["synchronous", "saturation", "rate"]
    subject = load_subject(cell.run_dir)
    assert subject.source == "simulated" and subject.hardware == "h100-sxm"


def test_changed_prices_change_the_best_value(result: Any) -> None:
    best = result.prices.picks["chat"].best.cell.config
    # price the winner at 10x everyone else's price: the same cells now pick another configuration
    confs = [{"config": g, "price_per_hour": 100.0 if g == best else 10.0} for g in GPUS]
    study = build_study({**STUDY, "configurations": confs, "soak": None}, "test")
    prices = price_study(study, result.cells, TODAY)
    assert prices.picks["chat"].best.cell.config != best
    value = next(f for f in write_findings(study, result.cells, prices) if f.topic == "value")
    assert value.text.startswith(f"chat: best value is {prices.picks['chat'].best.cell.config} at ")


def test_soak_runs_the_sized_fleet_in_windows(result: Any) -> None:
    (soak,) = result.soaks
    assert soak.config == "h100-sxm" and soak.replicas == 1 and soak.hardware == "h100-sxm"
    assert [w["start_s"] for w in soak.windows] == [0.0, 60.0]
    assert sum(w["sent"] for w in soak.windows) == soak.budget["requests"] > 60
    assert any(f.topic == "soak" and f.text.startswith("Soak on h100-sxm") for f in result.findings)


def test_the_soak_verdict_is_on_the_decision(result: Any) -> None:
    from infermeter.study.soak import held, slo_misses

    (soak,) = result.soaks
    d = result.decisions[soak.profile]
    (v,) = [x for x in ([d.soak] if d.soak else []) + d.other_soaks if x.config == soak.config]
    assert v.held == held(soak.budget, slo_misses(soak.windows, result.study.slo))
    assert v.text.startswith("held: " if v.held else "FAILED: ")
    assert d.demoted == (d.soak is not None and not v.held)
    card = result.files["markdown"].read_text().split("## Findings", 1)[0]
    assert v.text.split(";")[0] in card
    if not v.held:  # a failed soak is followed by probes of the rate at which it holds
        assert soak.probes and all(p["replicas"] == 1 for p in soak.probes)


def test_resume_keeps_finished_cells(result: Any) -> None:
    lines: list[str] = []
    again = run_study(build_study({**STUDY, "soak": None}, "test"), result.out_dir, resume=True, today=TODAY,
                      now=NOW, progress=lines.append)
    assert sum("kept from the previous run" in x for x in lines) == len(GPUS)
    assert [c.saturation for c in again.cells] == [c.saturation for c in result.cells]


def test_an_existing_study_folder_is_not_overwritten(result: Any) -> None:
    from infermeter.errors import ConfigError

    with pytest.raises(ConfigError, match="already holds a study"):
        run_study(build_study(STUDY, "test"), result.out_dir)


def test_report_renders_in_a_browser(result: Any, chromium_browser: Any) -> None:
    page = chromium_browser.inspect(result.files["html"], {"charts": "document.body.getAttribute('data-charts-ready')"},
                                    before=chromium_browser.driver.OPEN_ALL)
    assert (page.console_errors, page.exceptions, page.log_errors) == ([], [], [])
    assert int(page.values["charts"]) >= 4
    assert all(c["std"] > 0 for c in page.charts)
