"""Soak storage: durations, part files, checkpoints, the merged parquet, and what a killed run leaves."""

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from infermeter.analysis.accumulator import Accumulator as RecordAggregator
from infermeter.durations import parse_duration
from infermeter.errors import ConfigError
from infermeter.load.soak import PartSink, lost_records, merge_parts, part_dir, part_dirs, read_state
from infermeter.records import store
from infermeter.records.record import RequestRecord


@pytest.mark.parametrize("text,seconds", [("72h", 259200.0), ("1h30m", 5400.0), ("45m", 2700.0), ("90s", 90.0),
                                          ("2d", 172800.0), ("12.5", 12.5), ("1.5h", 5400.0), (30, 30.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["3x", "h", "1h20", "ten minutes"])
def test_bad_durations_name_the_flag(bad):
    with pytest.raises(ConfigError, match="--window"):
        parse_duration(bad, "--window")


def rec(i, t):
    return RequestRecord(request_id=i, intended_at=t, sent_at=t, first_token_at=t + 0.1, ended_at=t + 0.5,
                         chunk_times=[t + 0.1, t + 0.3, t + 0.5], chunk_tokens=[1, 1, 1], prompt_tokens=10,
                         completion_tokens=3, stream_tokens=3, usage_source="server")


def test_parts_rotate_seal_and_merge_into_one_parquet(tmp_path):
    agg = RecordAggregator(window_s=10.0)
    sink = PartSink(tmp_path, agg, part_records=100)
    for i in range(250):
        sink.write(rec(i, i * 0.1))
    run = {"load": {"open_loop": True}}
    summary = asyncio.run(_checkpoint_then_finish(sink, run, tmp_path))
    assert summary["completed"] == 250 and summary["partial"] is None
    table = pq.read_table(tmp_path / store.PARQUET)
    assert table.column("request_id").to_pylist() == list(range(250))
    assert not (tmp_path / "parts").exists() and not (tmp_path / "checkpoint.json").exists()
    # 250 requests ended at 0.5 .. 25.4 s: windows of 10 s hold 95, 100, 55
    assert [w["completed"] for w in summary["windows"]["series"]] == [95, 100, 55]


async def _checkpoint_then_finish(sink, run, tmp_path):
    await sink.checkpoint(run, clock_s=12.0)
    cp = json.loads((tmp_path / "checkpoint.json").read_text())
    assert cp["records"] == 250 and cp["parts"] == 3 and cp["clock_s"] == 12.0
    partial = store.read_json(tmp_path / store.SUMMARY)
    assert partial["partial"] is True and partial["completed"] == 250
    assert [d.name for d in part_dirs(tmp_path)] == ["000000", "000001", "000002", "000003"]
    final = await sink.finish(run)
    final.setdefault("partial", None)
    return final


def test_a_killed_run_is_read_back_with_its_gaps(tmp_path):
    # part 0 sealed, part 1 still a journal with a torn last line; ids 5 and 7 never got a record
    d0 = part_dir(tmp_path, 0)
    j = store.Journal(d0)
    for i in range(5):
        j.write(rec(i, i * 0.1))
    j.close()
    from infermeter.load.soak import seal_part

    seal_part(d0)
    j1 = store.Journal(part_dir(tmp_path, 1))
    j1.write(rec(6, 0.6))
    j1.write(rec(8, 0.8))
    j1.close()
    with open(part_dir(tmp_path, 1) / store.JOURNAL, "ab") as fh:
        fh.write(b'{"request_id": 9, "phase": "meas')
    state = read_state(tmp_path, {})
    assert state.next_index == 9 and state.missing == [5, 7] and state.records == 7
    assert state.last_seen_s == pytest.approx(1.3)
    assert state.aggregator.completed == 7
    assert (part_dir(tmp_path, 1) / store.PARQUET).exists()


def test_lost_records_are_cancelled_with_their_schedule_time():
    t = lost_records([3, 4], {3: 1.5, 4: 2.0}, warmup=4)
    rows = t.to_pylist()
    assert [(r["request_id"], r["phase"], r["outcome"], r["intended_at"]) for r in rows] == [
        (3, "warmup", "cancelled", 1.5), (4, "measure", "cancelled", 2.0)]


def test_merge_parts_of_an_empty_run(tmp_path):
    assert merge_parts(tmp_path) == 0
    assert pq.read_table(tmp_path / store.PARQUET).num_rows == 0
