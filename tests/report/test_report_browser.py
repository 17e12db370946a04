"""The HTML report in a real headless Chromium: no console errors, charts drawn, hostile strings inert."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from infermeter.analysis.prices import PriceOptions
from infermeter.report.build import ReportOptions, build_report

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2;alert(2)">'
CLICKS = {
    "pwned": "typeof window.__pwned",
    "ready": "Number(document.body.getAttribute('data-charts-ready'))",
    "label_text": f"document.body.innerText.includes({json.dumps(EVIL)})",
    "histogram": "(() => { const f = document.getElementById('chart-dist-ttft_ms');"
                 " f.querySelectorAll('.views button')[1].click();"
                 " return f.querySelector('svg').getAttribute('aria-label'); })()",
    "legend": "(() => { const f = document.getElementById('chart-dist-e2e_ms');"
              " const before = f.querySelectorAll('svg path').length;"
              " f.querySelector('.legend button').click();"
              " return [before, f.querySelectorAll('svg path').length]; })()",
    "select": "(() => { const s = document.querySelector('.ts select'); s.value = String(s.options.length - 1);"
              " s.dispatchEvent(new Event('change')); return document.querySelectorAll('.ts figure.chart').length; })()",
    "sort": "(() => { const t = document.querySelector('table[data-key=throughput]');"
            " t.querySelectorAll('th')[3].click();"
            " return Array.from(t.tBodies[0].rows).map(r => Number(r.cells[3].dataset.v)); })()",
}


@pytest.fixture(scope="module")
def page_report(chromium, grid_runs, make_sweep_module, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    sweep = make_sweep_module(root / "sweep", [5.0, 10.0, 20.0, 30.0], label=EVIL, model="llama</script><b>x")
    files = build_report([*grid_runs, sweep], root / "out", ReportOptions(
        price_options=PriceOptions(price_per_gpu_hour=2.0), api_usd_per_1m=0.5,
        now=dt.datetime(2025, 1, 10, tzinfo=dt.timezone.utc)))
    return files, chromium(files.html, CLICKS)


def test_page_loads_without_errors(page_report):
    _, rep = page_report
    assert rep.console_errors == [] and rep.exceptions == [] and rep.log_errors == []
    assert rep.dialogs == []


def test_every_chart_is_drawn(page_report):
    files, rep = page_report
    ids = {c["id"] for c in rep.charts}
    for expected in ("chart-dist-ttft_ms", "chart-dist-tpot_ms", "chart-dist-e2e_ms", "chart-throughput-vs-load",
                     "chart-latency-vs-throughput", "chart-cost", "chart-break-even", "chart-ts-request_rate",
                     "chart-ts-token_rate", "chart-ts-in_flight", "chart-ts-ttft_p95", "chart-ts-kv_cache",
                     "chart-ts-queue", "chart-ts-gpu_temperature", "chart-ts-gpu_power"):
        assert expected in ids
    for c in rep.charts:
        # not blank: the pixels vary, and coloured series pixels are there
        assert c["width"] > 300 and c["std"] > 8 and c["colored"] > 40, c  # axes and grid are grey
    assert rep.values["ready"] == 8  # chart specs: 3 distributions, 2 load curves, time series, cost, break-even


def test_user_strings_are_shown_not_run(page_report):
    _, rep = page_report
    assert rep.values["pwned"] == "undefined"
    assert rep.values["label_text"] is True


def test_charts_and_tables_are_interactive(page_report):
    _, rep = page_report
    assert rep.values["histogram"] == "TTFT distribution — histogram"
    before, after = rep.values["legend"]
    assert after == before - 1  # one series hidden
    assert rep.values["select"] >= 4  # the last run's client-side signals at least
    values = rep.values["sort"]
    assert values == sorted(values)
