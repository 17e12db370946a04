"""The decision a study answers: per profile, which configuration to rent, by how much, where it holds, and why to doubt it.

The contract: :func:`decide` turns priced cells into one :class:`Decision` per profile, computed
only from figures the tables show:

- **recommended** = the lowest value metric (``pricing.value_metric``, at the cost basis) among
  comparable priced cells (those serving the study's model and meeting the SLO); **runner-up** the
  next; **margin** = runner-up / recommended - 1;
- **intervals**: each value's interval, from two sources that are both real or absent — the
  performance model's 80 % prediction interval for a simulated cell's throughput at its cost basis
  (:func:`model_interval`: the summary's ``prediction_intervals`` when the simulation wrote them,
  else :mod:`infermeter.perfmodel.uncertainty` in the figure's regime; "not available" for
  measured or calibrated cells, never invented), and the SLO-capacity search's own precision: the true SLO edge lies between the
  capacity step and the next rate that missed, so the cost per unit lies in
  ``[cost x low / high, cost]``. The call is **too close to call** when the 80 % interval of the
  runner-up / recommended cost *ratio* includes 1: for two simulated cells, from the model's
  paired out-of-sample errors (:mod:`infermeter.perfmodel.paired`: two predictions on one
  hardware family err together, across families much less), widened by both search brackets;
  otherwise (a measured or calibrated cell) when their intervals overlap;
- **holds**: the daily-volume range where the recommended configuration is the cheapest fleet
  (from :func:`infermeter.analysis.capacity.break_even`'s bands);
- **caveats**: simulated vs measured, prices with their dates (undated or stale ones said so),
  configurations left out (no price, no load met the SLO, another model, does not fit), and what
  the twin does not model::

    decisions = decide(study, cells, prices)
    d = decisions["chat"]
    d.best.cell.config, d.margin, d.too_close, d.holds_text, d.caveats
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.matrix import fmt_sig
from infermeter.study.pricing import CellCost, StudyPrices

UNIT = {"usd_per_1m_requests": "per 1M requests", "usd_per_1m_output_tokens": "per 1M output tokens",
        "usd_per_1m_total_tokens": "per 1M total tokens"}
NOT_MODELLED = ("provider differences (network, host CPU, noisy neighbours, availability)", "thermal throttling",
                "engine versions other than the twin's vLLM-like scheduler", "autoscaling and cold starts")


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    basis: str

    def overlaps(self, other: Interval) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


@dataclass(frozen=True)
class Option:
    """One configuration's figure in a decision: its cost at the basis and what bounds it."""

    cost: CellCost
    value: float
    search: Interval | None  # from the SLO-capacity search's bracket
    model: Interval | None  # the performance model's prediction interval, when it exists
    model_note: str

    @property
    def cell(self) -> CellResult:
        return self.cost.cell

    @property
    def interval(self) -> Interval | None:
        """The widest bound known: the model's interval widened by the search's."""
        parts = [i for i in (self.search, self.model) if i is not None]
        if not parts:
            return None
        return Interval(min(i.lo for i in parts), max(i.hi for i in parts), " and ".join(i.basis for i in parts))


@dataclass
class Decision:
    profile: str
    metric: str
    options: list[Option]
    holds: list[tuple[float, float]] = field(default_factory=list)  # volume ranges (req/day) where best is cheapest
    holds_text: str = ""
    caveats: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    ratio: Interval | None = None  # runner-up / recommended cost, 80% (paired model errors and search brackets)

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None

    @property
    def runner_up(self) -> Option | None:
        return self.options[1] if len(self.options) > 1 else None

    @property
    def margin(self) -> float | None:
        b, r = self.best, self.runner_up
        return None if b is None or r is None or not b.value else r.value / b.value - 1

    @property
    def too_close(self) -> bool:
        """The figures tie, or the cost ratio's interval includes 1 (without one: the two intervals overlap)."""
        b, r = self.best, self.runner_up
        if b is None or r is None:
            return False
        if same_shown(b.value, r.value):
            return True
        if self.ratio is not None:
            return self.ratio.lo <= 1.0
        bi, ri = b.interval, r.interval
        return bool(bi and ri and bi.overlaps(ri))

    @property
    def call_text(self) -> str:
        """Why the call is close or clear, in a few words for the card and the findings."""
        if self.ratio is not None:
            span = f"{self.ratio.lo:.2f}–{self.ratio.hi:.2f}"
            return (f"the cost ratio's 80% interval, {span}, includes 1" if self.too_close
                    else f"the cost ratio's 80% interval is {span}") + f"; from {self.ratio.basis.split(' from ')[-1]}"
        return "their intervals overlap" if self.too_close else "the intervals do not overlap"

    def to_json(self) -> dict[str, Any]:
        def opt(o: Option | None) -> dict[str, Any] | None:
            if o is None:
                return None
            iv = o.interval
            return {"config": o.cell.config, "value": o.value, "source": o.cell.source,
                    "interval": None if iv is None else [iv.lo, iv.hi, iv.basis],
                    "model_interval": None if o.model is None else [o.model.lo, o.model.hi, o.model.basis],
                    "model_interval_note": o.model_note}
        return {"profile": self.profile, "metric": self.metric, "best": opt(self.best), "runner_up": opt(self.runner_up),
                "margin": self.margin, "too_close": self.too_close, "call": self.call_text,
                "ratio_interval": None if self.ratio is None else [self.ratio.lo, self.ratio.hi, self.ratio.basis],
                "holds": [list(h) for h in self.holds],
                "holds_text": self.holds_text, "caveats": self.caveats, "excluded": self.excluded,
                "ranking": [opt(o) for o in self.options]}


def sig3(v: float) -> float:
    """``v`` rounded to 3 significant figures (how simulated figures are shown)."""
    if v == 0 or not math.isfinite(v):
        return v
    return float(f"{v:.3g}")


def same_shown(a: float, b: float) -> bool:
    """Whether two figures print the same at 3 significant figures (a tie as the report shows it)."""
    return sig3(a) == sig3(b)


def model_interval(cell: CellResult, metric: str, study: StudyConfig | None = None,
                   basis: str = "SLO capacity") -> tuple[Interval | None, str]:
    """The performance model's 80% prediction interval on a simulated cell's cost basis, as an interval of its
    cost; (None, why) when there is none. Read from ``prediction_intervals`` in the basis step's summary when the
    simulation wrote one, else from :func:`infermeter.perfmodel.uncertainty.interval` for the throughput at the
    basis, in its regime (the batch: the closed loop's streams at saturation; requests/s x E2E p50 at SLO
    capacity, by Little's law). Returned as multipliers of the cost (cost is inversely proportional to
    throughput, so the bounds swap): ``Interval(rate / high, rate / low)``."""
    if cell.source != "simulated":
        return None, "measured: one run, no model interval"
    block = (cell.capacity if basis == "SLO capacity" else cell.saturation) or {}
    rate = block.get("output_tokens_per_s")
    step = block.get("step")
    s = next((x for x in cell.steps if x.get("k") == step), None) or {}
    raw = (s.get("prediction_intervals") or {}).get("output_token_throughput")
    if raw is not None and rate:
        lo, hi, why = (raw["lo"], raw["hi"], str(raw.get("basis") or "performance model")) if isinstance(raw, dict) \
            else (raw[0], raw[1], str(raw[2]) if len(raw) > 2 else "performance model")
        return Interval(float(rate) / float(hi), float(rate) / float(lo), why), ""
    if study is None or not rate:
        return None, "interval: not available (no prediction interval for this cell)"
    conf = study.configuration(cell.config)
    if conf.calibration is not None:
        return None, "interval: not available (a calibrated deployment: its own fit, not the model's table)"
    try:
        from infermeter.perfmodel import build_deployment
        from infermeter.perfmodel.uncertainty import interval, regime_of

        sim = study.sim_for(conf)
        d = build_deployment(study.model_for(conf), cell.hardware, dtype=sim.dtype, kv_dtype=sim.kv_dtype,
                             gpu_memory_utilization=sim.gpu_memory_utilization)
        mi = max(1, round(cell.tokens.get("mean_input") or 1))
        mo = max(1, round(cell.tokens.get("mean_output") or 1))
        if basis == "SLO capacity":
            e2e = ((cell.latency.get("capacity") or {}).get("e2e_ms") or {}).get("p50") or 0.0
            batch, which = max(1, round((block.get("requests_per_s") or 0.0) * e2e / 1000)), "output_tokens_per_s"
        else:
            batch, which = max(1, int(block.get("concurrency") or 1)), "saturation_output_tokens_per_s"
        lo, hi, why = interval(which, float(rate), regime_of(d, which, mi, mo, batch))
    except Exception as exc:  # the model cannot place this deployment: say so, invent nothing
        return None, f"interval: not available ({exc})"
    import re

    reg, n = re.search(r"regime (\S+?),", why), re.search(r"\(n=(\d+)\)", why)
    short = "performance model's 80% interval" + (f" ({reg.group(1)}" if reg else "") + (
        f", {n.group(1)} out-of-sample rows)" if n and reg else ")" if reg else "")
    return Interval(float(rate) / hi, float(rate) / lo, short), ""


def _search_interval(cell: CellResult, value: float, basis: str) -> Interval | None:
    cap = cell.capacity or {}
    if basis != "SLO capacity" or not cap.get("knee_low_rps") or not cap.get("knee_high_rps"):
        return None
    ratio = cap["knee_low_rps"] / cap["knee_high_rps"]
    return Interval(value * ratio, value, f"SLO edge bracketed within {cap['knee_precision']:.1%}")


def _holds(study: StudyConfig, prices: StudyPrices, profile: str, best: str) -> tuple[list[tuple[float, float]], str]:
    be = prices.break_even.get(profile)
    if be is None or not be.bands:
        return [], ""
    mine = [(b.low, b.high) for b in be.bands if b.winner == best]
    last = be.bands[-1]
    if not mine:
        return [], (f"at no daily volume between {fmt_sig(study.volume.low)} and {fmt_sig(study.volume.high)} is "
                    f"{best} the cheapest fleet (whole replicas): {last.winner} is above {fmt_sig(last.low)}")
    if last.winner == best:
        start = last.low  # the volume from which it stays cheapest
        for band in reversed(be.bands):
            if band.winner != best:
                break
            start = band.low
        if start <= study.volume.low * 1.0001:
            return mine, (f"over the whole range studied, {fmt_sig(study.volume.low)} to {fmt_sig(last.high)} "
                          "requests/day")
        return mine, (f"from {fmt_sig(start)} requests/day up to {fmt_sig(last.high)} (the top of the range); below "
                      "that, whole replicas make others cheaper at some volumes")
    spans = ", ".join(f"{fmt_sig(lo)}–{fmt_sig(hi)}" for lo, hi in mine[:3])
    return mine, f"at {spans} requests/day; {last.winner} is cheapest above {fmt_sig(last.low)}"


def short_reason(reason: str) -> str:
    """A left-out configuration's reason without the catalog's advice (which providers have it, which flag to pass):
    the prices table keeps the full text."""
    for cut in ("; providers with", "; known:", "; or pass", " (in a study:"):
        reason = reason.split(cut, 1)[0]
    return reason


def _price_caveat(cc: CellCost) -> str | None:
    r = cc.result
    if r is None:
        return None
    p = r.price
    return f"{cc.cell.config}: ${p.usd_per_hour:,.2f}/h ({p.provider} {p.instance}, {p.date_text})"


def decide(study: StudyConfig, cells: list[CellResult], prices: StudyPrices) -> dict[str, Decision]:
    """One decision per profile (see the module docstring)."""
    metric = study.pricing.value_metric
    out: dict[str, Decision] = {}
    for profile in study.profiles:
        ccs = [prices.cost[c.key] for c in cells if c.profile == profile and c.key in prices.cost]
        ranked = sorted((cc for cc in ccs if cc.comparable and cc.value(metric) is not None),
                        key=lambda cc: float(cc.value(metric) or 0.0))
        options = []
        for cc in ranked:
            v = float(cc.value(metric) or 0.0)
            mi, note = model_interval(cc.cell, metric, study, cc.basis)
            if mi is not None:  # the interval is on throughput's scale (1/cost): put it on the cost's
                mi = Interval(v * mi.lo, v * mi.hi, mi.basis)
            options.append(Option(cc, v, _search_interval(cc.cell, v, cc.basis), mi, note))
        d = Decision(profile, metric, options)
        d.ratio = ratio_interval_of(d)
        d.excluded = [f"{cc.cell.config}: {short_reason(cc.reason)}" for cc in ccs
                      if cc not in ranked and cc.reason] + [f"{cc.cell.config}: no price at its cost basis"
                                                            for cc in ccs if cc not in ranked and not cc.reason]
        if d.best is not None:
            d.holds, d.holds_text = _holds(study, prices, profile, d.best.cell.config)
        d.caveats = caveats(study, [cc.cell for cc in ccs], prices, d)
        out[profile] = d
    return out


def ratio_interval_of(d: Decision) -> Interval | None:
    """The runner-up / recommended cost ratio's 80% interval, when both figures are the model's (simulated cells
    with a model interval): the paired model error, widened by each SLO search's bracket."""
    from infermeter.perfmodel.paired import family_of, ratio_interval

    b, r = d.best, d.runner_up
    if b is None or r is None or b.model is None or r.model is None or not b.value:
        return None
    fb, fr = family_of(b.cell.hardware), family_of(r.cell.hardware)
    lo, hi, basis = ratio_interval(r.value / b.value, same_family=fb is not None and fb == fr)
    qb = b.search.lo / b.value if b.search is not None and b.value else 1.0  # true cost in [value x q, value]
    qr = r.search.lo / r.value if r.search is not None and r.value else 1.0
    return Interval(lo * qr, hi / qb, basis + (" and the SLO searches' brackets" if qb < 1 or qr < 1 else ""))


def caveats(study: StudyConfig, cells: list[CellResult], prices: StudyPrices, d: Decision) -> list[str]:
    """Why to doubt the decision: where the figures come from, the prices' dates, what is not modelled."""
    out = []
    sources = sorted({c.source for c in cells if not c.unavailable})
    if sources == ["simulated"]:
        out.append("Every figure is simulated by infermeter's twin from the performance model's hardware figures: "
                   "a model, not a measurement.")
    elif "simulated" in sources:
        out.append("Mixed sources: " + ", ".join(f"{c.config} {c.source}" for c in cells if not c.unavailable) + ".")
    if any(c.source == "emulated" for c in cells):
        out.append("An emulated endpoint is infermeter's digital twin behind HTTP: its figures measure the emulation.")
    used = [x for x in (_price_caveat(o.cost) for o in d.options[:2]) if x]
    if used:
        out.append("Prices: " + "; ".join(used) + ".")
    out += [n for n in prices.notes if any(o.cell.config in n or o.cell.hardware in n for o in d.options[:2])]
    twins: dict[tuple[Any, ...], list[str]] = {}
    for c in cells:
        if c.source == "simulated" and not c.unavailable:
            conf = study.configuration(c.config)
            twins.setdefault((c.hardware, study.model_for(conf), study.sim_for(conf)), []).append(c.config)
    for names in twins.values():
        if len(names) > 1:
            out.append(f"{' and '.join(names)} are the same deployment to the twin: their performance is identical by "
                       "construction and only their prices differ.")
    if study.load.precision:
        out.append(f"SLO capacity is bracketed within {study.load.precision:.0%} by the load search.")
    out.append("Not modelled: " + "; ".join(NOT_MODELLED) + ".")
    return out


def decision_line(d: Decision, unit: str | None = None) -> str:
    """The card's first line: the recommendation and its margin, or why there is none (figures as the tables show
    them: 3 significant figures)."""
    from infermeter.study.matrix import fmt_sig_usd

    unit = unit or UNIT[d.metric]
    b, r = d.best, d.runner_up
    if b is None:
        return (f"{d.profile}: no recommendation — no configuration serving the study's model could be priced at a "
                "load meeting the SLO.")
    text = f"{d.profile}: rent {b.cell.config} — {fmt_sig_usd(b.value)} {unit} ({b.cell.source})"
    if r is None:
        return text + "; the only configuration that qualifies."
    if same_shown(b.value, r.value):
        return text + f"; tied with {r.cell.config} ({fmt_sig_usd(r.value)}): too close to call."
    text += f"; {r.cell.config} costs {(d.margin or 0.0):.1%} more ({fmt_sig_usd(r.value)})"
    return text + (f": too close to call ({d.call_text})." if d.too_close else f" ({d.call_text}).")
