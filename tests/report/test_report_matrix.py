"""The configuration × profile matrix: placement, best value per profile, invalid runs never best."""

from __future__ import annotations

import json

from infermeter.analysis.prices import PriceOptions
from infermeter.report.matrix import matrix_tables, representative
from infermeter.report.pricing import price_runs
from infermeter.report.rundir import load_run_dir, load_run_dirs


def tables_for(paths):
    runs = load_run_dirs(paths)
    leaves = [leaf for r in runs for leaf in r.leaves()]
    costs, _ = price_runs(leaves, PriceOptions(price_per_gpu_hour=2.0))
    return {t.key: t for t in matrix_tables(runs, costs)}


def column(table, profile):
    j = table.columns.index(profile)
    return {row[0].display: row[j] for row in table.rows}


def test_three_by_three_matrix_marks_the_best_per_profile(grid_runs):
    tables = tables_for(grid_runs)
    assert list(tables) == ["matrix_throughput", "matrix_ttft_p95", "matrix_tpot_p95", "matrix_error_rate", "matrix_usd_per_1m"]
    ttft = tables["matrix_ttft_p95"]
    assert ttft.columns == ["configuration", "chat", "code", "rag"]
    assert [r[0].display for r in ttft.rows] == ["a100-80gb", "h100-sxm", "l40s"]
    summaries = {json.loads((d / "summary.json").read_text())["label"]: json.loads((d / "summary.json").read_text())
                 for d in grid_runs}
    for prof in ("chat", "code", "rag"):
        cells = column(ttft, prof)
        # the fastest hardware in the fixture has the lowest TTFT p95, and only it is marked
        assert [hw for hw, c in cells.items() if c.best] == ["h100-sxm"]
        assert cells["a100-80gb"].value == summaries[f"a100-80gb-{prof}"]["ttft_ms"]["p95"]
        # same $/GPU-hour everywhere: the cheapest per token is the highest throughput
        usd = column(tables["matrix_usd_per_1m"], prof)
        thr = column(tables["matrix_throughput"], prof)
        best_thr = max(thr, key=lambda hw: thr[hw].value)
        assert [hw for hw, c in usd.items() if c.best] == [best_thr]
        assert [hw for hw, c in thr.items() if c.best] == [best_thr]
        # every run has a 0 % error rate: nothing is marked
        assert not any(c.best for c in column(tables["matrix_error_rate"], prof).values())
    assert column(tables["matrix_ttft_p95"], "code")["l40s"].display.endswith("(sim.)")  # the simulated run


def test_invalid_run_is_never_best(make_run, tmp_path):
    fast = make_run(tmp_path / "fast", label="fast", hardware="h100-sxm", ttft_s=0.05, n=60)
    slow = make_run(tmp_path / "slow", label="slow", hardware="a100-80gb", ttft_s=0.3, n=60)
    s = json.loads((fast / "summary.json").read_text())
    s.update(valid=False, invalid_reasons=["schedule_lag: the client fell behind"])
    (fast / "summary.json").write_text(json.dumps(s))
    cells = column(tables_for([fast, slow])["matrix_ttft_p95"], "chat")
    assert not cells["h100-sxm"].best and cells["h100-sxm"].display.endswith("(invalid)")
    assert cells["a100-80gb"].best is False  # a single valid value has nothing to beat


def test_sweep_is_represented_by_its_best_valid_step(make_sweep, tmp_path):
    sweep = load_run_dir(make_sweep(tmp_path / "sw", [5.0, 10.0, 20.0]))
    best = max(sweep.steps, key=lambda s: s.summary["output_token_throughput"])
    assert representative(sweep) is best


def test_one_configuration_one_profile_has_no_matrix(make_run, tmp_path):
    assert tables_for([make_run(tmp_path / "a", n=30)]) == {}


def test_sweep_table_shows_meets_slo_and_the_capacity(tmp_path):
    from infermeter.analysis.results import Summary
    from infermeter.report.rundir import RunDir
    from infermeter.report.tables import sweep_table

    steps = tuple(RunDir(path=tmp_path / "steps" / str(k), summary=Summary(request_throughput=r, valid=True))
                  for k, r in enumerate((1.0, 2.0)))
    top = {"slo": {"ttft_ms": 300}, "steps": [{"step_dir": "steps/0", "meets_slo": True},
                                             {"step_dir": "steps/1", "meets_slo": False}],
           "capacity": {"dimension": "rate", "rate": 1.5, "bracket": [1.5, 2.0], "step": 0}}
    t = sweep_table(RunDir(path=tmp_path, summary=Summary.from_json(top), steps=steps))
    col = t.columns.index("meets SLO")
    assert [row[col].display for row in t.rows] == ["yes", "no"]
    assert t.note == "Capacity under ttft_ms ≤ 300: 1.5 req/s (step 0); the SLO broke at 2 req/s."
