"""History in DuckDB: index, filter (last week's runs), trend, SQL over runs and their records."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from infermeter.errors import ConfigError, DataError, UserError
from infermeter.report.history import index_run, list_runs, metric_column, parse_when, run_sql, trend

NOW = dt.datetime(2025, 3, 20, 12, 0, tzinfo=dt.timezone.utc)


def iso(days_ago: float) -> str:
    return (NOW - dt.timedelta(days=days_ago)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def db(tmp_path, make_run, make_sweep):
    path = tmp_path / "h.duckdb"
    runs = {
        "old": make_run(tmp_path / "old", label="old", hardware="a100-80gb", started_at=iso(20), n=50, ttft_s=0.3),
        "recent": make_run(tmp_path / "recent", label="recent", hardware="h100-sxm", started_at=iso(3), n=60, ttft_s=0.2),
        "today": make_run(tmp_path / "today", label="today", hardware="h100-sxm", profile="rag", started_at=iso(0.1),
                          n=70, ttft_s=0.1, source="simulated"),
    }
    for d in runs.values():
        index_run(d, path, now=NOW)
    return path, runs


def test_last_weeks_runs_are_found(db):
    path, _ = db
    week = list_runs(path, since=parse_when("7d", NOW))
    assert [r["label"] for r in week] == ["today", "recent"]  # newest first
    assert [r["label"] for r in list_runs(path, hardware="H100*")] == ["today", "recent"]
    assert [r["label"] for r in list_runs(path, profile="rag")] == ["today"]
    assert [r["label"] for r in list_runs(path, source="measured", until=parse_when("7d", NOW))] == ["old"]
    assert [r["label"] for r in list_runs(path, limit=1)] == ["today"]


def test_reindexing_updates_instead_of_duplicating(db):
    path, runs = db
    summary = json.loads((runs["old"] / "summary.json").read_text())
    summary["ttft_ms"]["p95"] = 1234.5
    (runs["old"] / "summary.json").write_text(json.dumps(summary))
    index_run(runs["old"], path, now=NOW)
    rows = list_runs(path)
    assert len(rows) == 3 and next(r for r in rows if r["label"] == "old")["ttft_p95_ms"] == 1234.5


def test_trend_is_oldest_first_with_summary_values(db):
    path, runs = db
    rows = trend("ttft_ms.p95", path)
    assert [r["label"] for r in rows] == ["old", "recent", "today"]
    for r in rows:
        s = json.loads((runs[r["label"]] / "summary.json").read_text())
        assert r["value"] == pytest.approx(s["ttft_ms"]["p95"])
    assert [r["label"] for r in trend("output_token_throughput", path, hardware="h100-sxm")] == ["recent", "today"]


def test_sql_over_runs_and_requests(db):
    path, runs = db
    cols, rows = run_sql("SELECT label, count(*) AS n FROM requests JOIN runs USING (run_id) GROUP BY 1 ORDER BY 1", path)
    assert cols == ["label", "n"] and rows == [("old", 50), ("recent", 60), ("today", 70)]
    _, rows = run_sql("SELECT count(*) FROM runs WHERE summary->>'$.source' = 'simulated'", path)
    assert rows == [(1,)]
    with pytest.raises(UserError, match="read-only"):
        run_sql("DELETE FROM runs", path)
    with pytest.raises(UserError, match="sql: "):
        run_sql("SELEC nonsense", path)


def test_sweeps_index_each_step(tmp_path, make_sweep):
    path = tmp_path / "h.duckdb"
    ids = index_run(make_sweep(tmp_path / "sw", [5.0, 10.0]), path)
    assert [i.rsplit("/", 2)[-2:] for i in ids] == [["steps", "0"], ["steps", "1"]]
    _, rows = run_sql("SELECT step, target_rate FROM runs ORDER BY step", path)
    assert rows == [("0", 5.0), ("1", 10.0)]


def test_inputs_are_checked(tmp_path, monkeypatch):
    assert parse_when("2025-01-31", NOW) == dt.datetime(2025, 1, 31, tzinfo=dt.timezone.utc)
    assert parse_when("12h", NOW) == NOW - dt.timedelta(hours=12)
    with pytest.raises(ConfigError, match="--since 'last tuesday'"):
        parse_when("last tuesday", NOW)
    assert metric_column("ttft_ms.p95") == "ttft_p95_ms" and metric_column("error_rate") == "error_rate"
    with pytest.raises(ConfigError, match="unknown metric"):
        metric_column("ttft_p42")
    monkeypatch.setenv("INFERMETER_HISTORY_DB", str(tmp_path / "none.duckdb"))
    with pytest.raises(DataError, match="no history database yet"):
        list_runs()
