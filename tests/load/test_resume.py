"""Where a resumed run continues: the first index without a record, shifted to now."""

from types import SimpleNamespace

import numpy as np
import pytest

from infermeter.load.resume import resume_point
from infermeter.load.shapes import ConstantArrivalRate, ConstantConcurrency, TraceReplay


def test_open_loop_continues_the_schedule_from_now():
    # constant 4 req/s: offsets k/4; index 10 was due at 2.5 s; now is 100 s on the run clock
    p = resume_point(ConstantArrivalRate(rate_per_s=4, arrival="constant"), seed=0, next_index=10, missing=[8],
                     prev_shift_s=0.0, last_seen_s=2.6, now_s=100.0, lead_s=0.5)
    assert p.first_index == 10 and p.next_offset_s == 2.5
    assert p.shift_s == pytest.approx(98.0) and p.gap_s == pytest.approx(98.0)
    assert p.lost_intended == {8: 2.0}


def test_second_resume_adds_only_the_new_downtime():
    shape = ConstantArrivalRate(rate_per_s=2, arrival="poisson")
    offsets = shape.arrivals(np.random.default_rng(5))
    o = [next(offsets) for _ in range(21)]
    p = resume_point(shape, seed=5, next_index=20, missing=[19], prev_shift_s=30.0, last_seen_s=o[19] + 30.2,
                     now_s=200.0, lead_s=0.0)
    assert p.shift_s == pytest.approx(200.0 - o[20])
    assert p.gap_s == pytest.approx(200.0 - o[20] - 30.0)
    assert p.lost_intended == {19: pytest.approx(o[19] + 30.0)}


def test_closed_loop_continues_its_schedule_time():
    # before the crash the schedule clock reached 50 - 10 = 40 s; it continues at now + lead
    p = resume_point(ConstantConcurrency(concurrency=4), seed=0, next_index=300, missing=[298, 299],
                     prev_shift_s=10.0, last_seen_s=50.0, now_s=80.0, lead_s=0.5)
    assert p.shift_s == pytest.approx(40.5) and p.gap_s == pytest.approx(30.5)
    assert p.lost_intended == {298: 50.0, 299: 50.0}


def test_replay_uses_the_trace_offsets():
    specs = [SimpleNamespace(arrival_s=t) for t in (0.0, 1.0, 3.0, 7.0)]
    p = resume_point(TraceReplay(time_scale=2.0), seed=0, next_index=2, missing=[], prev_shift_s=0.0,
                     last_seen_s=2.1, now_s=10.0, lead_s=0.0, make_specs=lambda: iter(specs))
    assert p.next_offset_s == 6.0 and p.shift_s == pytest.approx(4.0)


def test_schedule_already_finished():
    specs = [SimpleNamespace(arrival_s=0.0)]
    p = resume_point(TraceReplay(), seed=0, next_index=1, missing=[], prev_shift_s=3.0, last_seen_s=1.0,
                     now_s=10.0, make_specs=lambda: iter(specs))
    assert p.next_offset_s is None and p.shift_s == 3.0 and p.gap_s == 0.0
