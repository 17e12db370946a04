"""Every scheduled request gets a record, whatever fails: an unencodable body, a value no column stores,
an exception out of the client, a journal write that fails part-way (disk full); and a run directory is
claimed by one writer only."""

import asyncio
import errno
import json
import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from infermeter.client.openai import ClientConfig, OpenAIClient
from infermeter.errors import OutputError
from infermeter.load.runner import Limits, Runner
from infermeter.load.shapes import ConstantConcurrency
from infermeter.records import outputs, store
from infermeter.records.record import ERROR_CLASSES, RequestRecord
from infermeter.workload.spec import RequestSpec


class FailingOs:
    """``os`` as the journal sees it, whose ``write`` fills the disk after ``ok_bytes``: the write that crosses
    the limit writes only up to it (a short write, as a full disk does), the next raises ENOSPC."""

    def __init__(self, ok_bytes: int, err: int = errno.ENOSPC) -> None:
        self.left = ok_bytes
        self.err = err
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(os, name)

    def write(self, fd: int, data) -> int:
        self.calls += 1
        if self.left <= 0:
            raise OSError(self.err, os.strerror(self.err))
        n = os.write(fd, bytes(data[: self.left]))
        self.left -= n
        return n


def _rec(i: int, **kw) -> RequestRecord:
    return RequestRecord(request_id=i, intended_at=i * 0.1, sent_at=i * 0.1, ended_at=i * 0.1 + 0.05,
                         first_token_at=i * 0.1 + 0.01, chunk_times=[i * 0.1 + 0.01], chunk_tokens=[1],
                         stream_tokens=1, completion_tokens=1, prompt_tokens=3, usage_source="server", **kw)


def test_a_journal_write_that_fails_part_way_keeps_whole_lines_and_fails_every_later_write(tmp_path, monkeypatch):
    line = len(store.encode_record(_rec(0)))
    fake = FailingOs(ok_bytes=int(line * 3.5))  # three records fit, the fourth is torn by the full disk
    monkeypatch.setattr(store, "os", fake)
    j = store.Journal(tmp_path)
    for i in range(3):
        j.write(_rec(i))
    with pytest.raises(OSError) as exc:
        j.write(_rec(3))
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(tmp_path / store.JOURNAL)
    calls = fake.calls
    with pytest.raises(OSError) as again:  # the journal does not try again: the run stops once
        j.write(_rec(4))
    assert again.value.errno == errno.ENOSPC and fake.calls == calls
    j.close()
    raw = (tmp_path / store.JOURNAL).read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 3  # the torn half line was taken back
    assert [r["request_id"] for r in store.read_journal(tmp_path / store.JOURNAL)] == [0, 1, 2]
    assert j.count == 3


def test_a_record_no_column_can_store_is_kept_as_a_minimal_failed_record(tmp_path):
    j = store.Journal(tmp_path)
    j.write(_rec(0, requested_output_tokens=10**300))  # orjson refuses it (max_tokens: 1e300 read as an int)
    j.write(_rec(1, error_detail="bad \ud800 text", outcome="error", error_class="http_5xx"))  # a lone surrogate
    j.write(_rec(2))
    j.close()
    # a value JSON holds but the int64 column does not: written by hand, as another writer might
    with open(tmp_path / store.JOURNAL, "a") as fh:
        fh.write(json.dumps(_rec(3).to_row() | {"prompt_tokens": 2**63}) + "\n")
    table = store.load_table(tmp_path)
    rows = {r["request_id"]: r for r in table.to_pylist()}
    assert sorted(rows) == [0, 1, 2, 3]  # every record written is a record kept
    for i, field in ((0, "requested_output_tokens"), (1, "error_detail"), (3, "prompt_tokens")):
        r = rows[i]
        assert r["outcome"] == "error" and r["error_class"] == "record_error"
        assert f"({field}=" in r["error_detail"] and (field == "error_detail" or r[field] is None)
        assert r["intended_at"] == pytest.approx(i * 0.1)  # what could be kept is kept
    assert "it had failed: http_5xx" in rows[1]["error_detail"]
    assert rows[2]["outcome"] == "ok" and rows[2]["error_class"] is None
    assert "record_error" in ERROR_CLASSES and "request_encoding_error" in ERROR_CLASSES


def test_a_prompt_that_cannot_be_encoded_is_a_failed_record_never_sent():
    spec = RequestSpec(index=0, prompt="hello \ud800 world", messages=None, max_tokens=8, input_tokens=3)
    client = OpenAIClient(ClientConfig(base_url="http://127.0.0.1:9", model="m"), session=None, clock=lambda: 1.5)
    rec = RequestRecord(request_id=0)
    asyncio.run(client.send(spec, rec))
    assert rec.outcome == "error" and rec.error_class == "request_encoding_error"
    assert rec.sent_at is None and rec.ended_at == 1.5 and "surrogates not allowed" in rec.error_detail
    store.encode_record(rec)  # and the record itself encodes


def _runner(send, on_record, n=200, concurrency=4):
    specs = iter(RequestSpec(index=i, prompt="p", messages=None, max_tokens=4, input_tokens=1) for i in range(n))
    t0 = time.perf_counter()
    return Runner(send=send, specs=specs, shape=ConstantConcurrency(concurrency=concurrency),
                  limits=Limits(requests=n), clock=lambda: time.perf_counter() - t0, on_record=on_record)


def test_an_exception_out_of_the_client_is_that_request_s_failure_not_a_lost_record():
    async def send(spec, rec):
        rec.sent_at = 0.0
        if spec.index % 3 == 0:
            raise RuntimeError("nobody foresaw this")
        rec.ended_at = 0.01

    got: list[RequestRecord] = []
    asyncio.run(_runner(send, got.append, n=30).run())
    assert sorted(r.request_id for r in got) == list(range(30))
    bad = [r for r in got if r.request_id % 3 == 0]
    assert all(r.outcome == "error" and r.error_class == "client_error" and "RuntimeError" in r.error_detail
               for r in bad)
    assert all(r.outcome == "ok" for r in got if r.request_id % 3)


def test_a_failed_record_write_stops_the_run_once_and_says_why():
    sent = []

    async def send(spec, rec):
        sent.append(spec.index)
        rec.sent_at = 0.0
        await asyncio.sleep(0.001)
        rec.ended_at = 0.01

    written: list[int] = []
    attempts = []

    def on_record(rec):
        attempts.append(rec.request_id)
        if len(written) >= 20:
            raise OSError(errno.ENOSPC, "No space left on device", "/x/requests.jsonl")
        written.append(rec.request_id)

    runner = _runner(send, on_record, n=2000, concurrency=4)
    stats = asyncio.run(runner.run())
    failure = stats.extra["write_failure"]
    assert stats.halted and "No space left on device" in stats.halted and "/x/requests.jsonl" in stats.halted
    assert failure["errno"] == errno.ENOSPC and failure["path"] == "/x/requests.jsonl"
    assert len(attempts) == 21  # one failed write, then no more tries
    assert len(sent) <= 20 + 1 + 4  # it stopped sending: at most the requests in flight at the failure
    assert failure["unwritten"] == len(sent) - 20  # each one that ended after it is counted, none vanish silently


def test_two_claims_on_one_folder_at_once_leave_exactly_one_holder(tmp_path):
    d = tmp_path / "out"
    barrier = threading.Barrier(8)
    results: list[str] = []
    held = threading.Event()
    release = threading.Event()

    def claim() -> None:
        barrier.wait()
        try:
            with outputs.claim_run_dir(d):
                results.append("won")
                held.set()
                release.wait(10)
        except OutputError as exc:
            results.append(str(exc))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    held.wait(10)
    deadline = time.monotonic() + 10
    while len(results) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(10)
    assert results.count("won") == 1, results
    assert all("is writing to it" in r and str(d) in r for r in results if r != "won"), results
    assert not (d / outputs.LOCK).exists()  # released


def test_a_claim_refuses_a_folder_that_holds_a_run_and_a_stale_lock_names_itself(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / store.JOURNAL).write_text("")
    with pytest.raises(OutputError, match="already holds a run"):
        with outputs.claim_run_dir(d):
            pass
    assert not (d / outputs.LOCK).exists() and (d / store.JOURNAL).exists()
    # a killed run's lock (a pid no process has) beside that run's records: refused, naming the dead pid
    e = tmp_path / "stale"
    e.mkdir()
    (e / outputs.LOCK).write_text("999999999\n")
    (e / store.JOURNAL).write_text('{"id": 1}\n')
    with pytest.raises(OutputError, match=r"did not finish \(pid 999999999, gone\)"):
        with outputs.claim_run_dir(e):
            pass
    assert (e / outputs.LOCK).read_text() == "999999999\n" and (e / store.JOURNAL).read_text() == '{"id": 1}\n'


def test_a_killed_runs_lock_in_a_folder_with_nothing_measured_is_taken_over(tmp_path):
    e = tmp_path / "stale"
    e.mkdir()
    (e / outputs.LOCK).write_text("999999999\n")  # a pid no process has; no run files beside it
    with outputs.claim_run_dir(e) as d:
        assert d == e and (e / outputs.LOCK).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
        assert [p.name for p in e.iterdir()] == [outputs.LOCK]  # the renamed-away lock is gone too
    assert not (e / outputs.LOCK).exists()
    # a live holder's lock is never taken, even in an empty folder
    (e / outputs.LOCK).write_text(f"{os.getpid()}\n")
    with pytest.raises(OutputError, match=rf"another infermeter run \(pid {os.getpid()}\)"):
        with outputs.claim_run_dir(e):
            pass
    assert (e / outputs.LOCK).read_text() == f"{os.getpid()}\n"


def test_a_lock_written_on_another_host_is_never_taken_over(tmp_path):
    """A folder shared between machines (or containers: their own pids): a pid that is not here says nothing
    about the run that wrote it there, which may be alive and about to write its files."""
    e = tmp_path / "shared"
    e.mkdir()
    (e / outputs.LOCK).write_text("999999999 some-other-host\n")
    with pytest.raises(OutputError, match=r"another infermeter run \(pid 999999999 on some-other-host\)"):
        with outputs.claim_run_dir(e):
            pass
    assert (e / outputs.LOCK).read_text() == "999999999 some-other-host\n"
    with outputs.claim_run_dir(tmp_path / "new") as d:  # a lock names its host
        assert (d / outputs.LOCK).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    (e / outputs.LOCK).write_text(f"999999999 {socket.gethostname()}\n")  # this host's killed run: taken over
    with outputs.claim_run_dir(e):
        pass


def test_writability_is_proved_by_writing_not_by_os_access(tmp_path):
    """Root may write into a 0o555 folder (os.access says so too) and then it is accepted; anyone else is
    refused there. A path under a regular file and a file where a folder should be are refused for all."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        try:
            (ro / "probe").write_text("x")
            (ro / "probe").unlink()
            writable = True
        except OSError:
            writable = False
        if writable:
            assert outputs.output_dir(ro / "sub") == ro / "sub"
        else:
            with pytest.raises(OutputError, match=f"--out {ro / 'sub'}: cannot write there"):
                outputs.output_dir(ro / "sub")
    finally:
        ro.chmod(0o755)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(OutputError, match="Not a directory"):
        outputs.output_dir(f / "sub")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        outputs.output_dir(f)
    with pytest.raises(OutputError, match="is a folder, not a file"):
        outputs.output_file(tmp_path, "--calibrate-twin")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        outputs.output_file(f / "cal.yaml")
    assert outputs.output_file(tmp_path / "new" / "cal.yaml") == tmp_path / "new" / "cal.yaml"
    assert not any(p.name.startswith(".infermeter-probe") for p in (tmp_path / "new").iterdir())


def test_a_default_folder_that_is_taken_gives_the_next_free_name_a_named_one_is_refused(tmp_path):
    base = tmp_path / "results" / "20260101T000000Z-run"
    with outputs.claim_run_dir(base, fresh=True) as first:
        (first / store.JOURNAL).write_text("")
        with outputs.claim_run_dir(base, fresh=True) as second:
            assert second == base.with_name(base.name + "-2")
            with pytest.raises(outputs.RunDirTaken, match="is writing to it"):
                with outputs.claim_run_dir(second):
                    pass
    assert first == base and (base / store.JOURNAL).exists() and not second.exists()
    with pytest.raises(outputs.RunDirTaken, match="already holds a run"):
        with outputs.claim_run_dir(base):
            pass


def test_a_journal_line_is_the_records_row_whichever_way_it_is_encoded():
    import json as _json

    from infermeter.records.record import RequestRecord

    recs = [RequestRecord(request_id=7, chunk_times=[0.5, 1.25], chunk_tokens=[1, 2], error_detail="é \ud800",
                          finish_reason="stop"),  # a lone surrogate: not storable as is, salvaged
            RequestRecord(request_id=8, requested_output_tokens=2**70),  # past 64 bits: salvaged
            RequestRecord(request_id=9, intended_at=1.5, outcome="ok", completion_tokens=3)]
    for rec in recs:
        line = store.encode_record(rec)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        row = rec.to_row()
        try:
            want = store._dumps(row) + b"\n"
        except (TypeError, ValueError):
            want = store._dumps(store.salvage_row(row)) + b"\n"
            assert _json.loads(line)["error_class"] == store.RECORD_ERROR
        assert line == want
