"""Compare two runs metric by metric, with bootstrap confidence intervals.

The contract: given the per-request records of a *baseline* and a *candidate*
run, :func:`compare_runs` returns, for each metric, both values, the change
(relative for latencies and throughput, absolute percentage points for the
error rate) and a confidence interval for that change from a bootstrap over
the requests. A metric *regresses* only when the whole interval lies beyond
the threshold on the bad side, so two runs of the same system differ by noise
and pass, while a real slowdown fails. A relative change smaller than
``min_effect`` (default 1 %) is ``negligible`` whatever its interval: a fixed
output length makes the interval of the throughput almost zero-wide, and a
0.2 % difference in run length is not a finding::

    >>> import pyarrow.parquet as pq          # a/ and b/: two runs of the same system
    >>> base = per_request_metrics(pq.read_table("a/requests.parquet", columns=list(READ_COLUMNS)))
    >>> cand = per_request_metrics(pq.read_table("b/requests.parquet", columns=list(READ_COLUMNS)))
    >>> result = compare_runs(base, cand, base_duration_s=60, cand_duration_s=60,
    ...                       threshold=0.05, rng=np.random.default_rng(0))
    >>> result.regressed          # True -> the CLI exits 1
    False

Per-request metrics come from :mod:`infermeter.analysis.metrics` (measure-phase
requests; latencies of ``ok`` requests only, like ``summary.json``): TTFT =
first_token_at - sent_at, E2E = ended_at - sent_at, TPOT = (ended_at -
first_token_at) / (completion_tokens - 1). The error rate counts errors among
requests that finished (ok or error), as ``summary.json`` does.

The bootstrap resamples the requests with replacement, drawn in closed form so
a 10M-request run costs one sort per latency: the r-th smallest of n draws
from the empirical distribution is the value at rank ceil(n U) with
U ~ Beta(r, n - r + 1), which gives each resample's quantile (inverted CDF,
r = ceil(q n)) exactly; an error count is Binomial(n, p); a mean (throughput)
uses the normal approximation with the standard error of the mean. The
interval is the percentile interval of the candidate/baseline ratio (or
difference, for the error rate) over independent resamples of both runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.analysis import catalog
from infermeter.analysis.catalog import MetricRef
from infermeter.analysis.metrics import col, request_metrics
from infermeter.analysis.results import MIN_SAMPLES, PERCENTILES

READ_COLUMNS = ("phase", "outcome", "intended_at", "sent_at", "first_token_at", "ended_at", "completion_tokens")


@dataclass(frozen=True, slots=True)
class RequestArrays:
    """Per-request metrics of the measure phase, one slot per intended request (NaN = undefined)."""

    ok: np.ndarray  # bool: outcome "ok"
    error: np.ndarray  # bool: outcome "error" (dropped requests are neither)
    sent_at: np.ndarray  # seconds from the run start
    first_token_at: np.ndarray
    ended_at: np.ndarray
    ttft_ms: np.ndarray  # ok requests only, like every latency here
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    output_tokens: np.ndarray  # 0 for requests that did not complete
    # every per-request metric of the catalog by its RequestMetrics name, in the metric's unit (ms for
    # latencies), ok requests only (NaN elsewhere)
    per_request: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.ok.size)


def _is(table: pa.Table, outcome: str) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.equal(table.column("outcome"), outcome), False).to_numpy(zero_copy_only=False))


def per_request_metrics(table: pa.Table) -> RequestArrays:
    """The measure-phase rows of a requests table (``READ_COLUMNS`` suffice) as :class:`RequestArrays`.

    Formulas are :func:`infermeter.analysis.metrics.request_metrics`'s, so values agree with
    ``summary.json``.
    """
    if "phase" in table.column_names and table.num_rows:
        table = table.filter(pc.fill_null(pc.equal(table.column("phase"), "measure"), False))
    ok, error = _is(table, "ok"), _is(table, "error")
    m = request_metrics(table)

    def ms(x: np.ndarray) -> np.ndarray:
        return np.where(ok, x * 1e3, np.nan)

    per_request: dict[str, np.ndarray] = {}
    for r in _comparable():
        attr = r.metric.per_request
        if r.metric.distribution and attr and attr not in per_request:
            x = getattr(m, attr)
            per_request[attr] = ms(x) if r.metric.unit == "ms" else np.where(ok, x, np.nan)
    return RequestArrays(
        ok=ok, error=error, sent_at=col(table, "sent_at"), first_token_at=col(table, "first_token_at"),
        ended_at=col(table, "ended_at"), ttft_ms=ms(m.ttft), tpot_ms=ms(m.tpot), e2e_ms=ms(m.e2e),
        output_tokens=np.where(ok, np.nan_to_num(m.n_out), 0.0), per_request=per_request,
    )


# ---------------------------------------------------------------- metrics

Kind = Literal["quantile", "throughput", "proportion"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    label: str
    unit: str
    kind: Kind
    source: str  # RequestArrays field
    q: float = 0.0
    better: Literal["lower", "higher"] = "lower"
    min_samples: int = 1  # a percentile needs this many samples in each run (summary.json's floor, results.py)


_COUNTS: dict[str, tuple[Kind, str, str]] = {  # kind, RequestArrays source, compare's label
    "requests_per_s": ("throughput", "ok", "completed requests/s"),
    "output_tokens_per_s": ("throughput", "output_tokens", "output tokens/s"),
    "error_rate": ("proportion", "error", "error rate"),
}  # run figures compare bootstraps from per-request counts


def _comparable() -> list[MetricRef]:
    """What compare can bootstrap: each percentile of a catalog distribution with a per-request formula,
    and the run figures counted per request."""
    out = []
    for r in catalog.refs():
        m = r.metric
        if m.distribution and m.per_request and r.stat in PERCENTILES or r.name in _COUNTS:
            out.append(r)
    return out


def _spec(r: MetricRef) -> MetricSpec:
    m = r.metric
    if r.stat is not None:
        field_ = f"{m.per_request}_ms"  # TTFT, TPOT, E2E have their own RequestArrays field; others per_request
        source = field_ if field_ in RequestArrays.__dataclass_fields__ else str(m.per_request)
        return MetricSpec(r.name, r.label, m.unit, "quantile", source, PERCENTILES[r.stat] / 100.0, m.better or "lower",
                          MIN_SAMPLES.get(r.stat, 1))
    kind, source, label = _COUNTS[r.name]
    return MetricSpec(r.name, label, "%" if kind == "proportion" else m.unit, kind, source, better=m.better or "lower")


# every metric compare can bootstrap, by canonical name (``spec`` also takes the catalog's aliases)
METRICS: dict[str, MetricSpec] = {r.name: _spec(r) for r in _comparable()}
DEFAULT_METRICS = tuple(r.name for r in catalog.compare_refs())


def spec(name: str) -> MetricSpec:
    """The metric a ``--metric`` name denotes (canonical or alias: ``ttft_p95`` = ``ttft_p95_ms``); ValueError
    naming the known ones."""
    return METRICS[catalog.resolve(name, "--metric", among=list(METRICS)).name]


Verdict = Literal["regression", "improvement", "worse, within threshold", "better, within threshold", "negligible",
                  "no significant change", "no data", "too few samples"]
MIN_EFFECT = 0.01  # relative changes below this are "negligible", whatever their interval


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric: both values, the change and its confidence interval, and the verdict."""

    spec: MetricSpec
    baseline: float | None
    candidate: float | None
    change: float | None  # relative (0.1 = +10 %) or, for proportions, absolute (0.01 = +1 pp)
    ci_low: float | None
    ci_high: float | None
    verdict: Verdict
    n_baseline: int
    n_candidate: int

    @property
    def relative(self) -> bool:
        return self.spec.kind != "proportion"


@dataclass(frozen=True, slots=True)
class Comparison:
    changes: tuple[MetricChange, ...]
    threshold: float
    error_threshold: float
    confidence: float
    resamples: int
    min_effect: float = MIN_EFFECT

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "regression")

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)


# ---------------------------------------------------------------- bootstrap


def _point(spec: MetricSpec, values: np.ndarray, scale: float) -> float | None:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    if spec.kind == "quantile":
        return float(np.quantile(finite, spec.q))
    return float(finite.mean() * scale)


def _values(spec: MetricSpec, arrays: RequestArrays) -> np.ndarray:
    if spec.kind == "proportion":  # errors among requests that finished, as summary.json's error_rate
        return np.where(arrays.ok | arrays.error, arrays.error.astype(np.float64), np.nan)
    if spec.source == "ok":
        return arrays.ok.astype(np.float64)
    if spec.source in arrays.per_request:
        return np.asarray(arrays.per_request[spec.source], dtype=np.float64)
    return np.asarray(getattr(arrays, spec.source), dtype=np.float64)


def _bootstrap(spec: MetricSpec, values: np.ndarray, scale: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` draws of the metric over bootstrap resamples of ``values`` (see the module docstring)."""
    v = values[np.isfinite(values)]
    n = v.size
    if n == 0:
        return np.full(resamples, np.nan)
    if spec.kind == "quantile":
        v = np.sort(v)
        r = min(n, max(1, math.ceil(spec.q * n - 1e-9)))
        u = rng.beta(r, n - r + 1, size=resamples)
        return np.asarray(v[np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)])
    if spec.kind == "proportion":
        return np.asarray(rng.binomial(n, float(v.mean()), size=resamples) / n)
    sd = float(v.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    return rng.normal(float(v.mean()), sd, size=resamples) * scale


def _verdict(spec: MetricSpec, lo: float, hi: float, threshold: float, change: float | None = None,
             min_effect: float = 0.0) -> Verdict:
    if change is not None and spec.kind != "proportion" and abs(change) < min_effect:
        return "negligible"
    worse_lo, worse_hi = (lo, hi) if spec.better == "lower" else (-hi, -lo)  # positive = worse
    if worse_lo > threshold:
        return "regression"
    if worse_hi < -threshold:
        return "improvement"
    if worse_lo > 0:
        return "worse, within threshold"
    if worse_hi < 0:
        return "better, within threshold"
    return "no significant change"


def compare_metric(
    spec: MetricSpec,
    base: RequestArrays,
    cand: RequestArrays,
    *,
    base_duration_s: float,
    cand_duration_s: float,
    threshold: float,
    error_threshold: float,
    confidence: float,
    resamples: int,
    rng: np.random.Generator,
    min_effect: float = MIN_EFFECT,
) -> MetricChange:
    """Bootstrap one metric; see the module docstring."""
    scales = (1.0, 1.0)
    if spec.kind == "throughput":
        scales = (base.n / base_duration_s, cand.n / cand_duration_s)
    vb, vc = _values(spec, base), _values(spec, cand)
    b_point, c_point = _point(spec, vb, scales[0]), _point(spec, vc, scales[1])
    nb, nc = int(np.isfinite(vb).sum()), int(np.isfinite(vc).sum())
    if spec.kind == "proportion" and b_point is not None and c_point is not None:
        b_point, c_point = b_point * 100.0, c_point * 100.0
    if spec.kind == "quantile" and 0 < min(nb, nc) < spec.min_samples:
        # as summary.json leaves it empty: a p99 of 40 requests is their maximum, not a p99
        return MetricChange(spec, None, None, None, None, None, "too few samples", nb, nc)
    if b_point is None or c_point is None or (spec.kind != "proportion" and b_point == 0):
        return MetricChange(spec, b_point, c_point, None, None, None, "no data", nb, nc)
    bb = _bootstrap(spec, vb, scales[0], resamples, rng)
    bc = _bootstrap(spec, vc, scales[1], resamples, rng)
    if spec.kind == "proportion":
        change, deltas, limit = (c_point - b_point) / 100.0, bc - bb, error_threshold
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            deltas = bc / bb - 1.0
        change, limit = c_point / b_point - 1.0, threshold
    deltas = deltas[np.isfinite(deltas)]
    if deltas.size == 0:
        return MetricChange(spec, b_point, c_point, change, None, None, "no data", nb, nc)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (float(x) for x in np.quantile(deltas, [alpha, 1.0 - alpha]))
    return MetricChange(spec, b_point, c_point, change, lo, hi, _verdict(spec, lo, hi, limit, change, min_effect), nb, nc)


def compare_runs(
    base: RequestArrays,
    cand: RequestArrays,
    *,
    base_duration_s: float,
    cand_duration_s: float,
    rng: np.random.Generator,
    threshold: float = 0.05,
    error_threshold: float = 0.01,
    confidence: float = 0.95,
    resamples: int = 2000,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    min_effect: float = MIN_EFFECT,
) -> Comparison:
    """Compare every metric in ``metrics``; thresholds are fractions (0.05 = 5 %, 0.01 = 1 pp); a relative
    change below ``min_effect`` is ``negligible``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: must be between 0 and 1")
    if base_duration_s <= 0 or cand_duration_s <= 0:
        raise ValueError("run durations must be positive")
    if not 0 <= min_effect < 1:
        raise ValueError(f"min_effect {min_effect}: must be a fraction in [0, 1)")
    specs = [spec(m) for m in metrics]
    changes = tuple(
        compare_metric(
            sp, base, cand, base_duration_s=base_duration_s, cand_duration_s=cand_duration_s,
            threshold=threshold, error_threshold=error_threshold, confidence=confidence,
            resamples=resamples, rng=rng, min_effect=min_effect,
        )
        for sp in specs
    )
    return Comparison(changes, threshold, error_threshold, confidence, resamples, min_effect)
