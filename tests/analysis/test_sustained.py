"""One definition of sustained capacity, the same figure in study, capacity and cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infermeter.analysis.capacity import candidates_from
from infermeter.analysis.cost import cost_runs
from infermeter.analysis.prices import PriceOptions
from infermeter.analysis.results import Summary
from infermeter.analysis.sustained import (ARRIVAL, COMPLETION, WHOLE_RUN, capacity_of, capacity_step, sustained_rate,
                                           sustained_throughput)


def open_step(**kw: Any) -> dict[str, Any]:
    s = {"offered_rate": 8.0, "achieved_rate": 8.0, "completed": 236, "failed": 2, "cancelled": 2,
         "request_throughput": 5.5, "output_token_throughput": 550.0, "input_token_throughput": 1100.0,
         "goodput": 5.0, "meets_slo": True}
    s.update(kw)
    return s


def test_open_loop_sustained_rate_counts_the_load_not_the_drain() -> None:
    rps, basis = sustained_rate(open_step())
    assert rps == pytest.approx(8.0 * 236 / 240) and basis == ARRIVAL  # not the 5.5 of the whole run
    t = sustained_throughput(open_step())
    assert t["output_tokens_per_s"] == pytest.approx(550.0 * rps / 5.5)  # tokens follow the request rate


def test_saturated_open_loop_uses_what_completed_and_closed_loop_its_throughput() -> None:
    sat = open_step(saturated=True, saturation={"saturated": True, "completion_rate": 3.2})
    assert sustained_rate(sat) == (3.2, COMPLETION)
    closed = {"request_throughput": 4.0, "completed": 100, "achieved_rate": 9.0}
    assert sustained_rate(closed) == (4.0, WHOLE_RUN)
    assert sustained_rate({"sustained_rps": 7.26, "sustained_basis": "steady window"}) == (7.26, "steady window")


def test_capacity_of_a_search_is_its_capacity_steps_sustained_rate() -> None:
    steps = [open_step(offered_rate=2.0, achieved_rate=2.0), open_step(), open_step(offered_rate=9.0, meets_slo=False)]
    assert capacity_step(Summary(), steps) == 1
    assert capacity_step(Summary.from_json({"capacity": {"step": 0}}), steps) == 0  # the search names it
    cap = capacity_of(Summary.from_json({"steps": steps}), steps[1], 1)
    assert cap.requests_per_s == pytest.approx(8.0 * 236 / 240) and "step 1" in cap.basis
    one = capacity_of(Summary.from_json({**open_step(), "slo": {"ttft_ms": 500}}))  # one run: its sustained goodput
    assert one.requests_per_s == pytest.approx(8.0 * 236 / 240 * 5.0 / 5.5) and "goodput" in one.basis


def test_capacity_and_cost_size_a_study_cell_by_the_studys_own_capacity(tmp_path: Path) -> None:
    from infermeter.study.config import build_study
    from infermeter.study.runner import run_cells

    study = build_study({"model": "llama-3.1-8b", "configurations": ["h100-sxm"], "profiles": ["chat"],
                         "load": {"sync_requests": 2, "saturation_requests": 256, "rate_fractions": [0.3, 0.6],
                                  "requests": 60, "refine": 1}, "slo": {"ttft_ms": 5000}}, "t")
    [cell], _ = run_cells(study, tmp_path)
    assert cell.capacity is not None
    [cost] = cost_runs([cell.run_dir], options=PriceOptions(price_per_hour=10.0))
    [cand] = candidates_from([cost])
    # the same number, whatever reads the cell
    assert cand.capacity_rps == pytest.approx(cell.capacity["requests_per_s"])
    assert cost.subject.throughput.requests_per_s == pytest.approx(cell.capacity["requests_per_s"])
    on_disk = json.loads((Path(cell.run_dir) / "summary.json").read_text())
    step = on_disk["steps"][on_disk["capacity"]["step"]]
    assert step["sustained_rps"] == pytest.approx(cand.capacity_rps) and "sustained capacity" in cand.capacity_basis
