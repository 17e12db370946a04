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
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

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


class Journal:
    """Append-only JSON-lines record log; each write reaches the OS before returning."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / JOURNAL
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.count = 0

    def write(self, rec: RequestRecord) -> None:
        os.write(self._fd, _dumps(rec.to_row()) + b"\n")
        self.count += 1

    def write_many(self, recs: list[RequestRecord]) -> None:
        if recs:
            os.write(self._fd, b"".join(_dumps(r.to_row()) + b"\n" for r in recs))
            self.count += len(recs)

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
                rows.append(json.loads(line))
            except ValueError:
                if not line.endswith(b"\n"):  # torn last write of a killed run
                    break
                raise DataError(f"{path}:{lineno}: not a JSON record") from None
    return rows


def write_table(run_dir: Path, table: pa.Table) -> Path:
    path = run_dir / PARQUET
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, **PARQUET_OPTIONS)
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
        return rows_to_table(read_journal(j))
    raise DataError(f"{run_dir}: no {PARQUET} or {JOURNAL} here (is this an infermeter run directory?)")


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_default) + "\n")
    os.replace(tmp, path)


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
