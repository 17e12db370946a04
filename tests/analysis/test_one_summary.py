"""One accumulator, every path: the same records give the same summary however they are summarized.

A simulated run (summarized batch by batch as the twin finishes requests) and a measured run
against the emulator (summarized from its journal) are each summarized again from their records
on disk -- in one table, in uneven batches, by the soak reader, and by ``infermeter summarize`` --
and every path must give the same ``summary.json``, figure for figure.
"""

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from infermeter.analysis.accumulator import Accumulator, build_summary
from infermeter.engines.emulator import EmulatorProcess
from infermeter.measure import Measurement, RunConfig, summarize_dir
from infermeter.measure.simplan import SimPlan
from infermeter.measure.soak import summarize_soak
from infermeter.records import store
from infermeter.twin.spec import TwinSpec

RUN_KEYS = ("run_dir",)  # where the files are, not what they say


def _paths(run_dir):
    run = json.loads((run_dir / "run.json").read_text())
    table = pq.read_table(run_dir / "requests.parquet")
    reference = {k: v for k, v in json.loads((run_dir / "summary.json").read_text()).items() if k not in RUN_KEYS}
    acc = Accumulator.for_run(run)
    for lo in range(0, table.num_rows, 37):
        acc.add(table.slice(lo, 37))
    paths = {
        "one table": build_summary(table, run=run).to_json(),
        "batches of 37": acc.summary(run).to_json(),
        "soak reader": summarize_soak(run_dir, run),
    }
    return reference, paths


def _same(reference, paths):
    assert reference["completed"] > 100
    for name, got in paths.items():
        got = {k: v for k, v in got.items() if k not in RUN_KEYS}
        diff = [k for k in set(reference) | set(got) if reference.get(k) != got.get(k)]
        assert not diff, f"{name}: {diff}"


def test_a_simulated_run_summarizes_the_same_on_every_path(tmp_path):
    cfg = RunConfig(rate=20, requests=400, warmup=10, seed=1, input_tokens="200,50", output_tokens="40,10",
                    slo={"ttft_ms": 200, "tpot_ms": 30}, out=str(tmp_path / "sim"))
    res = SimPlan(cfg, TwinSpec(model="llama-3.1-8b", gpu="h100-sxm"), token_times="on").run()
    reference, paths = _paths(res.run_dir)
    paths["summarize"] = summarize_dir(res.run_dir)
    _same(reference, paths)


def test_a_closed_loop_with_tied_send_times_summarizes_the_same_on_every_path(tmp_path):
    # 64 streams start at 0.0 and successors of requests ending in one engine step share their send time:
    # the saturation's earliest/latest groups must not depend on how the records are batched
    cfg = RunConfig(concurrency=64, requests=600, warmup=0, seed=2, input_tokens="200", output_tokens="40,10",
                    out=str(tmp_path / "c64"))
    res = SimPlan(cfg, TwinSpec(model="llama-3.1-8b", gpu="h100-sxm"), token_times="on").run()
    table = pq.read_table(res.run_dir / "requests.parquet")
    intended = table.column("intended_at").to_pylist()
    assert len(set(intended)) < len(intended) - 64  # ties, many of them
    reference, paths = _paths(res.run_dir)
    paths["summarize"] = summarize_dir(res.run_dir)
    _same(reference, paths)


def test_a_measured_run_summarizes_the_same_on_every_path(tmp_path):
    with EmulatorProcess(["--ttft-ms", "10", "--itl-ms", "2", "--max-concurrency", "8"]) as emu:
        cfg = RunConfig(url=emu.base_url, concurrency=8, requests=200, warmup=5, output_tokens="12", input_tokens="30",
                        scrape=False, calibrate=False, history=False, slo={"ttft_ms": 500}, out=str(tmp_path / "m"))
        res = asyncio.run(Measurement(cfg).run())
    reference, paths = _paths(res.run_dir)
    before = (res.run_dir / store.SUMMARY).read_text()
    paths["summarize"] = summarize_dir(res.run_dir)
    _same(reference, paths)
    assert json.loads(before)["completed"] == 200


@pytest.mark.parametrize("limit", [0, 10**9])
def test_exact_and_histogram_modes_agree_on_counts_and_means(tmp_path, limit):
    """Past ``exact_limit`` samples a metric continues in a histogram; counts and means stay exact."""
    cfg = RunConfig(rate=30, requests=300, seed=2, out=str(tmp_path / f"s{limit}"))
    res = SimPlan(cfg, TwinSpec(), token_times="on").run()
    run = json.loads((res.run_dir / "run.json").read_text())
    table = pq.read_table(res.run_dir / "requests.parquet")
    acc = Accumulator.for_run(run, exact_limit=limit)
    acc.add(table)
    s, exact = acc.summary(run), build_summary(table, run=run)
    assert s.ttft_ms.count == exact.ttft_ms.count and s.ttft_ms.mean == pytest.approx(exact.ttft_ms.mean, rel=1e-9)
    assert s.itl_ms.p50 == pytest.approx(exact.itl_ms.p50, rel=0.006)
    assert s.summary_method == ("exact" if limit else s.summary_method)
    if not limit:
        assert s.summary_method.startswith("streaming") and "log-bucket" in s.percentiles["method"]
