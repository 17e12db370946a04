"""Validation against published measurements: load rows, predict each, report errors.

Promises: :func:`load_rows` parses a measurements CSV (columns of
``tests/data/published-measurements.csv``) and raises :class:`DataError` naming the file, line and
column on bad input; :func:`predict` returns the model's value for a row's metric under a
calibration; :func:`validate` returns per-row in-sample predictions (the given calibration) and
out-of-sample ones (leave-one-out: refit on every other row, starting from the priors; or
leave-one-source-out)::

    >>> rows = load_rows("tests/data/published-measurements.csv")
    >>> report = validate(rows)
    >>> report.median_abs_error_loo < 0.15
    True

Conditions assumed for every row (stated in docs/performance-model.md): the KV cache dtype is
the engine's rule (:func:`precision.default_kv_dtype`: TensorRT-LLM FP8/FP4 checkpoints carry an
FP8 cache); TensorRT-LLM rows use 0.95 of free memory for KV (NVIDIA's
perf-overview setting); saturated rows are steady-state continuous batching at the engine's
batch or KV-capacity limit.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from infermeter.errors import DataError, UserError
from infermeter.perfmodel.api import build_deployment
from infermeter.perfmodel.calibration import Calibration, load_calibration
from infermeter.perfmodel.serving import at_concurrency, saturation

METRICS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "decode_tokens_per_s")
_COLUMNS = ("id", "model", "hardware", "gpus", "tp", "pp", "weight_dtype", "engine", "scenario", "concurrency",
            "input_tokens", "output_tokens", "metric", "value")


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    model: str
    hardware: str
    gpus: int
    tp: int
    pp: int
    weight_dtype: str
    engine: str
    scenario: str  # "saturated" | "fixed_concurrency"
    concurrency: int | None  # None for "max"
    input_tokens: int
    output_tokens: int
    metric: str
    value: float
    source: str = ""

    @property
    def config(self) -> str:
        return f"{self.gpus}x{self.hardware}:tp{self.tp},pp{self.pp}"


def load_rows(path: str | Path) -> list[Row]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"--validate {str(path)!r}: no such file")
    rows: list[Row] = []
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{p}: missing column(s) {', '.join(missing)}")
        for line, r in enumerate(reader, start=2):
            try:
                conc = None if r["concurrency"].strip() in ("max", "") else int(r["concurrency"])
                row = Row(id=r["id"], model=r["model"], hardware=r["hardware"], gpus=int(r["gpus"]), tp=int(r["tp"]), pp=int(r["pp"]),
                          weight_dtype=r["weight_dtype"].strip().lower(), engine=r["engine"].strip().lower(), scenario=r["scenario"].strip(),
                          concurrency=conc, input_tokens=int(r["input_tokens"]), output_tokens=int(r["output_tokens"]),
                          metric=r["metric"].strip(), value=float(r["value"]), source=r.get("source", ""))
            except (TypeError, ValueError) as exc:
                raise DataError(f"{p}:{line}: bad value ({exc})") from None
            if row.metric not in METRICS:
                raise DataError(f"{p}:{line}: column 'metric' {row.metric!r} unknown; use one of {', '.join(METRICS)}")
            if row.value <= 0:
                raise DataError(f"{p}:{line}: column 'value' must be > 0")
            rows.append(row)
    if not rows:
        raise DataError(f"{p}: no rows")
    return rows


def deployment_for(row: Row, cal: Calibration):  # noqa: ANN201 - returns api.Deployment
    kv = None  # the engine's own rule (precision.default_kv_dtype): TensorRT-LLM FP8/FP4 checkpoints -> FP8 KV
    util = 0.95 if row.engine == "trtllm" else 0.9
    try:
        d = build_deployment(row.model, row.config, dtype=row.weight_dtype, kv_dtype=kv, engine=row.engine,
                             gpu_memory_utilization=util, calibration=cal)
    except UserError as exc:
        raise DataError(f"measurement row {row.id!r}: {exc}") from None
    if not d.fits:
        raise DataError(f"measurement row {row.id!r}: {row.model} does not fit on {row.config}: {d.why_not}")
    return d


def predict(row: Row, cal: Calibration | None = None) -> float:
    """The model's value of ``row.metric`` under the row's conditions."""
    d = deployment_for(row, cal or load_calibration())
    if row.metric == "output_tokens_per_s" and row.scenario == "saturated":
        return saturation(d, row.input_tokens, row.output_tokens)[0]
    e = at_concurrency(d, row.input_tokens, row.output_tokens, row.concurrency or 1)
    if row.metric == "output_tokens_per_s":
        return e.output_tokens_per_s
    if row.metric == "ttft_ms":
        return e.ttft_s * 1000
    if row.metric == "tpot_ms":
        return e.tpot_s * 1000
    return e.per_user_tokens_per_s


@dataclass(frozen=True, slots=True)
class RowResult:
    row: Row
    predicted: float
    predicted_loo: float | None

    @property
    def error(self) -> float:
        return self.predicted / self.row.value - 1

    @property
    def error_loo(self) -> float | None:
        return None if self.predicted_loo is None else self.predicted_loo / self.row.value - 1


@dataclass(frozen=True, slots=True)
class Report:
    results: tuple[RowResult, ...]
    holdout: str = "row"

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(r.error) for r in self.results)

    @property
    def max_abs_error(self) -> float:
        return max(abs(r.error) for r in self.results)

    @property
    def median_abs_error_loo(self) -> float:
        return statistics.median(abs(r.error_loo) for r in self.results if r.error_loo is not None)

    @property
    def max_abs_error_loo(self) -> float:
        return max(abs(r.error_loo) for r in self.results if r.error_loo is not None)


def source_group(row: Row) -> str:
    """The publication a row comes from: its id up to the first '-' (tr8, nim70, trt05, ...)."""
    return row.id.split("-", 1)[0]


def validate(rows: list[Row], cal: Calibration | None = None, *, holdout: str = "row") -> Report:
    """In-sample predictions under ``cal`` (default: shipped table) and out-of-sample refits.

    ``holdout="row"``: leave-one-out, each row predicted by a fit on all other rows;
    ``"source"``: leave-one-source-out, all rows of a publication (:func:`source_group`) held out
    together; ``"none"``: in-sample only. Every refit starts from the priors.
    """
    from infermeter.perfmodel.fit import fit, priors_only

    if holdout not in ("row", "source", "none"):
        raise DataError(f"--holdout {holdout!r} unknown; use row, source or none")
    cal = cal or load_calibration()
    base = priors_only(cal)
    key = (lambda r: r.id) if holdout == "row" else source_group
    refits: dict[str, Calibration] = {}
    out = []
    for row in rows:
        pred_out = None
        if holdout != "none":
            g = key(row)
            if g not in refits:
                refits[g] = fit([r for r in rows if key(r) != g], base)
            pred_out = predict(row, refits[g])
        out.append(RowResult(row=row, predicted=predict(row, cal), predicted_loo=pred_out))
    return Report(results=tuple(out), holdout=holdout)


def log_error(row: Row, cal: Calibration) -> float:
    return math.log(predict(row, cal) / row.value)
