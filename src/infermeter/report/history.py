"""Run history in an embedded DuckDB file: index runs, list and filter them, follow a metric, query with SQL.

The contract: :func:`index_run` records one result directory (each step of a
sweep) as a row of the ``runs`` table, keyed by its absolute path, so indexing
again updates the row. The database is ``--db`` when given, else
``$INFERMETER_HISTORY_DB``, else ``~/.infermeter/history.duckdb``.
:func:`list_runs` filters by model, hardware, profile, source and date;
:func:`trend` gives one metric over time, each run with its comparable configuration
(model, hardware, profile, load and level, lengths, source) so trends never mix runs that
measure different things; :func:`run_sql` runs a query with a
``requests`` view over every indexed run's ``requests.parquet`` (plus a
``run_id`` column) beside ``runs``::

    >>> index_run("results/demo")                       # after every `infermeter run`
    ['/.../results/demo']
    >>> [r["label"] for r in list_runs(model="llama-3-8b", since=parse_when("2025-01-01"))]  # or "7d", "12h"
    ['demo']
    >>> run_sql("SELECT run_id, count(*) FROM requests GROUP BY 1")
    (['run_id', 'count_star()'], [('/.../results/demo', 200)])

DuckDB is the ``report`` extra; without it these functions raise
:class:`infermeter.errors.UserError` saying how to install it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from infermeter.analysis import catalog
from infermeter.errors import ConfigError, DataError, UserError
from infermeter.records.tags import load_tag, workload_tag
from infermeter.redact import redact_obj
from infermeter.report.rundir import RunDir, load_run_dir

ENV_DB = "INFERMETER_HISTORY_DB"
DEFAULT_DB = Path("~/.infermeter/history.duckdb")

# the figure columns come from the metric catalog: scalars by summary key, then <stem>_<stat>_ms
FIGURES = catalog.history_columns()
SCALAR_COLUMNS = tuple(r.column for r in FIGURES if r.stat is None)
PERCENTILE_COLUMNS = {r.column: (r.metric.key, r.stat) for r in FIGURES if r.stat is not None}
METRICS = SCALAR_COLUMNS + tuple(PERCENTILE_COLUMNS)
LIST_COLUMNS = ("started_at", "label", "source", "model", "hardware", "profile", "valid", "completed",
                "output_token_throughput", "ttft_p95_ms", "tpot_p95_ms", "error_rate", "run_id")


def _sql_type(ref: catalog.MetricRef) -> str:
    return "BIGINT" if ref.metric.unit == "count" and ref.stat is None else "DOUBLE"


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, path VARCHAR, requests_path VARCHAR, "
    "sweep VARCHAR, step VARCHAR, label VARCHAR, source VARCHAR, model VARCHAR, hardware VARCHAR, profile VARCHAR, "
    "started_at TIMESTAMPTZ, indexed_at TIMESTAMPTZ, valid BOOLEAN, "
    + ", ".join(f"{r.column} {_sql_type(r)}" for r in FIGURES)
    + ", summary JSON, run JSON)"
)
# a database made before a metric joined the catalog gains its column (empty for the runs indexed then)
_MIGRATE = [f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {r.column} {_sql_type(r)}" for r in FIGURES]


def require_duckdb() -> Any:
    """The duckdb module, or a UserError naming the extra to install."""
    try:
        import duckdb
    except ImportError:
        raise UserError("DuckDB is needed for `infermeter history` and `infermeter sql`: pip install 'infermeter[report]'") from None
    return duckdb


def db_path(db: str | Path | None = None) -> Path:
    return Path(db or os.environ.get(ENV_DB) or DEFAULT_DB).expanduser()


def connect(db: str | Path | None = None, *, read_only: bool = False, attempts: int = 20) -> Any:
    """Open the history database (created with its schema unless ``read_only``); retries while another process holds it."""
    duckdb = require_duckdb()
    path = db_path(db)
    if read_only and not path.exists():
        raise DataError(f"{path}: no history database yet (runs are indexed by `infermeter run` or `infermeter history --index DIR`)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    for i in range(attempts):
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or i == attempts - 1:
                raise DataError(f"{path}: cannot open the history database ({exc})") from None
            time.sleep(0.1)
    if not read_only:
        con.execute(_SCHEMA)
        for sql in _MIGRATE:
            con.execute(sql)
    return con


def _started(r: RunDir) -> dt.datetime:
    text = r.started_at
    if text:
        try:
            t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
        except ValueError:
            pass
    return dt.datetime.fromtimestamp((r.path / "summary.json").stat().st_mtime, dt.timezone.utc)


def _row(r: RunDir, now: dt.datetime) -> dict[str, Any]:
    s = r.summary
    row: dict[str, Any] = {
        "run_id": str(r.path.resolve()), "path": str(r.path.resolve()),
        "requests_path": str(r.requests_path.resolve()) if r.requests_path else None,
        "sweep": str(r.path.parent.parent.resolve()) if r.parent else None, "step": r.name if r.parent else None,
        "label": r.label, "source": r.source, "model": r.model, "hardware": r.hardware, "profile": r.profile,
        "started_at": _started(r), "indexed_at": now, "valid": s.valid,
    }
    for ref in FIGURES:
        v = ref.value(s)
        row[ref.column] = int(v) if v is not None and _sql_type(ref) == "BIGINT" else v
    row["summary"] = json.dumps(redact_obj(s.to_json()))  # a run written before redaction, or edited, brings no secret in
    row["run"] = json.dumps(redact_obj(r.run))
    return row


def index_run(run_dir: str | Path, db: str | Path | None = None, now: dt.datetime | None = None) -> list[str]:
    """Index a result directory (every step of a sweep); returns the run ids. Safe to call again."""
    run = load_run_dir(run_dir)
    now = now or dt.datetime.now(dt.timezone.utc)
    rows = [_row(leaf, now) for leaf in run.leaves()]
    con = connect(db)
    try:
        cols = list(rows[0])
        sql = f"INSERT OR REPLACE INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        con.executemany(sql, [[row[c] for c in cols] for row in rows])
    finally:
        con.close()
    return [row["run_id"] for row in rows]


_WHEN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")


def parse_when(text: str, now: dt.datetime | None = None, flag: str = "--since") -> dt.datetime:
    """``7d``, ``12h``, ``2w``, ``30m`` ago, or an ISO date/time (UTC when no zone)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    m = _WHEN.match(text or "")
    if m:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
        return now - dt.timedelta(**{unit: float(m.group(1))})
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected a date (2024-05-01), a time (2024-05-01T12:00) or an age (7d, 12h)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _where(filters: dict[str, Any]) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for col in ("model", "hardware", "profile", "source"):
        v = filters.get(col)
        if v:
            clauses.append(f"{col} ILIKE ?")
            params.append(v.replace("*", "%"))
    if filters.get("since") is not None:
        clauses.append("started_at >= ?")
        params.append(filters["since"])
    if filters.get("until") is not None:
        clauses.append("started_at < ?")
        params.append(filters["until"])
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _fetch(con: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def list_runs(db: str | Path | None = None, *, limit: int | None = 50, **filters: Any) -> list[dict[str, Any]]:
    """Runs matching ``model``/``hardware``/``profile``/``source`` (``*`` wildcards) and ``since``/``until``, newest first."""
    where, params = _where(filters)
    con = connect(db, read_only=True)
    try:
        sql = f"SELECT {', '.join(LIST_COLUMNS)} FROM runs{where} ORDER BY started_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return _fetch(con, sql, params)
    finally:
        con.close()


def metric_column(name: str) -> str:
    """A runs column for a metric name of the catalog's grammar (``ttft_p95_ms``, ``output_tokens_per_s``)
    or an alias (``ttft_ms.p95`` as in summary.json, ``output_token_throughput``)."""
    try:
        return catalog.resolve(name, "--trend", among=[r.name for r in FIGURES]).column
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


GROUPED_BY = "model @ hardware · profile · load and level · lengths · source"


def configuration(row: dict[str, Any]) -> str:
    """The comparable configuration of an indexed run (``GROUPED_BY``): runs with the same one measure
    the same thing, so a trend over them is a trend; a sweep step is its own load level."""
    run = row.get("run")
    if isinstance(run, str):
        try:
            run = json.loads(run)
        except ValueError:
            run = {}
    run = run if isinstance(run, dict) else {}
    load = load_tag(run.get("load") or {}) if run.get("load") else "?"
    lengths = workload_tag(run.get("workload") or {}) if run.get("workload") else "?"
    api = (run.get("workload") or {}).get("api")
    parts = [f"{row.get('model')} @ {row.get('hardware')}", str(row.get("profile")), load, lengths, str(row.get("source"))]
    if api and api != "chat":
        parts.append(f"api {api}")
    return " · ".join(parts)


def trend(metric: str, db: str | Path | None = None, **filters: Any) -> list[dict[str, Any]]:
    """``metric`` for every matching run, oldest first, each with its comparable ``configuration``
    (:func:`configuration`): a trend is read within one configuration, never across them."""
    col = metric_column(metric)
    where, params = _where(filters)
    con = connect(db, read_only=True)
    try:
        sql = (f"SELECT started_at, label, model, hardware, profile, source, valid, {col} AS value, run_id, sweep, "
               f"step, run FROM runs{where} ORDER BY started_at")
        rows = _fetch(con, sql, params)
    finally:
        con.close()
    for r in rows:
        r["configuration"] = configuration(r)
        del r["run"]
    return rows


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_sql(sql: str, db: str | Path | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` (read-only) over ``runs`` and a ``requests`` view of the indexed runs' records."""
    duckdb = require_duckdb()
    con = connect(db, read_only=True)
    try:
        paths = [p for (p,) in con.execute("SELECT requests_path FROM runs WHERE requests_path IS NOT NULL").fetchall()
                 if Path(p).is_file()]
        if paths:
            files = ", ".join(_sql_literal(p) for p in paths)
            con.execute(
                "CREATE TEMP VIEW requests AS SELECT r.run_id, q.* EXCLUDE (filename) FROM "
                f"read_parquet([{files}], filename = true, union_by_name = true) q "
                "JOIN runs r ON r.requests_path = q.filename"
            )
        try:
            cur = con.execute(sql)
        except duckdb.Error as exc:
            hint = " (no run with requests.parquet is indexed)" if not paths and "requests" in str(exc) else ""
            raise UserError(f"sql: {str(exc).splitlines()[0]}{hint}") from None
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()
    finally:
        con.close()
