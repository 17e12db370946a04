"""Every chart of `study --example` (a small variant) and of `infermeter report` over its cells draws its data.

In headless Chromium each view of each chart is drawn in turn and the marks Plotly drew inside the plot area
(bars with a width, markers, line paths) are counted against the finite values the panel's data holds: an
empty chart, or one whose data cannot show on its axes (text on a number axis, a zero on a log axis), fails.
Pixel variance cannot tell: axes and gridlines vary too. Axis ranges must keep to the data and the limit lines
drawn (no 10^80 axis from a label placed on a log axis by value), and no table may widen the page.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from infermeter.analysis.prices import PriceOptions
from infermeter.report.build import ReportOptions, build_report
from infermeter.study.config import build_study, example_text
from infermeter.study.runner import run_study

TODAY = dt.date(2026, 11, 30)
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
STUDY_CHARTS = {"chart-decision", "chart-study-throughput", "chart-study-load", "chart-study-server",
                "chart-study-cost", "chart-study-break-even", "chart-soak"}
REPORT_CHARTS = {"chart-dist-ttft_ms", "chart-dist-tpot_ms", "chart-dist-e2e_ms", "chart-throughput-vs-load",
                 "chart-latency-vs-throughput", "chart-timeseries", "chart-cost", "chart-break-even"}
# the page at a common laptop width: a wide table scrolls inside its box, the page does not
PAGE_WIDE = ("JSON.stringify({page: document.documentElement.scrollWidth - document.documentElement.clientWidth,"
             " tables: Array.from(document.querySelectorAll('table.data')).filter(t => {"
             "  const w = t.closest('.tablewrap'); return !w || (w.scrollWidth > w.clientWidth + 1 &&"
             "  getComputedStyle(w).overflowX !== 'auto'); }).map(t => t.dataset.key)})")


def small_example() -> dict[str, Any]:
    """The built-in example with fewer cells and requests, and a short soak (the soak chart)."""
    raw = yaml.safe_load(example_text())
    raw["configurations"] = ["h100-sxm", "h200", "a100-40gb"]
    raw["profiles"] = ["chat", "classification"]
    raw["load"].update(sync_requests=5, saturation_requests=256, requests=60, refine=1)
    raw["soak"] = {"duration_s": 120, "rate_per_s": 1.0, "window_s": 60, "configurations": ["h100-sxm"]}
    return dict(raw)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, chromium: Any, chromium_browser: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("marks")
    result = run_study(build_study(small_example(), "example"), root / "study", today=TODAY, now=NOW)
    cells = sorted(p for p in (root / "study" / "cells").glob("*/*") if p.is_dir())
    report = build_report(cells, root / "report", ReportOptions(price_options=PriceOptions(provider="aws"), now=NOW,
                                                                today=TODAY))
    cdp = chromium_browser.driver
    out = {}
    for name, page in (("study", result.files["html"]), ("report", report.html)):
        out[name] = chromium(page, {"marks": cdp.CHART_MARKS, "wide": PAGE_WIDE}, width=1280, height=900,
                             before=cdp.OPEN_ALL)
    return out


def marks(rep: Any) -> list[dict[str, Any]]:
    return list(json.loads(rep.values["marks"]))


def short(p: dict[str, Any]) -> list[Any]:
    """A failing panel said briefly: chart, view, panel, and the marks it expected and drew."""
    return [p["id"], p["view"], p["title"], p["expected"], p["drawn"]]


@pytest.mark.parametrize("page, expected", [("study", STUDY_CHARTS), ("report", REPORT_CHARTS)])
def test_every_chart_draws_a_mark_for_every_value(pages: dict[str, Any], page: str, expected: set[str]) -> None:
    rep = pages[page]
    assert (rep.console_errors, rep.exceptions, rep.log_errors) == ([], [], [])
    panels = marks(rep)
    assert expected <= {p["id"] for p in panels}
    empty = [short(p) for p in panels if sum(p["drawn"].values()) == 0]
    assert empty == []
    short_of = [short(p) for p in panels if any(p["drawn"][k] < p["expected"][k] for k in ("bars", "points", "lines"))]
    assert short_of == []
    # the bar charts are there and drew bars (they drew none on a number axis with text categories)
    bars = {p["id"] for p in panels if p["drawn"]["bars"] > 0}
    assert {"chart-study-throughput", "chart-study-server", "chart-study-cost"} <= bars if page == "study" else \
        {"chart-cost"} <= bars


def _sane(ax: dict[str, Any]) -> bool:
    """The axis range keeps to its data and the limit lines drawn on it (a linear axis may start at zero)."""
    if ax["type"] == "category" or not ax["data"]:
        return True
    lo, hi = min(ax["data"] + ax["limits"]), max(ax["data"] + ax["limits"])
    a, b = ax["range"]
    if ax["type"] == "log":  # Plotly's log range is in exponents; a bar's foot may sit a decade and a bit under
        return math.log10(lo) - 1.5 <= a and b <= math.log10(hi) + 0.5
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    pad = 0.25 * (hi - lo or abs(hi) or 1.0)
    return lo - pad <= a and b <= hi + pad


@pytest.mark.parametrize("page", ["study", "report"])
def test_axis_ranges_keep_to_the_data(pages: dict[str, Any], page: str) -> None:
    bad = [[p["id"], p["view"], axis, p[axis]] for p in marks(pages[page]) for axis in ("x", "y") if not _sane(p[axis])]
    assert bad == []


@pytest.mark.parametrize("page", ["study", "report"])
def test_axes_are_log_where_positive_values_span_more_than_ten_times(pages: dict[str, Any], page: str) -> None:
    wrong = []
    for p in marks(pages[page]):
        for axis in ("x", "y"):
            ax = p[axis]
            if ax["type"] != "linear" or not ax["data"] or min(ax["data"]) <= 0:
                continue
            # linear by choice: shares and % of requests, time, the soak's windows
            explicit = (p["id"].startswith("chart-dist-") and axis == "y") or p["id"].startswith("chart-soak") or (
                p["id"] == "chart-timeseries" and axis == "x")
            if max(ax["data"]) / min(ax["data"]) > 10 and not explicit:
                wrong.append([p["id"], p["view"], axis, ax["data"]])
    assert wrong == []


@pytest.mark.parametrize("page", ["study", "report"])
def test_wide_tables_scroll_in_their_box_and_the_page_does_not(pages: dict[str, Any], page: str) -> None:
    wide = json.loads(pages[page].values["wide"])
    assert wide["page"] <= 0 and wide["tables"] == []
