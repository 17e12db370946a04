"""timeseries: window grid, cumulative ramps, windowed quantiles and file signals, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from infermeter.analysis.compare import RequestArrays
from infermeter.errors import DataError
from infermeter.report.timeseries import client_signals, cumulative_ramps, file_signals, window_grid, windowed_quantile


def test_window_grid_uses_1_2_5_steps():
    g = window_grid(60.0)  # 60/150 = 0.4 -> 0.5 s
    assert g[1] - g[0] == pytest.approx(0.5) and g[-1] == pytest.approx(60.0) and g.size == 121
    assert window_grid(7.0, target_windows=7)[1] == pytest.approx(1.0)
    assert window_grid(30.0, target_windows=20)[1] == pytest.approx(2.0)  # 1.5 -> 2


def test_cumulative_ramps_spread_amounts_evenly():
    grid = np.array([0.0, 1.0, 2.0, 5.0, 10.0, 12.0])
    # 10 units over [0, 10]; 3 units at once at t=2; one span with a NaN end is ignored
    f = cumulative_ramps(np.array([0.0, 2.0, 1.0]), np.array([10.0, 2.0, np.nan]), np.array([10.0, 3.0, 7.0]), grid)
    assert f == pytest.approx([0.0, 1.0, 5.0, 8.0, 13.0, 13.0])


def test_windowed_quantile_nearest_rank_and_gaps():
    grid = np.array([0.0, 1.0, 2.0, 3.0])
    times = np.array([0.1, 0.2, 0.3, 0.4, 2.5, 2.6])
    values = np.array([4.0, 1.0, 3.0, 2.0, 10.0, np.nan])
    q = windowed_quantile(times, values, grid, 0.5)
    assert q[0] == 2.0 and np.isnan(q[1]) and q[2] == 10.0  # ceil(0.5*4) = 2nd smallest


def test_client_signals_on_two_requests():
    # request A: sent 0, first token 0.5, ends 2 (10 tokens); B: sent 1, first token 1.5, ends 3 (4 tokens)
    m = RequestArrays(
        ok=np.array([True, True]), error=np.array([False, False]), sent_at=np.array([0.0, 1.0]),
        first_token_at=np.array([0.5, 1.5]), ended_at=np.array([2.0, 3.0]), ttft_ms=np.array([500.0, 500.0]),
        tpot_ms=np.array([np.nan, np.nan]), e2e_ms=np.array([2000.0, 2000.0]), output_tokens=np.array([10.0, 4.0]))
    sig = {s.key: s for s in client_signals(m, np.array([0.0, 1.0, 2.0, 3.0, 4.0]))}
    sent, done = sig["request_rate"].series
    assert sent.v.tolist() == [1, 1, 0, 0] and done.v.tolist() == [0, 0, 1, 1]
    assert sig["in_flight"].series[0].v == pytest.approx([1.0, 2.0, 1.0, 0.0])
    # A: 10 tokens over [0.5, 2] = 6.67/s; B: 4 tokens over [1.5, 3] = 2.67/s
    assert sig["token_rate"].series[0].v == pytest.approx([10 / 3, 10 * 2 / 3 + 4 / 3, 8 / 3, 0.0])
    assert sig["ttft_p95"].series[0].v[0] == 500.0 and sig["ttft_p95"].series[0].v[1] == 500.0


def test_file_signals_scale_fractions_and_split_gpus(tmp_path):
    p = tmp_path / "server_metrics.parquet"
    pq.write_table(pa.table({"t": [0.0, 1.0], "kv_cache_usage": [0.25, 0.5], "num_requests_waiting": [1, 3],
                             "num_requests_running": [4, 5], "engine": ["vllm", "vllm"]}), p)
    sig = {s.key: s for s in file_signals(p)}
    assert sig["kv_cache"].unit == "%" and sig["kv_cache"].series[0].v.tolist() == [25.0, 50.0]
    assert [s.name for s in sig["queue"].series] == ["num requests waiting", "num requests running"]
    assert "engine" not in sig  # text columns are not signals
    g = tmp_path / "gpu.parquet"
    pq.write_table(pa.table({"t": [0.0, 0.0, 1.0, 1.0], "gpu": ["0", "1", "0", "1"], "power_w": [100.0, 200.0, 110.0, 210.0],
                             "clock_event_reasons": [0, 0, 4, 4]}), g)
    sig = {s.key: s for s in file_signals(g)}
    assert set(sig) == {"gpu_power"}
    assert [(s.name, s.v.tolist()) for s in sig["gpu_power"].series] == [
        ("power w (gpu 0)", [100.0, 110.0]), ("power w (gpu 1)", [200.0, 210.0])]


def test_file_signals_average_many_samples_and_need_t(tmp_path):
    p = tmp_path / "s.parquet"
    t = np.arange(1000, dtype=float)
    pq.write_table(pa.table({"t": t, "num_requests_running": t}), p)
    s = file_signals(p, max_points=10)[0].series[0]
    assert s.t.size == 10 and s.v[0] == pytest.approx(np.arange(100).mean(), abs=0.6)
    pq.write_table(pa.table({"time": [1.0]}), p)
    with pytest.raises(DataError, match="no 't' column"):
        file_signals(p)


def test_counters_become_rates_and_histograms_windowed_means(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from infermeter.report.timeseries import file_signals

    path = tmp_path / "server_metrics.parquet"
    pq.write_table(pa.table({"t": [0.0, 1.0, 2.0], "num_preemptions": [0.0, 2.0, 2.0],
                             "ttft_seconds_sum": [0.0, 1.0, 3.0], "ttft_seconds_count": [0.0, 2.0, 4.0]}), path)
    sig = {s.key: s for s in file_signals(path)}
    assert sig["preemptions_rate"].series[0].v.tolist() == [2.0, 0.0]
    assert sig["ttft_seconds_mean"].series[0].v.tolist() == [500.0, 1000.0]
    assert "num_preemptions" not in sig and "ttft_seconds_count" not in sig
