"""Read result directories (single runs and sweeps) for reports, comparison and history.

The contract: :func:`load_run_dir` reads ``summary.json`` (required) and
``run.json`` (optional; its fields win over the summary's for metadata) and
finds the optional files beside them. A directory with ``steps/<k>/`` sub
directories is a *sweep*: each step is loaded as its own run, ordered by ``k``
(numerically when the names are numbers)::

    >>> run = load_run_dir("results/demo")
    >>> run.label, run.source, run.requests_path
    ('demo', 'measured', PosixPath('results/demo/requests.parquet'))
    >>> [s.name for s in load_run_dir("results/sweep").steps]
    ['0', '1', '2']

Nothing here reads ``requests.parquet``; aggregation does that column-wise.
Problems raise :class:`infermeter.errors.DataError` naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from infermeter.analysis.compare import READ_COLUMNS, per_request_metrics
from infermeter.analysis.results import Summary
from infermeter.errors import DataError

SUPPORTED_SCHEMA = (1, 2)  # summary.json schema 2 (issue 13) reads schema 1 files too


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; DataError naming the file when missing or malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if version not in SUPPORTED_SCHEMA:
        raise DataError(f"{path}: schema_version {version!r} is not supported (this infermeter reads "
                        f"{' and '.join(map(str, SUPPORTED_SCHEMA))})")
    return data


def _step_key(p: Path) -> tuple[int, float, str]:
    try:
        return (0, float(p.name), p.name)
    except ValueError:
        return (1, 0.0, p.name)


@dataclass(frozen=True)
class RunDir:
    """One result directory: its metadata, summary and (for sweeps) steps."""

    path: Path
    summary: Summary  # the validated summary.json (older schemas upgraded); ``summary.to_json()`` is what it holds
    run: dict[str, Any] = field(default_factory=dict)
    steps: tuple[RunDir, ...] = ()
    parent: str | None = None  # label of the sweep this run is a step of
    alias: str | None = None  # label given by the caller (e.g. to tell apart runs with the same label)

    def _meta(self, key: str) -> Any:
        value = self.run.get(key)
        return self.summary.get(key) if value is None else value

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        if self.alias:
            return self.alias
        own = self._meta("label")
        if self.parent:
            if own and own not in (self.parent, self.path.name):
                return str(own)
            return f"{self.parent} / step {self.path.name}"
        return str(own or self.path.name)

    @property
    def source(self) -> str:
        """measured | emulated | simulated: a run against infermeter's own emulator (run.json ``target.emulated``)
        is *emulated* — it measured a digital twin, not the GPU the twin models."""
        src = str(self._meta("source") or "measured")
        if src == "measured" and (self.run.get("target") or {}).get("emulated"):
            return "emulated"
        return src

    @property
    def emulated_text(self) -> str | None:
        """What an emulated run's endpoint emulated, in words (None for other runs)."""
        emu = (self.run.get("target") or {}).get("emulated")
        if not emu or self.source != "emulated":
            return None
        if emu.get("backend") == "twin":
            return f"digital twin of vLLM serving {emu.get('model')} on {emu.get('hardware')}"
        return "infermeter's simple timing emulator"

    def _text(self, key: str) -> str | None:
        value = self._meta(key)
        return None if value is None else str(value)

    @property
    def model(self) -> str | None:
        return self._text("model")

    @property
    def hardware(self) -> str | None:
        return self._text("hardware")

    @property
    def profile(self) -> str | None:
        return self._text("profile")

    @property
    def started_at(self) -> str | None:
        value = self.run.get("started_at") or self.summary.get("started_at")  # an older file's own key
        return None if value is None else str(value)

    @property
    def is_sweep(self) -> bool:
        return bool(self.steps)

    @property
    def configuration(self) -> str:
        """What was served on what: ``model @ hardware`` (either part may be unknown)."""
        return f"{self.model or 'unknown model'} @ {self.hardware or 'unknown hardware'}"

    def _optional(self, name: str) -> Path | None:
        p = self.path / name
        return p if p.is_file() else None

    @property
    def requests_path(self) -> Path | None:
        return self._optional("requests.parquet")

    @property
    def server_metrics_path(self) -> Path | None:
        return self._optional("server_metrics.parquet")

    @property
    def gpu_path(self) -> Path | None:
        return self._optional("gpu.parquet")

    def leaves(self) -> list[RunDir]:
        """The runs that hold requests: the steps of a sweep, or the run itself."""
        return list(self.steps) if self.steps else [self]


def load_run_dir(path: str | Path, parent: str | None = None, alias: str | None = None) -> RunDir:
    """Load one result directory (see the module docstring); ``alias`` replaces its label."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise DataError(f"{p}: not a result directory (expected a folder with summary.json)")
    if not (p / "summary.json").is_file():
        raise DataError(f"{p}: no summary.json; is this an infermeter result directory?")
    summary = Summary.from_json(read_json(p / "summary.json"), str(p / "summary.json"))
    run = read_json(p / "run.json") if (p / "run.json").is_file() else {}
    head = RunDir(path=p, summary=summary, run=run, parent=parent, alias=alias)
    steps_dir = p / "steps"
    if not steps_dir.is_dir():
        return head
    step_paths = sorted((d for d in steps_dir.iterdir() if (d / "summary.json").is_file()), key=_step_key)
    if not step_paths:
        raise DataError(f"{steps_dir}: a sweep folder with no step holding a summary.json")
    steps = tuple(load_run_dir(sp, parent=head.label) for sp in step_paths)
    return RunDir(path=p, summary=summary, run=run, steps=steps, parent=parent, alias=alias)


def load_run_dirs(paths: list[str] | list[Path]) -> list[RunDir]:
    """Load several directories; runs sharing a label are told apart by their path."""
    if not paths:
        raise DataError("no result directory given")
    unique = list(dict.fromkeys(Path(p).expanduser().resolve() for p in paths))
    runs = [load_run_dir(p) for p in unique]
    labels = [r.label for r in runs]
    return [
        load_run_dir(r.path, alias=f"{r.label} ({r.path})") if labels.count(r.label) > 1 else r
        for r in runs
    ]


def load_for_compare(path: str | Path, role: str) -> tuple[RunDir, Any]:
    """A run and its per-request metrics for ``infermeter compare`` (``role``: baseline or candidate);
    DataError naming the run when it is a sweep, has no records or no duration."""
    run = load_run_dir(path)
    if run.steps:
        raise DataError(f"{role} {path}: a sweep; compare one step with another, e.g. {path}/steps/0")
    if run.requests_path is None:
        raise DataError(f"{role} {path}: no requests.parquet; compare needs the per-request records")
    duration = run.summary.duration_s
    if duration <= 0:
        raise DataError(f"{role} {path}/summary.json: duration_s is {duration!r}; expected a positive number")
    try:
        table = pq.read_table(run.requests_path, columns=list(READ_COLUMNS))
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise DataError(f"{run.requests_path}: cannot read the request records ({exc})") from None
    return run, per_request_metrics(table)
