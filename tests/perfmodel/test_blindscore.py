"""The shipped blind-set figures (data/blind-scores.yaml) are a fresh scoring of the blind file by the shipped model."""

from __future__ import annotations

import json
from pathlib import Path

from infermeter.perfmodel import blindscore

ROOT = Path(__file__).resolve().parents[2]
BLIND = ROOT / blindscore.BLIND_FILE


def test_the_shipped_blind_scores_are_a_fresh_scoring_of_the_blind_file(cli):
    shipped = blindscore.load()
    assert shipped is not None and shipped["source"] == blindscore.BLIND_FILE
    p = cli("plan", "--validate", str(BLIND), "--holdout", "none", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    fresh = blindscore.summarize(rows, blindscore.moe_flags(rows, BLIND))
    assert fresh == shipped["scores"], "stale: regenerate data/blind-scores.yaml (perfmodel/blindscore.py)"
    # every row counted once; the set plan quotes is not a token one (blind set 14: 27 rows; test_blind_schema pins each
    # set's audited count)
    assert fresh["moe"]["rows"] + fresh["dense"]["rows"] == len(rows) >= 25
    assert shipped["spread_saw_it"] == blindscore.in_spread(r["id"] for r in rows)  # says whether the 'inside' figures are still blind
    assert shipped["blind_time"] == blindscore.blind_time(r["id"] for r in rows)  # the figures of the day it was scored blind


def test_summarize_splits_by_class_and_counts_what_fell_inside():
    rows = [{"error": 0.5, "inside": False, "interval_basis": "unseen"}, {"error": -2.0, "inside": False},
            {"error": -0.1, "inside": True, "interval_basis": {"basis": "unseen"}}]
    s = blindscore.summarize(rows, [True, True, False])
    assert {k: v for k, v in s["moe"].items() if k != "unseen"} == {
        "rows": 2, "median_abs_error": 1.25, "max_abs_error": 2.0, "inside": 0}
    assert s["moe"]["unseen"] == {"rows": 1, "median_abs_error": 0.5, "max_abs_error": 0.5, "inside": 0}
    assert s["dense"]["rows"] == 1 and s["dense"]["inside"] == 1 and s["dense"]["unseen"]["inside"] == 1


def test_blind_time_takes_the_figures_the_history_recorded_when_the_set_was_blind(tmp_path, monkeypatch):
    from infermeter.perfmodel import freshpub
    from infermeter.perfmodel.freshpub import Record

    recs = [Record("b9", "a" * 40, "x1", "p", "moe", "tpot_ms", 10.0, 20.0, 10.0, 40.0),  # predicted twice the value
            Record("b9", "a" * 40, "x2", "p", "moe", "tpot_ms", 10.0, 12.0, 6.0, 24.0),
            Record("b9", "a" * 40, "x3", "p", "dense", "tpot_ms", 10.0, 9.0, 4.5, 18.0),
            Record("b8", "b" * 40, "y1", "q", "dense", "tpot_ms", 10.0, 30.0, 15.0, 60.0)]
    monkeypatch.setattr(freshpub, "load", lambda path=None: recs)
    got = blindscore.blind_time(["x1", "x2", "x3", "not-in-history"])
    assert got == {"scored_at": ["a" * 40], "scores": {"moe": {"rows": 2, "median_abs_error": 0.6, "max_abs_error": 1.0},
                                                         "dense": {"rows": 1, "median_abs_error": 0.1, "max_abs_error": 0.1}}}
    assert blindscore.blind_time(["nothing"]) is None
