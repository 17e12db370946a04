"""Validation against published measurements: each row predicted in and out of sample, errors by group.

Promises: :func:`predict` returns the model's value for a row's metric under a calibration (the
row's scenario, engine version and stated settings applied); :func:`validate` returns a
:class:`Report` of per-row predictions in sample (the given calibration) and out of sample:
leave-one-out (``holdout="row"``: each row predicted by a fit on every other row, from the
priors), leave-one-publication-out (``"source"``: all rows of a :func:`~corpus.publication` held
out together), both (``"all"``) or neither (``"none"``); :meth:`Report.breakdown` gives the errors
per hardware family or engine::

    >>> rows = load_rows("tests/data/published-measurements.csv")
    >>> report = validate(rows, holdout="none")
    >>> report.median_abs("in") < 0.15
    True

Conditions applied to every row (docs/performance-model.md section 8): the KV cache dtype is the
engine's rule unless the row's settings name one; TensorRT-LLM rows give the KV cache 0.95 of free
memory (the perf-overview setting), others 0.9 of device memory; saturated rows are steady-state
continuous batching at the engine's batch or KV limit; ``prefill_tokens_per_s`` is a prompt's
tokens over its prefill time (llama-bench ``pp``), with no per-request cost. A row is *served* (its requests pass
through the engine's API server, whose serial per-request work bounds the request rate: :mod:`perfmodel.serving`)
unless it is a static batch or its conditions name an offline harness (:data:`OFFLINE_HARNESSES`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace, field

from infermeter.errors import DataError, UserError
from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.calibration import Calibration, load_calibration
from infermeter.perfmodel.corpus import METRICS, Row, load_rows, publication
from infermeter.perfmodel.hardware import DEFAULT_NETWORK, get_hardware
from infermeter.perfmodel.lengths import Lengths
from infermeter.perfmodel.serving import at_concurrency, at_rate, engine_of, saturated_latency, saturation, static_batch
from infermeter.perfmodel.uncertainty import Regime, regime_of

__all__ = ["METRICS", "Report", "Row", "RowResult", "deployment_for", "load_rows", "log_error", "predict", "publication",
           "served", "validate", "validation_regime", "value_of"]
HOLDOUTS = ("row", "source", "all", "none")
# benchmark drivers that call the engine in-process (no HTTP server, chat template or streaming): their rows are not served
OFFLINE_HARNESSES = ("benchmark_throughput", "bench throughput", "bench_offline_throughput", "trtllm-bench",
                     "gptsessionbenchmark", "benchmark_latency", "llm.generate")


def served(row: Row) -> bool:
    """Whether ``row``'s requests went through an OpenAI-compatible server (see the module docstring)."""
    text = f"{row.conditions} {row.notes} {row.source}".lower()
    return row.scenario != "static_batch" and not any(h in text for h in OFFLINE_HARNESSES)


def deployment_for(row: Row, cal: Calibration) -> Deployment:
    util = row.setting("gpu_memory_utilization", 0.95 if row.engine == "trtllm" else 0.9)
    try:
        d = build_deployment(row.model, row.config, dtype=row.weight_dtype, kv_dtype=row.setting("kv_dtype"), engine=row.engine_spec,
                             gpu_memory_utilization=util, calibration=cal, max_num_seqs=row.setting("max_num_seqs"),
                             max_batched_tokens=row.setting("max_batched_tokens"), attention_dp=bool(row.setting("attention_dp", 0)),
                             enforce_eager=bool(row.setting("enforce_eager", 0)),
                             network=row.setting("network") or DEFAULT_NETWORK)
    except UserError as exc:
        raise DataError(f"measurement row {row.id!r}: {exc}") from None
    if not d.fits:
        raise DataError(f"measurement row {row.id!r}: {row.model} does not fit on {row.config}: {d.why_not}")
    return d


def validation_regime(row: Row, d: Deployment) -> Regime:
    """The interval regime (:mod:`perfmodel.uncertainty`) of ``row.metric`` for ``d`` under the row's scenario."""
    if row.scenario == "saturated":
        batch = saturation(d, row.input_tokens, row.output_tokens, *_dist(row))[1]
    elif row.scenario == "request_rate":  # the requests in the system the open loop holds
        batch = at_rate(d, row.input_tokens, row.output_tokens, row.setting("rate"), _dist(row)[0],
                        requests=row.setting("requests")).concurrency
    else:
        batch = row.concurrency or 1
    # requests per replica in the system: a saturated run queues every one at once; a static batch queues none (its
    # first token is the batch's own prefill, no queue a new publication's client or scheduler could lengthen)
    in_system = math.inf if row.scenario == "saturated" else 1.0 if row.scenario == "static_batch" else batch / d.config.replicas
    regime = regime_of(d, row.metric, row.input_tokens, row.output_tokens, batch, in_system)
    if row.scenario == "saturated" and row.metric in ("ttft_ms", "tpot_ms"):  # queueing no fitted row measures: unseen
        regime = replace(regime, calibration="unseen")
    return regime


def _dist(row: Row) -> tuple[Lengths, int | None]:
    """The row's length distribution and, for a saturated run, the requests it sent (None: steady state)."""
    return Lengths.of(row.lengths, row.input_tokens, row.output_tokens, row.setting("max_output")), row.setting("requests")


def value_of(row: Row, d: Deployment) -> float:
    """The value of ``row.metric`` for deployment ``d`` under the row's scenario."""
    i, o = row.input_tokens, row.output_tokens
    if row.metric == "prefill_tokens_per_s":
        return i / d.prefill_time(i, engine_of(d).max_batched_tokens)
    if row.scenario == "saturated" and row.metric == "output_tokens_per_s":
        return saturation(d, i, o, *_dist(row), served=served(row))[0]
    if row.scenario == "saturated" and row.metric in ("ttft_ms", "tpot_ms"):  # the run's means, queueing included
        ttft, tpot = saturated_latency(d, i, o, *_dist(row))
        if row.metric == "tpot_ms":
            return tpot * 1000
        if ttft is None:
            raise DataError(f"measurement row {row.id!r}: the mean TTFT of a saturated run depends on how many requests "
                            "were queued at once: add settings requests=N")
        return ttft * 1000
    if row.scenario == "request_rate":
        try:
            e = at_rate(d, i, o, row.setting("rate"), _dist(row)[0], requests=row.setting("requests"), served=served(row))
        except ValueError as exc:
            raise DataError(f"measurement row {row.id!r}: {exc}") from None
    else:
        e = (static_batch(d, i, o, row.concurrency or 1) if row.scenario == "static_batch"
             else at_concurrency(d, i, o, row.concurrency or 1, _dist(row)[0], lockstep=row.lengths == "fixed",
                                 requests=row.setting("requests")))
    if row.metric == "output_tokens_per_s":
        return e.output_tokens_per_s
    if row.metric == "ttft_ms":
        return e.ttft_s * 1000
    if row.metric == "tpot_ms":
        return e.tpot_s * 1000
    return e.per_user_tokens_per_s


def predict(row: Row, cal: Calibration | None = None) -> float:
    """The model's value of ``row.metric`` under the row's conditions."""
    return value_of(row, deployment_for(row, cal or load_calibration()))


def log_error(row: Row, cal: Calibration) -> float:
    return math.log(predict(row, cal) / row.value)


@dataclass(frozen=True, slots=True)
class RowResult:
    row: Row
    predicted: float  # in sample: the calibration given to validate()
    predicted_loo: float | None = None  # leave-one-out
    predicted_lopo: float | None = None  # leave-one-publication-out

    def prediction(self, which: str) -> float | None:
        return {"in": self.predicted, "loo": self.predicted_loo, "lopo": self.predicted_lopo}[which]

    def error_of(self, which: str) -> float | None:
        p = self.prediction(which)
        return None if p is None else p / self.row.value - 1

    @property
    def error(self) -> float:
        return self.predicted / self.row.value - 1

    @property
    def error_loo(self) -> float | None:
        return self.error_of("loo")

    @property
    def error_lopo(self) -> float | None:
        return self.error_of("lopo")


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    n: int
    median_abs: dict[str, float | None]  # by "in" / "loo" / "lopo"
    max_abs: dict[str, float | None]


@dataclass(frozen=True, slots=True)
class Report:
    results: tuple[RowResult, ...]
    holdout: str = "row"
    refits: dict[str, Calibration] = field(default_factory=dict, compare=False)  # publication -> its leave-out fit
    calibration: Calibration | None = field(default=None, compare=False)  # the in-sample calibration

    @property
    def kinds(self) -> tuple[str, ...]:
        """Which predictions the report holds: "in", then "loo" and/or "lopo"."""
        return ("in",) + {"row": ("loo",), "source": ("lopo",), "all": ("loo", "lopo"), "none": ()}[self.holdout]

    def errors(self, which: str) -> list[float]:
        return [e for r in self.results if (e := r.error_of(which)) is not None]

    def median_abs(self, which: str) -> float:
        return statistics.median(abs(e) for e in self.errors(which))

    def max_abs(self, which: str) -> float:
        return max(abs(e) for e in self.errors(which))

    def worst(self, which: str, n: int = 5) -> list[RowResult]:
        have = [r for r in self.results if r.error_of(which) is not None]
        return sorted(have, key=lambda r: -abs(r.error_of(which) or 0.0))[:n]

    @property
    def median_abs_error(self) -> float:
        return self.median_abs("in")

    @property
    def max_abs_error(self) -> float:
        return self.max_abs("in")

    def breakdown(self, by: str) -> list[Group]:
        """Errors per hardware ``family`` or ``engine``, for every kind of prediction the report holds."""
        if by not in ("family", "engine"):
            raise ValueError(by)
        groups: dict[str, list[RowResult]] = {}
        for r in self.results:
            key = get_hardware(r.row.hardware).family if by == "family" else r.row.engine
            groups.setdefault(key, []).append(r)
        out = []
        for name, rs in sorted(groups.items()):
            med, mx = {}, {}
            for k in self.kinds:
                errs = [abs(e) for r in rs if (e := r.error_of(k)) is not None]
                med[k] = statistics.median(errs) if errs else None
                mx[k] = max(errs) if errs else None
            out.append(Group(name=name, n=len(rs), median_abs=med, max_abs=mx))
        return out


def validate(rows: list[Row], cal: Calibration | None = None, *, holdout: str = "row") -> Report:
    """In-sample predictions under ``cal`` (default: shipped table) and out-of-sample refits from the priors."""
    from infermeter.perfmodel.fit import fit_many, priors_only

    if holdout not in HOLDOUTS:
        raise DataError(f"--holdout {holdout!r} unknown; use {', '.join(HOLDOUTS)}")
    cal = cal or load_calibration()
    base = priors_only(cal)
    loo: dict[str, float] = {}
    lopo: dict[str, float] = {}
    refits: dict[str, Calibration] = {}
    if holdout in ("row", "all"):
        fits = fit_many([[r for r in rows if r.id != row.id] for row in rows], base)
        loo = {row.id: predict(row, f) for row, f in zip(rows, fits, strict=True)}
    if holdout in ("source", "all"):
        pubs = list(dict.fromkeys(publication(r) for r in rows))
        refits = dict(zip(pubs, fit_many([[r for r in rows if publication(r) != pub] for pub in pubs], base), strict=True))
        for row in rows:
            lopo[row.id] = predict(row, refits[publication(row)])
    results = tuple(RowResult(row=r, predicted=predict(r, cal), predicted_loo=loo.get(r.id), predicted_lopo=lopo.get(r.id)) for r in rows)
    return Report(results=results, holdout=holdout, refits=refits, calibration=cal)
