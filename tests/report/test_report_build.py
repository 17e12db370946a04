"""build_report: report.md tables carry summary.json's values, summary.csv too, and strings stay inert."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re

import pytest

from infermeter.analysis.prices import PriceOptions
from infermeter.report.build import ReportOptions, build_report

NOW = dt.datetime(2025, 1, 10, 12, 0, tzinfo=dt.timezone.utc)
OPTIONS = ReportOptions(price_options=PriceOptions(price_per_gpu_hour=2.0), api_usd_per_1m=0.5, now=NOW,
                        today=NOW.date())


def md_tables(text: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """### title -> (header, rows) for every Markdown table."""
    out = {}
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        lines = block.splitlines()
        rows = [re.split(r"(?<!\\)\|", ln.strip()[1:-1]) for ln in lines[1:] if ln.startswith("|")]
        rows = [[c.strip() for c in r] for r in rows]
        out[lines[0].strip()] = (rows[0], rows[2:])
    return out


def number(cell: str) -> float | None:
    cell = cell.replace("**", "").replace("★", "").replace(",", "").replace("$", "").strip()
    if cell == "–":
        return None
    return float(cell.rstrip("%"))


def close(shown: float | None, actual: float | None) -> bool:
    if actual is None:
        return shown is None
    return shown is not None and abs(shown - actual) <= max(0.0051 * abs(actual), 0.0051)


@pytest.fixture(scope="module")
def report(grid_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    files = build_report(grid_runs, out, OPTIONS)
    summaries = {json.loads((d / "summary.json").read_text())["label"]: json.loads((d / "summary.json").read_text())
                 for d in grid_runs}
    return files, summaries


def test_markdown_tables_match_summary_json(report):
    files, summaries = report
    tables = md_tables(files.markdown.read_text())
    head, rows = tables["Throughput"]
    assert len(rows) == 9
    for row in rows:
        s = summaries[row[0]]
        for col, key in (("req/s", "request_throughput"), ("input tok/s", "input_token_throughput"),
                         ("output tok/s", "output_token_throughput"), ("total tok/s", "total_token_throughput"),
                         ("target rate (req/s)", "target_rate")):
            assert close(number(row[head.index(col)]), s[key]), (row[0], col)
        assert close(number(row[head.index("error rate")]), s["error_rate"] * 100)
    for title, key in (("Latency: TTFT (ms)", "ttft_ms"), ("Latency: TPOT (ms)", "tpot_ms"), ("Latency: E2E (ms)", "e2e_ms"),
                       ("Latency: ITL (ms)", "itl_ms"), ("Latency: TTFT from intended send (ms)", "ttft_from_intended_ms")):
        head, rows = tables[title]
        assert len(rows) == 9
        for row in rows:
            for stat, col in (("mean", "mean"), ("p50", "p50"), ("p95", "p95"), ("p99", "p99"), ("p999", "p99.9"), ("count", "count")):
                assert close(number(row[head.index(col)]), summaries[row[0]][key][stat]), (title, row[0], col)


def test_runs_table_shows_source_and_verdict(report):
    files, summaries = report
    head, rows = md_tables(files.markdown.read_text())["Runs"]
    by_run = {r[0]: r for r in rows}
    assert by_run["l40s-code"][head.index("source")] == "simulated"
    assert by_run["h100-sxm-chat"][head.index("verdict")] == "valid"
    assert all(by_run[k][head.index("completed")] == str(s["completed"]) for k, s in summaries.items())


def test_summary_csv_holds_raw_values(report):
    files, summaries = report
    rows = list(csv.DictReader(files.csv.open()))
    assert len(rows) == 9
    for row in rows:
        s = summaries[row["label"]]
        assert float(row["ttft_ms_p95"]) == pytest.approx(s["ttft_ms"]["p95"], rel=1e-12)
        assert float(row["output_token_throughput"]) == pytest.approx(s["output_token_throughput"], rel=1e-12)
        assert row["source"] == s["source"]
        # price_per_gpu_hour=2.0 on one GPU: $/1M output = 2 / (tok/s * 3600) * 1e6
        assert float(row["usd_per_1m_output_tokens"]) == pytest.approx(2.0 / (s["output_token_throughput"] * 3600) * 1e6)


def test_prices_used_and_definitions_are_in_the_report(report):
    files, _ = report
    tables = md_tables(files.markdown.read_text())
    head, rows = tables["Prices used"]
    assert {r[0] for r in rows} == {"h100-sxm", "a100-80gb", "l40s"}
    assert all(r[head.index("$/GPU-hour")] == "$2.00" for r in rows)
    terms = [r[0] for r in tables["Metric definitions"][1]]
    assert {"TTFT", "TPOT", "ITL", "E2E", "Goodput", "$ per 1M tokens", "Break-even"} <= set(terms)


def test_hostile_strings_are_escaped(make_run, tmp_path):
    evil = '<script>window.__pwned=1</script>|<img src=x onerror="window.__pwned=2">'
    d = make_run(tmp_path / "evil", label=evil, model="m</script><script>alert(1)</script>", n=40, profile="p|q")
    files = build_report([d], tmp_path / "out", OPTIONS)
    page = files.html.read_text()
    assert "<script>window.__pwned" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page  # shown as text in the tables
    assert "</script><script>alert" not in page  # nor in the chart data
    assert page.count("<script") == 3  # the JSON data block, the bundled Plotly and the page's own script
    md = files.markdown.read_text()
    head, rows = md_tables(md)["Runs"]
    assert len(rows[0]) == len(head)  # the | inside the label did not add a column
    import re

    assert re.search(r"(?<!\\)<", md) is None and "\\<script>" in md  # a backslash keeps Markdown from opening tags


def test_missing_records_still_make_a_report(make_run, tmp_path):
    d = make_run(tmp_path / "bare", n=20, telemetry=False, hardware=None)
    (d / "requests.parquet").unlink()
    files = build_report([d], tmp_path / "out", OPTIONS)
    md = files.markdown.read_text()
    assert "no requests.parquet" in md and "no price: the run does not name its hardware" in md
