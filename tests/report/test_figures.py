"""Chart specs without a browser: axis types follow the data, limit lines stay on the scale, closed loops sit at
the rate they achieved, and every bar chart of the study and the run report has a category axis."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from infermeter.analysis.results import Summary
from infermeter.report import charts as ch
from infermeter.report.figures import axis, axis_type, bar, bar_panel, line, panel, points, threshold
from infermeter.report.rundir import load_run_dirs
from infermeter.report.tables import load_x, offered_load


@pytest.mark.parametrize("values, requested, kind", [
    (["h100-sxm (sim.)", "a100-80gb (sim.)"], "-", "category"),
    (["h100-sxm (sim.)", "a100-80gb (sim.)"], "linear", "category"),  # text on a number axis draws nothing
    (["h100", None, "a100"], "log", "category"),
    ([294.0, 19_200.0], "-", "log"),  # spans 65x
    ([1.0, 10.0], "-", "linear"),  # exactly 10x is not more than 10x
    ([1.0, 10.01], "-", "log"),
    ([0.0, 5.0, 500.0], "-", "linear"),  # a zero has no place on a log axis
    ([-3.0, 500.0], "-", "linear"),
    ([2.0, 9.0], "-", "linear"),
    ([2.0, 9.0], "log", "log"),  # asked for
    ([0.0, 9.0], "log", "linear"),  # asked for, but a log axis would drop the zero
    ([1.0, 1000.0], "linear", "linear"),  # asked for
    ([], "-", "linear"),
    ([None, float("nan")], "-", "linear"),
])
def test_axis_type_follows_the_data(values: list[Any], requested: str, kind: str) -> None:
    assert axis_type(values, requested) == kind


def test_a_bar_panel_gets_a_category_axis_and_a_log_value_axis_where_costs_span_65x() -> None:
    p = panel("chat", [bar("USD", ["a10g", "h100", "h200"], [19_200.0, 294.0, 310.0], "#000")],
              axis("configuration"), axis("USD per 1M requests"))
    x, y = p["layout"]["xaxis"], p["layout"]["yaxis"]
    assert x["type"] == "category" and y["type"] == "log"
    # a bar grows from the axis' foot: the foot lies under the smallest bar, so it has a length
    assert y["range"][0] < math.log10(294.0) - 0.3 and y["range"][1] > math.log10(19_200.0)
    # ticks 1-2-5 with their values, not Plotly's bare digits
    assert 500.0 in y["tickvals"] and y["ticktext"][y["tickvals"].index(500.0)] == "500"


def test_close_values_keep_a_linear_axis() -> None:
    p = panel("chat", [points("a", [1.0, 2.0], [300.0, 350.0], "#000")], axis("ms"), axis("USD"))
    assert (p["layout"]["xaxis"]["type"], p["layout"]["yaxis"]["type"]) == ("linear", "linear")


def test_an_axis_asked_to_be_linear_stays_linear() -> None:
    p = panel("t", [line("a", [0.5, 100.0], [1.0, 2.0], "#000")], axis("time (s)", log=False), axis("x"))
    assert p["layout"]["xaxis"]["type"] == "linear"


def test_error_bars_count_in_the_axis_choice() -> None:
    # the values span 3x, but the interval reaches down to 1: 30x
    t = points("a", [1.0, 2.0], [10.0, 30.0], "#000", y_err=([9.0, 1.0], [1.0, 1.0]))
    assert panel("p", [t], axis("x"), axis("y"))["layout"]["yaxis"]["type"] == "log"


def test_a_limit_line_on_a_log_axis_is_labelled_at_its_exponent() -> None:
    """Plotly places annotations on a log axis by exponent: a label at x=80 stretched the axis to 10^80."""
    t = line("a", [4.8, 100.0, 739.0], [0.1, 0.5, 1.0], "#000")
    p = panel("TPOT", [t], axis("TPOT (ms)"), axis("share", log=False, range=[0, 1.02]),
              shapes=[threshold(80.0, "SLO 80 ms", along="x")])
    lay = p["layout"]
    assert lay["xaxis"]["type"] == "log"
    assert lay["shapes"][0]["x0"] == 80.0  # shapes take data values
    assert lay["annotations"][0]["x"] == pytest.approx(math.log10(80.0))


def test_a_near_limit_line_widens_a_linear_axis_to_be_drawn() -> None:
    t = points("a", [60.0, 170.0], [1.0, 2.0], "#000")
    p = panel("p", [t], axis("TTFT (ms)"), axis("USD"), shapes=[threshold(400.0, "SLO 400 ms", along="x")])
    lay = p["layout"]
    assert lay["xaxis"]["range"][1] >= 400.0 and len(lay["shapes"]) == 1


def test_a_far_limit_line_leaves_the_axis_on_the_data_and_says_where_it_is() -> None:
    t = points("a", [60.0, 170.0], [1.0, 2.0], "#000")
    p = panel("p", [t], axis("TTFT (ms)"), axis("USD"), shapes=[threshold(2000.0, "SLO 2000 ms", along="x")])
    lay = p["layout"]
    assert lay["shapes"] == [] and 170.0 < lay["xaxis"]["range"][1] < 400.0
    note = lay["annotations"][0]
    assert note["xref"] == "paper" and "SLO 2000 ms" in note["text"] and "beyond the axis" in note["text"]
    # far below a log axis: the label says so too
    t = points("a", [1.0, 2.0], [5000.0, 100_000.0], "#000")
    lay = panel("p", [t], axis("x"), axis("TTFT (ms)"), shapes=[threshold(500.0, "SLO 500 ms")])["layout"]
    assert lay["yaxis"]["type"] == "log" and lay["shapes"] == [] and "below the plot" in lay["annotations"][0]["text"]
    assert lay["yaxis"]["range"][0] > math.log10(500.0)


def test_a_lone_value_between_gaps_is_drawn_as_a_marker() -> None:
    assert line("a", [1, 2, 3, 4], [5.0, None, 7.0, 8.0], "#000")["mode"] == "lines+markers"
    assert line("a", [1, 2, 3], [5.0, 6.0, None], "#000")["mode"] == "lines"


def test_closed_loop_runs_sit_at_the_rate_they_achieved() -> None:
    open_loop = Summary(target_rate=4.0, achieved_rate=4.1, request_throughput=3.9)
    closed = Summary(target_rate=None, achieved_rate=2217.0, request_throughput=7.1)  # every request sent at once
    assert (offered_load(open_loop), load_x(open_loop)) == (4.0, 4.0)
    assert (offered_load(closed), load_x(closed)) == (None, 7.1)


def test_the_load_chart_plots_a_closed_loop_step_at_its_achieved_rate(make_sweep: Any, tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path / "sweep", [5.0, 10.0, 20.0])
    step = tmp_path / "sweep" / "steps" / "2"
    s = json.loads((step / "summary.json").read_text())
    s.update(target_rate=None, scheduled_rate=None, achieved_rate=2217.0)  # a closed loop's burst start
    (step / "summary.json").write_text(json.dumps(s))
    spec = ch.load_charts(load_run_dirs([sweep]))[0]
    xs = spec["views"][0]["panels"][0]["data"][0]["x"]
    assert max(xs) < 100 and s["request_throughput"] == pytest.approx(xs[-1], rel=1e-4)


def test_every_bar_chart_has_a_category_axis(grid_runs: list[Path]) -> None:
    from infermeter.analysis.prices import PriceOptions
    from infermeter.report.pricing import price_runs

    runs = load_run_dirs(grid_runs)
    costs, _ = price_runs(runs, PriceOptions(price_per_gpu_hour=2.0), None)
    spec = ch.cost_chart(costs)
    assert spec is not None
    for v in spec["views"]:
        for p in v["panels"]:
            t = p["data"][0]
            labels = "y" if t.get("orientation") == "h" else "x"  # nine runs: the bars lie down
            assert labels == "y" and p["layout"]["yaxis"]["type"] == "category", p["layout"]
            assert p["layout"]["yaxis"]["autorange"] == "reversed"  # first run at the top
            assert p["layout"]["height"] >= 110 + 15 * 9  # as tall as nine labelled bars need


def test_bars_lie_down_for_many_or_long_labels() -> None:
    few = bar_panel("p", "USD", ["a", "b"], [1.0, 2.0], "#000", axis("c"), axis("USD"))
    long = bar_panel("p", "USD", ["a", "b" * 30], [1.0, 2.0], "#000", axis("c"), axis("USD"))
    many = bar_panel("p", "USD", list("abcdefg"), [1.0] * 6 + [2.0], "#000", axis("c"), axis("USD"))
    assert "orientation" not in few["data"][0] and few["layout"]["xaxis"]["type"] == "category"
    for p in (long, many):
        assert p["data"][0]["orientation"] == "h" and p["layout"]["yaxis"]["type"] == "category"
        assert p["layout"]["xaxis"]["type"] == "linear" and p["layout"]["xaxis"]["title"]["text"] == "USD"


def test_study_bar_charts_have_category_axes() -> None:
    from infermeter.study import charts as sc

    class Cell:
        def __init__(self, config: str, value: float) -> None:
            self.config, self.profile, self.source, self.unavailable = config, "chat", "simulated", None
            self.key = (config, "chat")
            self.saturation = {"output_tokens_per_s": value, "requests_per_s": value / 700}
            self.capacity = {"requests_per_s": value / 800}

    class Conf:
        def __init__(self, label: str) -> None:
            self.label = label

    class Slo:
        limits = {"ttft_ms": 2000.0}

    class Study:
        configurations = [Conf("a10g"), Conf("h100-sxm")]
        profiles = ["chat"]
        slo = Slo()

    cells = [Cell("a10g", 90.0), Cell("h100-sxm", 5800.0)]
    spec = sc.throughput_chart(Study(), cells, sc.Colors(["a10g", "h100-sxm"]))  # type: ignore[arg-type]
    assert spec is not None
    for v in spec["views"]:
        lay = v["panels"][0]["layout"]
        assert lay["xaxis"]["type"] == "category" and lay["yaxis"]["type"] == "log"  # 64x apart
