"""Throughput of a closed loop over its busy window, and of an open loop from its send rate (hand-computed)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from infermeter.study.saturation import arrival_throughput, steady_throughput


def _table(rows: list[tuple[float, float, float, float, int, str]]) -> pa.Table:
    cols = list(zip(*rows))
    return pa.table({"intended_at": pa.array(cols[0], pa.float64()), "sent_at": pa.array(cols[1], pa.float64()),
                     "first_token_at": pa.array(cols[2], pa.float64()), "ended_at": pa.array(cols[3], pa.float64()),
                     "completion_tokens": pa.array(cols[4], pa.int64()), "outcome": pa.array(cols[5]),
                     "prompt_tokens": pa.array([100] * len(rows), pa.int64()),
                     "stream_tokens": pa.array(cols[4], pa.int64()), "phase": pa.array(["measure"] * len(rows))})


def test_steady_window_spreads_tokens_over_generation() -> None:
    # two streams: r0 0->3 (20 tok from t=1), r1 0->5 (40 from 1), r2 3->8 (40 from 4), r3 5->9 (30 from 6),
    # r4 8->10 (10 from 9). Window [sent[2], sent[-1]] = [3, 8): r1 half of 40, r2 all 40, r3 2/3 of 30 -> 80 tokens.
    t = _table([(0, 0, 1, 3, 20, "ok"), (0, 0, 1, 5, 40, "ok"), (3, 3, 4, 8, 40, "ok"), (5, 5, 6, 9, 30, "ok"),
                (8, 8, 9, 10, 10, "ok")])
    s = steady_throughput(t, concurrency=2)
    assert (s.start_s, s.end_s, s.window_s) == (3.0, 8.0, 5.0)
    assert s.output_tokens_per_s == pytest.approx(80 / 5)
    assert s.requests_per_s == pytest.approx(16 / 28)  # mean output 28 tokens per request
    assert s.input_tokens_per_s == pytest.approx(16 / 28 * 100)
    assert s.total_tokens_per_s == pytest.approx(16 + 16 / 28 * 100)


def test_too_few_requests_for_a_window_gives_none() -> None:
    t = _table([(0, 0, 1, 3, 20, "ok"), (0, 0, 1, 5, 40, "ok"), (3, 3, 4, 8, 40, "ok")])
    assert steady_throughput(t, concurrency=2) is None


def test_arrival_rate_counts_successes_and_keeps_the_schedule_rate() -> None:
    # five sends one second apart (send rate 4 gaps / 4 s = 1/s), intended a little denser; one of five failed
    t = _table([(0, 0, 0.5, 1, 10, "ok"), (0.9, 1, 1.5, 2, 20, "ok"), (1.8, 2, 2.5, 3, 30, "error"),
                (2.7, 3, 3.5, 4, 40, "ok"), (3.6, 4, 4.5, 5, 50, "ok")])
    s = arrival_throughput(t)
    assert s.send_rate_per_s == pytest.approx(1.0)
    assert s.schedule_rate_per_s == pytest.approx(4 / 3.6)
    assert s.requests_per_s == pytest.approx(0.8)
    assert s.output_tokens_per_s == pytest.approx(0.8 * (10 + 20 + 40 + 50) / 4)
