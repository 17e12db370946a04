"""aggregate: CDF points, histogram shares, and a run's aggregates from its files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infermeter.report.aggregate import aggregate_run, distribution
from infermeter.report.rundir import load_run_dir


def test_distribution_nearest_rank_cdf_and_histogram():
    d = distribution(np.append(np.arange(1.0, 101.0), np.nan))
    cdf = dict((p, v) for v, p in d.cdf)
    assert d.n == 100 and cdf[0.5] == 50.0 and cdf[0.99] == 99.0 and cdf[1.0] == 100.0 and cdf[0.0] == 1.0
    assert d.log  # 100/1 > 10: log-spaced bins
    assert sum(s for _, _, s in d.hist) == pytest.approx(1.0)
    assert d.hist[0][0] == 1.0 and d.hist[-1][1] == pytest.approx(100.0)
    flat = distribution(np.array([5.0, 5.0]))
    assert not flat.log and flat.hist[0][2] == 1.0
    assert distribution(np.array([np.nan])) is None


def test_aggregate_run_reads_records_and_telemetry(make_run, tmp_path):
    d = make_run(tmp_path / "r", n=300, rate=30.0)
    agg = aggregate_run(load_run_dir(d))
    summary = json.loads((d / "summary.json").read_text())
    assert agg.n_requests == 300
    assert set(agg.distributions) == {"ttft_ms", "tpot_ms", "e2e_ms"}
    assert agg.distributions["ttft_ms"].cdf[-1][0] == pytest.approx(summary["ttft_ms"]["max"])
    keys = [s.key for s in agg.signals]
    assert keys[:4] == ["request_rate", "token_rate", "in_flight", "ttft_p95"]
    assert {"kv_cache", "queue", "gpu_temperature", "gpu_power"} <= set(keys)
    sent = agg.signals[0].series[0]
    inside = sent.t < 9.5  # full windows while sending at 30 req/s
    assert np.mean(sent.v[inside]) == pytest.approx(30.0, rel=0.05)
    assert agg.notes == []


def test_aggregate_run_without_records_leaves_notes(make_run, tmp_path):
    d = make_run(tmp_path / "r", n=20, telemetry=False)
    (d / "requests.parquet").unlink()
    agg = aggregate_run(load_run_dir(d))
    assert agg.distributions == {} and agg.signals == []
    assert any("no requests.parquet" in n for n in agg.notes) and "no GPU telemetry recorded" in agg.notes
