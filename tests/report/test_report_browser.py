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
    "clipped": "CLIPPED",
    "empty": "EMPTY",
    "colors": "JSON.stringify(Array.from(document.querySelectorAll('figure[id^=chart-dist] .js-plotly-plot')).flatMap(gd =>"
              " gd.data.filter(t => t.line).map(t => [t.name, t.line.color])))",
    "histogram": "(() => { const f = document.getElementById('chart-dist-ttft_ms');"
                 " f.querySelectorAll('.views button')[1].click();"
                 " return f.querySelector('.panel-title').textContent; })()",
    "legend": "(async () => { const gd = document.querySelector('#chart-dist-e2e_ms .js-plotly-plot');"
              " const shown = () => gd.data.filter(t => t.visible !== 'legendonly').length; const before = shown();"
              " const item = gd.querySelector('.legendtoggle'); const r = item.getBoundingClientRect();"
              " for (const type of ['mousedown', 'mouseup'])"
              "   item.dispatchEvent(new MouseEvent(type, {bubbles: true, clientX: r.left + 2, clientY: r.top + 2}));"
              " await new Promise(r => setTimeout(r, 1000)); return [before, shown()]; })()",
    "select": "(() => { const s = document.querySelector('#chart-timeseries select'); s.value = String(s.options.length - 1);"
              " s.dispatchEvent(new Event('change'));"
              " return document.querySelectorAll('#chart-timeseries .panel').length; })()",
    "sort": "(() => { const t = document.querySelector('table[data-key=throughput]');"
            " t.querySelectorAll('th')[3].click();"
            " return Array.from(t.tBodies[0].rows).map(r => Number(r.cells[3].dataset.v)); })()",
    "export": "(() => { const f = document.getElementById('chart-cost');"
              " return Array.from(f.querySelectorAll('.modebar-btn')).map(b => b.getAttribute('data-title')); })()",
}


@pytest.fixture(scope="module")
def page_report(chromium, chromium_browser, grid_runs, make_sweep_module, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    sweep = make_sweep_module(root / "sweep", [5.0, 10.0, 20.0, 30.0], label=EVIL, model="llama</script><b>x")
    files = build_report([*grid_runs, sweep], root / "out", ReportOptions(
        price_options=PriceOptions(price_per_gpu_hour=2.0), api_usd_per_1m=0.5,
        now=dt.datetime(2025, 1, 10, tzinfo=dt.timezone.utc)))
    cdp = chromium_browser.driver
    clicks = {**CLICKS, "clipped": cdp.CLIPPED_TEXT, "empty": cdp.EMPTY_PLOTS, "marks": cdp.CHART_MARKS}
    return files, chromium(files.html, clicks)


def test_page_loads_without_errors(page_report):
    _, rep = page_report
    assert rep.console_errors == [] and rep.exceptions == [] and rep.log_errors == []
    assert rep.dialogs == []


def test_every_chart_is_drawn(page_report):
    files, rep = page_report
    ids = {c["id"] for c in rep.charts}
    for expected in ("chart-dist-ttft_ms", "chart-dist-tpot_ms", "chart-dist-e2e_ms", "chart-throughput-vs-load",
                     "chart-latency-vs-throughput", "chart-cost", "chart-break-even", "chart-timeseries"):
        assert expected in ids
    for c in rep.charts:
        # not blank: the pixels vary, and coloured series pixels are there
        assert c["width"] > 300 and c["std"] > 8 and c["colored"] > 40, c  # axes and grid are grey
    # panels drawn: 3 distributions, 2 load curves, the first run's time series signals, cost, break-even
    assert rep.values["ready"] == len(rep.charts) >= 12


def test_every_view_of_every_chart_draws_a_mark_for_every_value(page_report):
    _, rep = page_report
    panels = json.loads(rep.values["marks"])
    assert {"chart-cost", "chart-break-even", "chart-throughput-vs-load"} <= {p["id"] for p in panels}
    bad = [p for p in panels if not sum(p["drawn"].values())
           or any(p["drawn"][k] < p["expected"][k] for k in ("bars", "points", "lines"))]
    assert bad == []
    cost = [p for p in panels if p["id"] == "chart-cost"]
    assert all(p["drawn"]["bars"] == p["expected"]["bars"] == 10 for p in cost)  # 9 runs and the sweep's best step


def test_no_chart_text_is_clipped_and_no_plot_is_empty(page_report):
    _, rep = page_report
    assert json.loads(rep.values["clipped"]) == []
    assert json.loads(rep.values["empty"]) == []


def test_a_run_has_one_colour_in_every_chart(page_report):
    _, rep = page_report
    colors: dict[str, set[str]] = {}
    for name, color in json.loads(rep.values["colors"]):
        colors.setdefault(name, set()).add(color)
    from infermeter.report.figures import PALETTE

    runs = [n for n in colors if "<br>" not in n]  # one series per run in the distribution charts
    assert len(runs) >= 3
    assert all(len(colors[n]) == 1 for n in runs), colors
    # different runs, different colours (until the palette runs out)
    assert len({next(iter(colors[n])) for n in runs}) == min(len(runs), len(PALETTE))


def test_user_strings_are_shown_not_run(page_report):
    _, rep = page_report
    assert rep.values["pwned"] == "undefined"
    assert rep.values["label_text"] is True


def test_charts_and_tables_are_interactive(page_report):
    _, rep = page_report
    assert rep.values["histogram"] == "TTFT: requests per bin"  # the second view of the chart
    before, after = rep.values["legend"]
    assert after == before - 1  # a legend click hid one series
    assert rep.values["select"] >= 4  # the last run's client-side signals at least
    values = rep.values["sort"]
    assert values == sorted(values)
    titles = set(rep.values["export"])
    assert "Download as SVG" in titles and any(str(t).startswith("Download plot as a PNG") for t in titles), titles
