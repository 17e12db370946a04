"""Run directories on disk: the journal written during a run, and the final files.

During a run, each finished record is appended as one JSON line to
``requests.jsonl`` and flushed to the OS at once, so a run killed with SIGKILL
leaves every finished request readable. ``finalize`` turns the journal into
``requests.parquet`` (and removes it). ``load_table`` reads whichever exists,
tolerating a torn last line::

    journal = Journal(run_dir)
    journal.write(record)           # during the run
    journal.close(); finalize(run_dir)
    table = load_table(run_dir)     # pyarrow.Table in records.ARROW_SCHEMA

Every record written is a record kept: a record holding a value no column can store (a lone
surrogate, an integer past 64 bits, ``max_tokens: 1e300``) is written as a minimal ``error`` /
``record_error`` row that says which field and why (:func:`salvage_row`), when it is journalled
and again when a journal is read into a table. A write that fails (``ENOSPC``, ``EIO``, ``EROFS``)
takes back any torn part of its line, so the journal stays readable, and every later write raises
the same error (the run stops once: ``load.runner``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from infermeter.errors import DataError
from infermeter.records.record import ARROW_SCHEMA, RequestRecord, conform, rows_to_table

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    _loads: Any = orjson.loads

    def _dumps_line(obj: Any) -> bytes:
        return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads
    _dumps_line = None  # type: ignore[assignment]

JOURNAL = "requests.jsonl"
PARQUET = "requests.parquet"
SUMMARY = "summary.json"
RUN = "run.json"
# how every requests.parquet is written: zstd; dictionary encoding for the string columns only (on the times,
# all distinct, it cost a third of the writing and made the file a third larger)
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": [f.name for f in ARROW_SCHEMA if pa.types.is_string(f.type)],
}


RECORD_ERROR = "record_error"
_NOT_STORABLE = (TypeError, ValueError, OverflowError, UnicodeError, pa.ArrowException)  # orjson's error is a TypeError


def salvage_row(row: dict[str, Any], exc: BaseException | None = None) -> dict[str, Any]:
    """A row every column can store, from one that cannot be: the fields that convert are kept, the others
    are null, and the row is ``error`` / ``record_error`` with the fields at fault and why."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for f in ARROW_SCHEMA:
        v = row.get(f.name)
        if v is None:
            out[f.name] = None
            continue
        try:
            pa.array([v], f.type)
            _dumps(v)
        except _NOT_STORABLE:
            out[f.name] = None
            bad.append(f"{f.name}={_short(v)}")
            continue
        out[f.name] = v
    if not isinstance(out.get("request_id"), int):
        out["request_id"] = -1
    was = row.get("error_class") if isinstance(row.get("error_class"), str) else None
    why = ", ".join(bad) or (f"{type(exc).__name__}: {exc}" if exc is not None else "unknown")
    detail = f"record not storable as measured ({why})" + (f"; it had failed: {was}" if was else "")
    out |= {"outcome": "error", "error_class": RECORD_ERROR, "error_detail": detail[:300]}
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def encode_record(rec: RequestRecord) -> bytes:
    """One journal line; a record that cannot be encoded is salvaged (:func:`salvage_row`), never dropped.

    With orjson, a plain record is encoded as the dataclass it is (its fields in order: the bytes its
    ``to_row()`` gives, without building the dict)."""
    if _dumps_line is not None and type(rec) is RequestRecord:
        try:
            return _dumps_line(rec)
        except _NOT_STORABLE:
            pass  # salvaged below
    row = rec.to_row()
    try:
        return _dumps(row) + b"\n"
    except _NOT_STORABLE as exc:
        return _dumps(salvage_row(row, exc)) + b"\n"


class Journal:
    """Append-only JSON-lines record log; each write reaches the OS before returning.

    A failed write (disk full, I/O error) raises ``OSError`` naming the journal, after truncating
    any part of the line that was written; every later write raises the same error."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / JOURNAL
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.count = 0
        self.failed: OSError | None = None

    def write(self, rec: RequestRecord) -> None:
        self._append(encode_record(rec))
        self.count += 1

    def write_many(self, recs: list[RequestRecord]) -> None:
        if recs:
            self._append(b"".join(encode_record(r) for r in recs))
            self.count += len(recs)

    def _append(self, data: bytes) -> None:
        if self.failed is not None:
            raise OSError(self.failed.errno, self.failed.strerror, str(self.path))
        view = memoryview(data)
        try:
            while view:  # a disk that fills mid-line writes part of it: go on, or fail below
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._size)  # no torn line before the records of a later reader
            except OSError:
                pass
            self.failed = OSError(exc.errno, exc.strerror, str(self.path))
            raise self.failed from None
        self._size += len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_journal(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(_loads(line))
            except ValueError:
                try:  # what orjson refuses and json reads (NaN, an integer past 64 bits): json decides
                    rows.append(json.loads(line))
                    continue
                except ValueError:
                    pass
                if not line.endswith(b"\n"):  # torn last write of a killed run
                    break
                raise DataError(f"{path}:{lineno}: not a JSON record") from None
    return rows


def table_of_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """``rows_to_table``, with every row that no column can store salvaged (:func:`salvage_row`), not lost."""
    try:
        return rows_to_table(rows)
    except _NOT_STORABLE:
        pass
    fixed = []
    for row in rows:
        try:
            rows_to_table([row])
        except _NOT_STORABLE as exc:
            row = salvage_row(row, exc)
        fixed.append(row)
    return rows_to_table(fixed)


def write_table(run_dir: Path, table: pa.Table) -> Path:
    path = run_dir / PARQUET
    tmp = path.with_suffix(".parquet.tmp")
    try:
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
    except BaseException:
        _discard(tmp)  # a full disk keeps no half file
        raise
    os.replace(tmp, path)
    return path


def finalize(run_dir: Path) -> pa.Table:
    """Journal -> requests.parquet (atomic); returns the table."""
    table = load_table(run_dir)
    write_table(run_dir, table)
    j = run_dir / JOURNAL
    if j.exists():
        j.unlink()
    return table


def load_table(run_dir: Path) -> pa.Table:
    """Records of a run dir: the parquet file, else the journal (+ part files)."""
    run_dir = Path(run_dir)
    pq_path = run_dir / PARQUET
    j = run_dir / JOURNAL
    if pq_path.exists() and not j.exists():
        try:
            return conform(pq.read_table(pq_path))  # files of older versions: 32-bit chunk_tokens
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"{pq_path}: cannot read records: {exc}") from None
    if j.exists():
        return table_of_rows(read_journal(j))
    raise DataError(f"{run_dir}: no {PARQUET} or {JOURNAL} here (is this an infermeter run directory?)")


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(obj, indent=2, default=_default) + "\n"
    try:
        tmp.write_text(text)
    except OSError:
        _discard(tmp)
        raise
    os.replace(tmp, path)


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    except ValueError as exc:
        raise DataError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def write_run(out_dir: Path, run: dict[str, Any], table: pa.Table, summary: dict[str, Any]) -> None:
    """Write a complete run dir at once (simulated runs, rebuilt runs)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / RUN, run)
    write_table(out_dir, conform(table))
    write_json(out_dir / SUMMARY, summary)
