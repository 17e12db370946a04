"""Published claims a study checks: each claim against the physical ceiling (``infermeter plan --check``).

The contract: a study file's ``claims:`` entries (:class:`Claim`) name a figure someone published
("70B AWQ single-stream 115 tok/s on H100"), the metric and value, and where it was said to run
(a configuration of the study, or a hardware string with a model and dtype). :func:`check_claims`
runs :func:`infermeter.perfmodel.check.check_claim` on each — the same check as ``infermeter plan
--check`` — and returns :class:`ClaimCheck` rows: the physical ceiling (100 % of datasheet
bandwidth and compute, no overheads), the calibrated model's prediction, the verdict
(``impossible`` beyond the ceiling, ``implausible`` above 90 % of it, else ``possible``) and, when
the study ran that configuration, its own figure for the same metric (one request at a time). A
cost claim (``usd_per_1m_output_tokens``, ``usd_per_1m_requests``) of a priced configuration is
checked the same way against the cost floor — its hourly price over the throughput ceiling at the
claim's lengths — beside the calibrated model's cost and the study's own cost at its basis. A
``speedup`` claim (speculative decoding: ``configuration`` with ``speculative:``, ``baseline``
without) is checked against the physical bound at batch 1, ``1 + k A`` tokens per verify step
(:func:`_speedup_check`), beside the model's batch-1 speedup and the study's own TPOT ratio::

    >>> c = Claim(text="70B AWQ 115 tok/s on H100", metric="decode_tokens_per_s", value=115,
    ...           config="h100-sxm", model="llama-3-70b", dtype="awq")
    >>> check_claims(study, cells, [c])[0].verdict
    'impossible'
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# check_claim's metrics, and the figure of a study cell that measures the same thing (one request at a time)
METRICS = {"decode_tokens_per_s": "tokens/s", "tpot_ms": "ms", "ttft_ms": "ms", "output_tokens_per_s": "tokens/s",
           "usd_per_1m_output_tokens": "$ per 1M output tokens", "usd_per_1m_requests": "$ per 1M requests",
           "speedup": "x"}
# cost claims: checked against the cost floor, the configuration's price over its throughput ceiling
COST_METRICS = ("usd_per_1m_output_tokens", "usd_per_1m_requests")


class Claim(BaseModel):
    """One published figure to check (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(description="the claim as published")
    metric: str = Field(description="decode_tokens_per_s (single stream) | tpot_ms | ttft_ms | output_tokens_per_s | "
                        "usd_per_1m_output_tokens | usd_per_1m_requests (a cost: needs a priced configuration)")
    value: float = Field(gt=0)
    configuration: str | None = Field(None, description="a configuration of the study (its hardware, model, dtype)")
    config: str | None = Field(None, description="or a hardware configuration, e.g. h100-sxm")
    model: str | None = None
    dtype: str | None = None
    input_tokens: int = Field(1000, ge=1)
    output_tokens: int = Field(200, ge=1)
    source: str | None = Field(None, description="who published it")
    baseline: str | None = Field(None, description="speedup: the configuration it is a speedup over (the same "
                                 "deployment without speculative decoding)")

    @model_validator(mode="after")
    def _check(self) -> Claim:
        from infermeter.perfmodel.check import ALIASES

        m = self.metric.strip().lower()
        if m not in ALIASES and m not in COST_METRICS and m != "speedup":
            raise ValueError(f"metric {self.metric!r}: use one of {', '.join(METRICS)}")
        if not self.configuration and not self.config:
            raise ValueError("give configuration (a configuration of the study) or config (a hardware string)")
        if m == "speedup" and not (self.configuration and self.baseline):
            raise ValueError("a speedup claim needs configuration (with speculative:) and baseline (without), both "
                             "configurations of the study")
        return self

    @field_validator("config")
    @classmethod
    def _config(cls, v: str | None) -> str | None:
        from infermeter.perfmodel.configspec import parse_config

        return None if v is None else parse_config(v).label

    @property
    def canonical_metric(self) -> str:
        from infermeter.perfmodel.check import ALIASES

        m = self.metric.strip().lower()
        return m if m in COST_METRICS or m == "speedup" else ALIASES[m]


@dataclass(frozen=True)
class ClaimCheck:
    claim: Claim
    model: str
    hardware: str
    dtype: str
    verdict: str  # impossible | implausible | possible
    ceiling: float | None
    predicted: float | None
    ratio_to_ceiling: float | None
    sentence: str
    study_value: float | None = None  # the study's own figure for this configuration (simulated or measured)
    study_source: str | None = None

    @property
    def unit(self) -> str:
        return METRICS[self.claim.canonical_metric]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["claim"] = self.claim.model_dump(mode="json")
        return d


def _finite(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _study_figure(metric: str, cells: list[Any], label: str | None) -> tuple[float | None, str | None]:
    """The study's figure for ``metric`` on configuration ``label`` (first profile that has it)."""
    for c in cells:
        if label is None or c.config != label or getattr(c, "unavailable", None):
            continue
        lat = (c.latency or {}).get("unloaded") or {}
        tpot = (lat.get("tpot_ms") or {}).get("p50")
        if metric == "decode_tokens_per_s" and tpot:
            return 1000.0 / tpot, f"{c.source}, {c.profile}, 1000 / TPOT p50 one request at a time"
        if metric == "tpot_ms" and tpot:
            return tpot, f"{c.source}, {c.profile}, TPOT p50 one request at a time"
        ttft = (lat.get("ttft_ms") or {}).get("p50")
        if metric == "ttft_ms" and ttft:
            return ttft, f"{c.source}, {c.profile}, TTFT p50 one request at a time"
        out = (c.saturation or {}).get("output_tokens_per_s")
        if metric == "output_tokens_per_s" and out and c.saturation_valid:
            return out, f"{c.source}, {c.profile}, output tokens/s at saturation"
    return None, None


def _cost_check(claim: Claim, study: Any, cells: list[Any], prices: Any, model: str, hardware: str,
                dtype: str) -> ClaimCheck:
    """A cost claim against the cost floor: the configuration's hourly price over its throughput ceiling (the same
    ceiling as ``plan --check``'s output_tokens_per_s, at the claim's lengths); the calibrated model's throughput
    gives the predicted cost, and the study's own cost at its basis is shown beside it."""
    from infermeter.errors import UserError
    from infermeter.perfmodel.check import check_claim
    from infermeter.study.pricing import price_study

    metric = claim.canonical_metric
    label = claim.configuration
    if label is None:
        return ClaimCheck(claim, model, hardware, dtype, "not checked", None, None, None,
                          "not checked: a cost claim needs configuration (a priced configuration of the study)")
    prices = prices if prices is not None else price_study(study, [c for c in cells if c.config == label])
    price = prices.prices.get(label)
    if price is None or isinstance(price, str):
        return ClaimCheck(claim, model, hardware, dtype, "not checked", None, None, None,
                          f"not checked: {label} has no price ({price or 'none'})")
    try:
        v = check_claim("output_tokens_per_s", 1.0, model, hardware, dtype=dtype, input_tokens=claim.input_tokens,
                        output_tokens=claim.output_tokens)
    except UserError as exc:
        return ClaimCheck(claim, model, hardware, dtype, "not checked", None, None, None, f"not checked: {exc}")
    hourly = price.usd_per_hour * (1 + study.pricing.overhead)
    per_unit = 1.0 if metric == "usd_per_1m_output_tokens" else float(claim.output_tokens)

    def cost(tps: float | None) -> float | None:
        tps = _finite(tps) if tps is not None else None
        return hourly / (tps / per_unit * 3600) * 1e6 if tps else None

    floor, predicted = cost(v.ceiling), cost(v.predicted)
    if floor is None:
        return ClaimCheck(claim, model, hardware, dtype, "impossible", None, None, None,
                          f"IMPOSSIBLE: {v.reason or 'no throughput ceiling'}")
    ratio = floor / claim.value
    verdict = "impossible" if claim.value < floor else "implausible" if claim.value < floor / 0.9 else "possible"
    unit = METRICS[metric].removeprefix("$ ")
    sentence = (f"{verdict.upper()}: claimed {fmt_usd4(claim.value)} {unit} is {claim.value / floor:.3g}x the cost "
                f"floor, {fmt_usd4(floor)} ({price.config} at ${price.usd_per_hour:,.2f}/h over the physical "
                f"throughput limit, {v.ceiling:,.4g} output tokens/s at {claim.input_tokens} in / "
                f"{claim.output_tokens} out)")
    if predicted is not None:
        sentence += f"; at the calibrated model's {v.predicted:,.4g} tokens/s it costs {fmt_usd4(predicted)}"
    cc = next((x for x in prices.cost.values() if x.cell.config == label and x.result is not None), None)
    own = getattr(cc.result, metric) if cc is not None else None
    return ClaimCheck(claim, model, hardware, dtype, verdict, floor, predicted, ratio, sentence,
                      own, f"{cc.cell.source}, {cc.cell.profile}, at {cc.basis}" if cc is not None else None)


def _tpot_p50(cells: list[Any], label: str) -> dict[str, float]:
    """TPOT p50 one request at a time of configuration ``label``, per profile."""
    out = {}
    for c in cells:
        if c.config == label and not getattr(c, "unavailable", None):
            tpot = (((c.latency or {}).get("unloaded") or {}).get("tpot_ms") or {}).get("p50")
            if tpot:
                out[c.profile] = float(tpot)
    return out


def _saturation_ratio(cells: list[Any], fast: str, base: str, profile: str) -> float | None:
    """Output tokens/s at saturation of ``fast`` over ``base`` for ``profile`` (None when either lacks it)."""
    def out(label: str) -> float | None:
        for c in cells:
            if c.config == label and c.profile == profile and not getattr(c, "unavailable", None):
                if not c.saturation_valid:
                    return None  # a saturation run judged invalid checks no claim
                v = (c.saturation or {}).get("output_tokens_per_s")
                return float(v) if v else None
        return None

    a, b = out(fast), out(base)
    return a / b if a and b else None


def _speedup_check(claim: Claim, study: Any, cells: list[Any], model: str, hardware: str, dtype: str) -> ClaimCheck:
    """A speculative-decoding speedup claim against the physical bound at batch 1, ``E = 1 + k A`` (accepted
    drafts plus the target's token per verify step, at the configuration's acceptance rate ``A``: no speedup can
    exceed it); the performance model's batch-1 speedup (``plan --speculative``) is the prediction and the study's
    own figure is the baseline's TPOT p50 over the configuration's, one request at a time."""
    from infermeter.errors import UserError
    from infermeter.perfmodel.planner import plan
    from infermeter.perfmodel.speculative import parse_spec

    assert claim.configuration is not None and claim.baseline is not None
    conf = study.configuration(claim.configuration)
    text = study.sim_for(conf).speculative
    if not text:
        return ClaimCheck(claim, model, hardware, dtype, "not checked", None, None, None,
                          f"not checked: configuration {claim.configuration} has no speculative: setting")
    spec = parse_spec(text, "speculative")
    bound = spec.expected_tokens
    try:
        p = plan(model, hardware, dtype=dtype, input_tokens=claim.input_tokens, output_tokens=claim.output_tokens,
                 concurrency=1, speculative=text).to_json()
        predicted = _finite(float((p.get("speculative") or {}).get("speedup") or math.nan))
    except UserError:
        predicted = None
    ratio = claim.value / bound
    verdict = ("impossible" if claim.value > bound else "implausible" if claim.value > 0.9 * bound else "possible")
    sentence = (f"{verdict.upper()}: claimed {claim.value:g}x; at k={spec.k} and acceptance rate {spec.acceptance:g} "
                f"a verify step emits at most {bound:.3g} tokens, so no batch-1 speedup exceeds {bound:.3g}x "
                f"(k + 1 = {spec.k + 1}x even at acceptance 1)")
    if predicted is not None:
        sentence += f"; the performance model predicts {predicted:.3g}x at batch 1 with the draft's cost"
    fast, base = _tpot_p50(cells, claim.configuration), _tpot_p50(cells, claim.baseline)
    common = [pr for pr in fast if pr in base]
    own = base[common[0]] / fast[common[0]] if common else None
    src = (f"{claim.baseline} TPOT p50 / {claim.configuration} TPOT p50, {common[0]}, one request at a time"
           if common else None)
    if own is not None:
        sentence += f"; this study: {own:.3g}x one request at a time"
        sat = _saturation_ratio(cells, claim.configuration, claim.baseline, common[0])
        if sat is not None:
            sentence += f", {sat:.3g}x the output tokens/s at saturation"
    near = [x for x in (predicted, own) if x is not None]
    if near and claim.value > max(near) * 1.1:
        sentence += (f" -- physically possible, but {claim.value:g}x is above what this deployment gets at this "
                     f"acceptance")
    return ClaimCheck(claim, model, hardware, dtype, verdict, bound, predicted, ratio, sentence, own, src)


def fmt_usd4(v: float) -> str:
    return f"${v:,.4g}"


def check_claims(study: Any, cells: list[Any], claims: list[Claim] | tuple[Claim, ...] | None = None,
                 prices: Any = None) -> list[ClaimCheck]:
    """Each claim against the physical ceiling and the calibrated model (see the module docstring); a cost claim
    against the cost floor (:func:`_cost_check`; ``prices``: the study's, else priced here)."""
    from infermeter.errors import UserError
    from infermeter.perfmodel.check import check_claim

    out = []
    for claim in (study.claims if claims is None else claims):
        conf = study.configuration(claim.configuration) if claim.configuration else None
        model = claim.model or (study.model_for(conf) if conf else study.model)
        hardware = claim.config or (conf.config if conf else "")
        dtype = claim.dtype or (study.sim_for(conf).dtype if conf else study.sim.dtype)
        metric = claim.canonical_metric
        if metric in COST_METRICS:
            out.append(_cost_check(claim, study, cells, prices, model, hardware, dtype))
            continue
        if metric == "speedup":
            out.append(_speedup_check(claim, study, cells, model, hardware, dtype))
            continue
        try:
            v = check_claim(metric, claim.value, model, hardware, dtype=dtype, input_tokens=claim.input_tokens,
                            output_tokens=claim.output_tokens)
        except UserError as exc:
            out.append(ClaimCheck(claim, model, hardware, dtype, "not checked", None, None, None, f"not checked: {exc}"))
            continue
        ceiling, predicted = _finite(v.ceiling), _finite(v.predicted)
        ratio = _finite(v.ratio_to_ceiling) if ceiling else None
        figure, source = _study_figure(metric, cells, claim.configuration)
        out.append(ClaimCheck(claim, model, hardware, dtype, v.verdict, ceiling, predicted, ratio, v.sentence(),
                              figure, source))
    return out
