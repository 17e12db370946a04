"""80 % prediction intervals for a simulated run's headline figures: ``summary.json`` ``prediction_intervals``.

Promises: :func:`prediction_intervals` returns, for the TTFT p50, TPOT p50 and output tokens/s of a
simulated run, ``{"value", "lo", "hi", "stat", "basis"}`` from the performance model's
out-of-sample errors (:mod:`infermeter.perfmodel.uncertainty`), in the run's regime: the twin's
own deployment (model, hardware, calibration status) when it was built from the performance
model; a calibrated deployment (``--calibration``) as a ``deployment`` regime, which borrows the
fitted published rows' cells until the file carries held-out residuals of its own. A figure the
model cannot bound gets ``{"value", "why"}`` instead, never an invented band: TTFT of a saturated
run (queueing turns a small step-time error into an unbounded TTFT error), the throughput of an
open loop the server kept up with (the offered load sets it), and every figure of a calibrated
run whose batch went beyond the calibration's (``extrapolated``). A run's TTFT with more than
``uncertainty.QUEUED_BATCH`` requests in the system on average (running and waiting) takes the ``queued``
fresh-publication spread, as ``plan`` does: what a publication's queue, client and scheduler add to a first token
under load is what the blind sets' loaded first tokens missed by, in simulation as in the model::

    pi = prediction_intervals(twin, summary)      # summary: the run's Summary
    pi["tpot_ms"]["lo"], pi["tpot_ms"]["hi"], pi["tpot_ms"]["basis"]
"""

from __future__ import annotations

from typing import Any

from infermeter.analysis import catalog
from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment
from infermeter.perfmodel.uncertainty import METRIC_GROUPS, Regime, interval, regime_of
from infermeter.twin.deploy import Twin

# summary key -> (statistic, the uncertainty table's metric)
# (the uncertainty table names a distribution by its summary key, a run figure by its catalog name)
FIGURES = {r.metric.key: (r.stat, r.metric.key if r.stat else r.name) for r in catalog.banded()}


def _value(summary: Summary, key: str, stat: str | None) -> float | None:
    v = summary.get(key) if stat is None else summary.distribution(key)[stat]
    return float(v) if isinstance(v, (int, float)) else None


def prediction_intervals(twin: Twin, summary: Summary) -> dict[str, Any] | None:
    """See the module docstring; None when the run has none of the figures."""
    mi = max(1, round(summary.mean_input_tokens or 1))
    mo = max(1, round(summary.mean_output_tokens or 1))
    sm = summary.server_metrics or {}
    batch = max(1, round(sm.get("num_requests_running_mean") or 1))
    in_system = float(sm.get("num_requests_running_mean") or 1) + float(sm.get("num_requests_waiting_mean") or 0)
    sat = summary.saturation
    saturated = bool(sat.saturated)
    follows_load = sat.saturated is False and bool(sat.offered_rate)  # an open loop it kept up with
    extrapolated = any(f.code == "extrapolated" for f in summary.findings)
    d = twin.predictor if isinstance(twin.predictor, Deployment) else None
    out: dict[str, Any] = {}
    for key, (stat, metric) in FIGURES.items():
        value = _value(summary, key, stat)
        if value is None or value <= 0:
            continue
        why = None
        if extrapolated:
            why = ("extrapolated: the batch went beyond the calibration's, where its step time has no measured "
                   "error, so no interval")
        elif key == "ttft_ms" and saturated:
            why = "saturated: queueing amplifies the step-time error without bound, so no interval"
        elif key == "output_token_throughput" and follows_load:
            why = "set by the offered load: the server kept up, so the model's throughput error does not apply"
        if why is not None:
            out[key] = {"stat": stat, "value": value, "why": why}
            continue
        group = METRIC_GROUPS[metric][0]
        try:
            if d is not None:
                reg = regime_of(d, metric, mi, mo, batch, in_system / d.config.replicas)
            else:
                ttft, e2e = _value(summary, "ttft_ms", "p50") or 0.0, _value(summary, "e2e_ms", "p50") or 0.0
                bound = {"ttft": "prefill", "tpot": "decode"}.get(group) or ("prefill" if ttft > e2e - ttft else "decode")
                reg = Regime(group, bound, "deployment")
            lo, hi, basis = interval(metric, value, reg)
        except ConfigError as exc:
            out[key] = {"stat": stat, "value": value, "why": str(exc)}
            continue
        if d is None:
            basis += ("; a calibrated deployment: the fitted published rows' errors stand in for its own held-out "
                      "errors (docs/performance-model.md, 'Calibrating a deployment')")
        out[key] = {"stat": stat, "value": value, "lo": lo, "hi": hi, "basis": basis}
    return out or None
