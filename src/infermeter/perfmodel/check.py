"""Is a claimed figure physically possible? Compare it with the ideal-hardware ceiling.

Promises: :func:`check_claim` evaluates the same model twice, once with the shipped calibration
(the *prediction*) and once on ideal hardware (the *ceiling*: every efficiency 1.0, no engine
overheads, no communication time, ``max`` instead of the smooth maximum, KV limited only by
memory), and returns a
:class:`Verdict`: ``impossible`` when the claim beats the ceiling, ``implausible`` when it needs
more than 90% of datasheet peak (microbenchmarks reach ~90% of HBM bandwidth, research notes
section 10), else ``possible``::

    >>> v = check_claim("decode_tokens_per_s", 115, "llama-3.1-70b", "2xh100-sxm:tp2", dtype="bf16")
    >>> v.verdict, round(v.ratio_to_ceiling, 1)
    ('impossible', 2.4)

The verdict also carries the prediction's 80% interval and its basis (:mod:`perfmodel.uncertainty`),
so a claim can be set beside both the physical bound and what the model expects.

Metrics: ``decode_tokens_per_s`` (single stream, context ``I + O/2``), ``ttft_ms`` (one prompt
of ``I`` tokens alone), ``tpot_ms`` (single stream), ``output_tokens_per_s`` (whole
configuration at saturation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.calibration import Calibration, Entry, load_calibration
from infermeter.perfmodel.serving import saturation

ALIASES = {"decode": "decode_tokens_per_s", "tps": "decode_tokens_per_s", "single_stream": "decode_tokens_per_s",
           "decode_tokens_per_s": "decode_tokens_per_s", "ttft": "ttft_ms", "ttft_ms": "ttft_ms", "tpot": "tpot_ms",
           "itl": "tpot_ms", "tpot_ms": "tpot_ms", "throughput": "output_tokens_per_s", "output_tokens_per_s": "output_tokens_per_s"}
HIGHER_IS_BETTER = {"decode_tokens_per_s": True, "output_tokens_per_s": True, "ttft_ms": False, "tpot_ms": False}
PLAUSIBLE_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class Verdict:
    metric: str
    claim: float
    ceiling: float  # best physically possible value (highest tokens/s, lowest latency)
    predicted: float  # calibrated model
    verdict: str  # impossible | implausible | possible
    reason: str = ""  # set when the model cannot run at all (does not fit)
    interval: tuple[float, float] | None = None  # 80% interval of the prediction (perfmodel.uncertainty)
    interval_basis: dict[str, Any] | None = None  # {basis: calibrated | pooled | unseen | deployment, n, cell}

    @property
    def ratio_to_ceiling(self) -> float:
        """How far the claim goes: > 1 means beyond the ceiling (for latencies, ceiling / claim)."""
        return self.claim / self.ceiling if HIGHER_IS_BETTER[self.metric] else self.ceiling / self.claim

    @property
    def ratio_to_prediction(self) -> float:
        return self.claim / self.predicted if HIGHER_IS_BETTER[self.metric] else self.predicted / self.claim

    def sentence(self) -> str:
        unit = "ms" if self.metric.endswith("_ms") else "tokens/s"
        head = {"impossible": "IMPOSSIBLE", "implausible": "IMPLAUSIBLE", "possible": "POSSIBLE"}[self.verdict]
        if self.reason:
            return f"{head}: {self.reason}"
        rel = "" if HIGHER_IS_BETTER[self.metric] else " as fast as"
        text = (f"{head}: claimed {self.metric} {self.claim:g} {unit} is {self.ratio_to_ceiling:.2f}x{rel} the physical limit "
                f"({self.ceiling:.4g} {unit} at 100% of datasheet bandwidth and compute, no overheads)")
        if not math.isnan(self.predicted):
            text += f"; the calibrated model predicts {self.predicted:.4g} {unit} (the claim is {self.ratio_to_prediction:.2f}x{rel} that)"
            if self.interval and self.interval_basis:
                lo, hi = self.interval
                text += (f", 80% interval {lo:.4g}-{hi:.4g} {unit} ({self.interval_basis['basis']}, "
                         f"{self.interval_basis['n']} published rows behind it)")
        return text


def ideal_calibration(cal: Calibration | None = None) -> Calibration:
    cal = cal or load_calibration()
    entries = tuple(Entry(family="*", engine="*", dtype="*", phase=ph, tp="*", value=1.0, source="ideal") for ph in ("prefill", "decode"))
    engines = tuple(replace(e, overhead_ms=0.0, per_seq_us=0.0, request_overhead_ms=0.0, layer_overhead_us=0.0, max_num_seqs=10**7,
                            kv_reserve="current")
                    for e in cal.engines)
    return Calibration(entries=entries, engines=engines, smooth=math.inf)


def _value(metric: str, d: Deployment, input_tokens: int, output_tokens: int) -> float:
    ctx = input_tokens + output_tokens // 2
    if metric == "decode_tokens_per_s":
        return 1.0 / d.step_time(1, ctx, 1)
    if metric == "tpot_ms":
        return d.step_time(1, ctx, 1) * 1e3
    if metric == "ttft_ms":
        return (d.request_overhead_s + d.prefill_time(input_tokens)) * 1e3
    return saturation(d, input_tokens, output_tokens)[0]


def check_claim(metric: str, claim: float, model: str, config: str, *, dtype: str = "bf16", kv_dtype: str | None = None,
                engine: str = "vllm", input_tokens: int = 1000, output_tokens: int = 200, hardware_file: str | None = None) -> Verdict:
    m = ALIASES.get(metric.strip().lower())
    if m is None:
        raise ConfigError(f"--check metric {metric!r} unknown; use one of {', '.join(sorted(set(ALIASES)))}")
    if not claim > 0:
        raise ConfigError(f"--check value {claim!r} must be > 0")
    mml = input_tokens + output_tokens
    real = build_deployment(model, config, dtype=dtype, kv_dtype=kv_dtype, engine=engine, hardware_file=hardware_file, max_model_len=mml)
    ideal = build_deployment(model, config, dtype=dtype, kv_dtype=kv_dtype, engine=engine, hardware_file=hardware_file, max_model_len=mml,
                             gpu_memory_utilization=1.0, calibration=ideal_calibration())
    ideal = replace(ideal, _comm_step=0.0, _comm_tok=0.0)  # the bound is bandwidth and compute alone
    if not ideal.fits:
        return Verdict(m, claim, math.nan, math.nan, "impossible", reason=f"{real.model_name} cannot run on {real.config.label}: {real.why_not or ideal.why_not}")
    ceiling = _value(m, ideal, input_tokens, output_tokens)
    predicted = _value(m, real, input_tokens, output_tokens) if real.fits else math.nan
    beyond = claim > ceiling if HIGHER_IS_BETTER[m] else claim < ceiling
    near = claim > PLAUSIBLE_FRACTION * ceiling if HIGHER_IS_BETTER[m] else claim < ceiling / PLAUSIBLE_FRACTION
    iv, basis = _interval(m, predicted, real, input_tokens, output_tokens) if real.fits else (None, None)
    return Verdict(m, claim, ceiling, predicted, "impossible" if beyond else "implausible" if near else "possible",
                   interval=iv, interval_basis=basis)


def _interval(metric: str, predicted: float, d: Deployment, input_tokens: int, output_tokens: int
              ) -> tuple[tuple[float, float] | None, dict[str, Any] | None]:
    """The 80% interval of the prediction in its regime (single stream, or the saturation batch for throughput)."""
    from infermeter.perfmodel.uncertainty import basis_of, interval, regime_of

    name = "saturation_output_tokens_per_s" if metric == "output_tokens_per_s" else metric
    batch = saturation(d, input_tokens, output_tokens)[1] if metric == "output_tokens_per_s" else 1
    try:
        reg = regime_of(d, name, input_tokens, output_tokens, batch)
        lo, hi, _ = interval(name, predicted, reg)
        return (lo, hi), basis_of(reg)
    except ConfigError:  # no uncertainty table (a calibration without one): the bound stands alone
        return None, None
