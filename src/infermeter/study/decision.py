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
from dataclasses import asdict, dataclass, field
from typing import Any

from infermeter.study.capstatus import closest_text, status_of
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.matrix import fmt_sig, fmt_sig_usd
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


@dataclass(frozen=True)
class SoakVerdict:
    """What a soak of a decision's configuration says: it held its error budget or failed it, with the numbers, and
    after a failure the per-replica rate its probes held at, and what that costs."""

    config: str
    held: bool
    text: str
    sized_rps: float | None = None  # the capacity per replica the fleet was sized from
    holding_rps: float | None = None  # per replica: the highest probe rate that held
    failing_rps: float | None = None  # per replica: the lowest rate that failed (the soak's own, or a probe's)
    shrink: float | None = None  # share the sizing capacity must shrink by to hold
    replicas: int | None = None  # replicas the soak's rate needs at the holding rate
    value_at_holding: float | None = None  # the value metric at the holding capacity

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    failing: list[str] = field(default_factory=list)  # configurations failing the SLO at this workload, and where
    soak: SoakVerdict | None = None  # the recommended configuration's soak, when one ran
    other_soaks: list[SoakVerdict] = field(default_factory=list)
    request_text: str = ""  # what one request of this profile is (mean tokens measured)
    workload_text: str = ""  # whether the workload drives the call (other profiles' recommendations)
    at_volume: list[tuple[str, int, float]] = field(default_factory=list)  # (config, replicas, $/month) at daily
    at_volume_text: str = ""
    terms: dict[str, list[tuple[str, float | None, str]]] = field(default_factory=dict)  # config -> value per term
    flips: list[str] = field(default_factory=list)  # unpriced configurations: the $/h at which they would win
    assumptions: str = ""
    starved: list[str] = field(default_factory=list)  # cells limited by their own configuration, and the fix

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
    def demoted(self) -> bool:
        """The recommended configuration's own soak failed: the call is not confirmed."""
        return self.soak is not None and not self.soak.held

    @property
    def too_close(self) -> bool:
        """The figures tie, or the cost ratio's interval includes 1 (without one: the two intervals overlap, or the
        one interval there is holds the other figure)."""
        b, r = self.best, self.runner_up
        if b is None or r is None:
            return False
        if same_shown(b.value, r.value):
            return True
        if self.ratio is not None:
            return self.ratio.lo <= 1.0
        bi, ri = b.interval, r.interval
        if bi and ri:
            return bi.overlaps(ri)
        if bi:
            return bi.lo <= r.value <= bi.hi
        if ri:
            return ri.lo <= b.value <= ri.hi
        return False

    @property
    def call_text(self) -> str:
        """Why the call is close or clear, in a few words for the card and the findings, from the figures there are."""
        b, r = self.best, self.runner_up
        if b is None or r is None:
            return "no runner-up to compare with"
        lower = ("; " + r.cell.config + "'s capacity is only a lower bound, so it may cost less than shown"
                 if r.search is not None and r.search.lo == 0.0 else "")
        if self.ratio is not None:
            hi = "unbounded" if math.isinf(self.ratio.hi) else f"{self.ratio.hi:.2f}"
            span = f"{self.ratio.lo:.2f}–{hi}"
            return (f"the cost ratio's 80% interval, {span}, includes 1" if self.too_close
                    else f"the cost ratio's 80% interval is {span}") + \
                f"; from {self.ratio.basis.split(' from ')[-1]}" + lower
        bi, ri = b.interval, r.interval
        if bi and ri:
            return ("their intervals overlap" if self.too_close else "their intervals do not overlap") + lower
        if bi or ri:
            one, other = (b, r) if bi else (r, b)
            return (f"{other.cell.config}'s figure lies {'inside' if self.too_close else 'outside'} "
                    f"{one.cell.config}'s interval; {other.cell.config}'s figure has none") + lower
        return "neither figure has an interval: the margin alone"

    def to_json(self) -> dict[str, Any]:
        def opt(o: Option | None) -> dict[str, Any] | None:
            if o is None:
                return None
            iv = o.interval
            return {"config": o.cell.config, "value": o.value, "source": o.cell.source,
                    "interval": None if iv is None else [iv.lo, iv.hi, iv.basis],
                    "model_interval": None if o.model is None else [o.model.lo, o.model.hi, o.model.basis],
                    "model_interval_note": o.model_note}
        ratio = None if self.ratio is None else [self.ratio.lo, None if math.isinf(self.ratio.hi) else self.ratio.hi,
                                                 self.ratio.basis]
        return {"profile": self.profile, "metric": self.metric, "best": opt(self.best), "runner_up": opt(self.runner_up),
                "margin": self.margin, "too_close": self.too_close, "call": self.call_text,
                "demoted": self.demoted, "ratio_interval": ratio,
                "holds": [list(h) for h in self.holds],
                "holds_text": self.holds_text, "caveats": self.caveats, "excluded": self.excluded,
                "failing": self.failing, "soak": None if self.soak is None else self.soak.to_json(),
                "other_soaks": [x.to_json() for x in self.other_soaks], "request": self.request_text,
                "workload": self.workload_text,
                "at_volume": [{"config": c, "replicas": n, "usd_per_month": m} for c, n, m in self.at_volume],
                "at_volume_text": self.at_volume_text,
                "terms": {k: [[t, v, why] for t, v, why in x] for k, x in self.terms.items()},
                "flips": self.flips, "assumptions": self.assumptions, "starved": self.starved,
                "ranking": [opt(o) for o in self.options]}


def times_text(ratio: float) -> str:
    """How much more one cost is than another, readably: ``"27.0% more"`` below 2x, ``"3.4x"`` to 10x, ``"65x"``."""
    if ratio < 2:
        return f"{ratio - 1:.1%} more"
    return f"{ratio:.1f}x as much" if ratio < 10 else f"{ratio:,.0f}x as much"


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
                             gpu_memory_utilization=sim.gpu_memory_utilization, max_num_seqs=sim.max_num_seqs,
                             max_batched_tokens=sim.max_num_batched_tokens)
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


def _search_interval(cell: CellResult, value: float, basis: str, study: StudyConfig) -> Interval | None:
    """The cost interval the SLO search's verdict implies: bracketed -> ``[value x low / high, value]``; a lower
    bound on capacity -> ``[0, value]`` (the cost is at most the figure); else None."""
    if basis != "SLO capacity":
        return None
    st = status_of(cell, study)
    if st.status == "bracketed" and st.low and st.high:
        return Interval(value * st.low / st.high, value, f"SLO edge bracketed within {st.precision:.1%}")
    if st.status == "lower_bound":
        return Interval(0.0, value, "capacity a lower bound (met the SLO at the highest load tried)")
    return None


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


def decide(study: StudyConfig, cells: list[CellResult], prices: StudyPrices,
           soaks: list[Any] | None = None) -> dict[str, Decision]:
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
            options.append(Option(cc, v, _search_interval(cc.cell, v, cc.basis, study), mi, note))
        d = Decision(profile, metric, options)
        d.ratio = ratio_interval_of(d)
        failing = [cc for cc in ccs if cc not in ranked and cc.comparable and study.slo.limits
                   and status_of(cc.cell, study).status == "upper_bound"]
        d.failing = [f"{cc.cell.config}: {closest_text(status_of(cc.cell, study))}" for cc in failing]
        d.excluded = [f"{cc.cell.config}: {short_reason(cc.reason)}" for cc in ccs
                      if cc not in ranked and cc not in failing and cc.reason] + \
            [f"{cc.cell.config}: no price at its cost basis" for cc in ccs
             if cc not in ranked and cc not in failing and not cc.reason]
        if d.best is not None:
            d.holds, d.holds_text = _holds(study, prices, profile, d.best.cell.config)
            d.soak, d.other_soaks = soak_verdicts(study, d, soaks or [])
            d.at_volume, d.at_volume_text = at_volume(study, prices, d)
            d.terms = {o.cell.config: _terms(study, prices, o) for o in d.options[:2]}
            d.flips = flip_prices(study, prices, d, ccs)
        d.request_text = request_text(study, [cc.cell for cc in ccs], d)
        d.starved = [f"{c.config}: {t}" for c in (cc.cell for cc in ccs) if (t := starved_text(study, c))]
        d.assumptions = (f"utilisation {study.pricing.utilization:.0%} of the cost basis capacity (pricing.utilization)"
                         + (f", overhead +{study.pricing.overhead:.0%} on prices" if study.pricing.overhead else "")
                         + f"; whole replicas at peak factor {study.volume.peak_factor:g}, headroom "
                         f"{study.volume.headroom:.0%}")
        d.caveats = caveats(study, [cc.cell for cc in ccs], prices, d)
        out[profile] = d
    for d in out.values():
        d.workload_text = workload_text(study, out, d)
    return out


def ratio_interval_of(d: Decision) -> Interval | None:
    """The runner-up / recommended cost ratio's 80% interval, when both figures are the model's (simulated cells
    with a model interval): the paired model error, widened by each SLO search's bracket (a capacity that is only a
    lower bound leaves that side of the ratio open)."""
    from infermeter.perfmodel.paired import family_of, ratio_interval

    b, r = d.best, d.runner_up
    if b is None or r is None or b.model is None or r.model is None or not b.value:
        return None
    fb, fr = family_of(b.cell.hardware), family_of(r.cell.hardware)
    lo, hi, basis = ratio_interval(r.value / b.value, same_family=fb is not None and fb == fr)
    qb = b.search.lo / b.value if b.search is not None and b.value else 1.0  # true cost in [value x q, value]
    qr = r.search.lo / r.value if r.search is not None and r.value else 1.0
    return Interval(lo * qr, hi / qb if qb > 0 else math.inf,
                    basis + (" and the SLO searches' brackets" if qb < 1 or qr < 1 else ""))


def soak_verdicts(study: StudyConfig, d: Decision, soaks: list[Any]) -> tuple[SoakVerdict | None, list[SoakVerdict]]:
    """(the recommended configuration's soak verdict, the other soaked configurations' verdicts) for this profile."""
    mine = [s for s in soaks if s.profile == d.profile]
    verdicts = [verdict_of(study, s, next((o for o in d.options if o.cell.config == s.config), None)) for s in mine]
    best = d.best.cell.config if d.best else None
    return next((v for v in verdicts if v.config == best), None), [v for v in verdicts if v.config != best]


def verdict_of(study: StudyConfig, s: Any, option: Option | None) -> SoakVerdict:
    """A soak's verdict with its numbers; after a failure, what its probes found (see :class:`SoakVerdict`)."""
    from infermeter.study.soak import held, slo_misses

    b, m = s.budget, s.summary
    misses = slo_misses(s.windows, study.slo)
    ok = held(b, misses)
    p99 = ((m.get("ttft_ms") or {}).get("p99"))
    share = b["bad"] / b["requests"] if b["requests"] else 0.0
    head = (f"{'held' if ok else 'FAILED'}: {b['bad']:,} of {b['requests']:,} requests bad ({share:.2%}; error budget "
            f"{1 - b['objective']:.2%}" + (f", exhausted after {b['exhausted_at_s'] / 3600:.2g} h" if
                                          b.get("exhausted_at_s") else "") + ")"
            + (f", TTFT p99 {fmt_sig(p99 / 1000)} s" if p99 else "")
            + (f"; {len(misses)} of {len(s.windows)} windows missed the SLO (first {misses[0]})" if misses else
               "; every window met the SLO")
            + f"; {s.replicas} replica(s) of {s.config} at {s.rate_per_s:g} req/s for {s.duration_s / 3600:g} h "
            f"({s.replicas_basis}; simulated)")
    soak_in = m.get("mean_input_tokens")
    cell_in = option.cell.tokens.get("mean_input") if option is not None else None
    if soak_in and cell_in and abs(soak_in / cell_in - 1) > 0.1:
        head += (f"; its requests averaged {soak_in:,.0f} input tokens against {cell_in:,.0f} in the load steps the "
                 "capacity came from")
    if ok:
        return SoakVerdict(s.config, True, head)
    sized = (option.cell.capacity or {}).get("requests_per_s") if option is not None else None
    probes = list(getattr(s, "probes", []) or [])
    routed = [p for p in probes[:1] if p.get("router", s.router) != s.router]  # the router counterfactual
    if routed:
        p = routed[0]
        hit = (s.summary.get("server_metrics") or {}).get("prefix_cache_hit_rate")
        cell_hit = option.cell.server.get("prefix_cache_hit_rate") if option is not None else None
        cache = (f" (prefix-cache hit rate {hit:.0%} in the soak against {cell_hit:.0%} in the load steps"
                 + (f", {p['prefix_cache_hit_rate']:.0%} in the probe" if p.get("prefix_cache_hit_rate") is not None
                    else "") + ")") if hit is not None and cell_hit is not None else ""
        head += (f"; a probe at the same {fmt_sig(p['per_replica_rps'])} req/s per replica with {p['router']} routing "
                 f"{'held' if p['held'] else 'failed too'} ({p['bad']:,} of {p['requests']:,} bad, "
                 f"{p['replicas']} replicas)" + cache)
        if p["held"]:
            return SoakVerdict(s.config, False, head + f": the {s.router} router, not the capacity, broke the soak — "
                               "route each session to one replica", sized_rps=sized)
    probes = [p for p in probes if p is not (routed[0] if routed else None)]
    if not probes:
        return SoakVerdict(s.config, False, head + ("" if routed else "; no probes ran (soak.probes: 0)")
                           + ": re-run the soak at a lower rate to find the rate at which it holds", sized_rps=sized)
    good = [p["per_replica_rps"] for p in probes if p["held"]]
    bad = [p["per_replica_rps"] for p in probes if not p["held"]] + [s.rate_per_s / s.replicas]
    if not good:
        return SoakVerdict(s.config, False, head + f"; its probes failed even at {fmt_sig(min(bad))} req/s per replica "
                           f"({len(probes)} probe runs of {probes[0]['replicas']} replicas, router "
                           f"{probes[0].get('router', s.router)}; the lowest: {probes[-1]['bad']:,} of "
                           f"{probes[-1]['requests']:,} bad, {probes[-1].get('windows_missing_slo', 0)} window(s) missing "
                           "the SLO): it holds only below the rates probed", sized_rps=sized,
                           failing_rps=min(bad))
    hold, fail = max(good), min(x for x in bad if x > max(good))
    headroom = study.volume.headroom
    cap_hold = hold / (1 - headroom)  # the capacity that, sized with the study's headroom, loads a replica to `hold`
    shrink = 1 - cap_hold / sized if sized else None
    need = max(1, math.ceil(s.rate_per_s / hold - 1e-9))
    value = option.value * sized / cap_hold if option is not None and sized else None
    text = (head + f"; probes ({probes[0]['replicas']} replicas, router {probes[0].get('router', s.router)}, "
            f"{probes[0]['duration_s'] / 3600:g} h "
            f"each) held at {fmt_sig(hold)} req/s per replica and failed at {fmt_sig(fail)}")
    if shrink is not None and shrink > 0:
        text += (f": the SLO capacity it was sized from ({fmt_sig(sized)} req/s) must shrink by {shrink:.0%} to hold "
                 f"({fmt_sig(cap_hold)} req/s at {headroom:.0%} headroom): {need} replicas for {s.rate_per_s:g} req/s")
    elif shrink is not None:
        text += (f": it held at a per-replica rate at or above the sizing ({fmt_sig(cap_hold)} req/s at "
                 f"{headroom:.0%} headroom vs {fmt_sig(sized)}); the failure is not the capacity figure alone")
    if value is not None and option is not None and shrink is not None and shrink > 0:
        text += f", {fmt_sig_usd(value)} {UNIT[study.pricing.value_metric]} ({times_text(value / option.value)})"
    return SoakVerdict(s.config, False, text, sized, hold, fail, shrink, need, value)


def at_volume(study: StudyConfig, prices: StudyPrices, d: Decision) -> tuple[list[tuple[str, int, float]], str]:
    """The answer at the study's daily volume (``volume.daily``), whole replicas: each ranked configuration's
    replicas and monthly cost, cheapest first, and a sentence naming the cheapest and whether it is the per-unit
    recommendation."""
    from infermeter.analysis.capacity import size

    v = study.volume
    cands = prices.candidates.get(d.profile, [])
    if v.daily is None or not cands:
        return [], ""
    sized = sorted(((c.name, size(c, v.daily, v.peak_factor, v.headroom)) for c in cands),
                   key=lambda x: x[1].usd_per_month)
    rows = [(name, z.replicas, z.usd_per_month) for name, z in sized]
    top = rows[0]
    text = f"at {fmt_sig(v.daily)} requests/day: " + "; ".join(
        f"{n} — {k} replica(s), {fmt_sig_usd(m)}/month" + ("" if m == top[2] else f" ({times_text(m / top[2])})")
        for n, k, m in rows[:4])
    if d.best is not None and top[0] != d.best.cell.config:
        text += (f". At this volume {top[0]} is the cheaper fleet: whole replicas outweigh "
                 f"{d.best.cell.config}'s lower cost per unit")
    return rows, text


def _terms(study: StudyConfig, prices: StudyPrices, o: Option) -> list[tuple[str, float | None, str]]:
    """The option's value metric at each price term of its configuration (on demand, commitments, spot)."""
    from infermeter.study.pricing import price_terms

    r = o.cost.result
    if r is None or not r.price.usd_per_hour:
        return []
    return [(t, None if p is None else o.value * p / r.price.usd_per_hour, why)
            for t, p, why in price_terms(study, o.cell.config, r.price)]


def flip_prices(study: StudyConfig, prices: StudyPrices, d: Decision, ccs: list[CellCost]) -> list[str]:
    """For each unpriced configuration that met the SLO: the hourly price at which it would match the recommended
    configuration's cost."""
    from infermeter.study.pricing import unit_cost_per_usd_hour

    b = d.best
    if b is None:
        return []
    out = []
    for cc in ccs:
        if not cc.comparable or cc.result is not None or cc.cell.unavailable:
            continue
        per = unit_cost_per_usd_hour(cc, d.metric, study)
        if per:
            out.append(f"{cc.cell.config} has no price: it would match {b.cell.config} "
                       f"({fmt_sig_usd(b.value)} {UNIT[d.metric]}) at {fmt_sig_usd(b.value / per)}/h and win below it")
    return out


def request_text(study: StudyConfig, cells: list[CellResult], d: Decision) -> str:
    """What one request of the profile is: the mean input and output tokens the cells measured."""
    cs = [c for c in cells if not c.unavailable and c.tokens.get("mean_input") is not None]
    if not cs:
        return ""
    c = next((x.cell for x in d.options[:1] if x.cell in cs), cs[0])
    mi, mo = c.tokens.get("mean_input") or 0.0, c.tokens.get("mean_output") or 0.0
    over = study.profile_overrides.get(d.profile)
    return (f"one {d.profile} request = {mi:,.0f} input + {mo:,.0f} output tokens on average (measured at saturation "
            f"on {c.config}; profile {d.profile}" + (f" with {over}" if over else "") + ")")


def workload_text(study: StudyConfig, decisions: dict[str, Decision], d: Decision) -> str:
    """Whether the workload drives the call: the recommendations of the study's other profiles."""
    if d.best is None:
        return ""
    others = {p: x.best.cell.config for p, x in decisions.items() if p != d.profile and x.best is not None}
    if not others:
        return ("only this workload was studied: the call is for requests like these; another request mix (longer "
                "prompts, shorter answers) can change it")
    differ = {p: c for p, c in others.items() if c != d.best.cell.config}
    if differ:
        return ("the workload drives this call: " + "; ".join(f"for {p} the recommendation is {c}"
                                                              for p, c in differ.items()))
    return f"the same configuration is recommended for every profile studied ({', '.join([d.profile, *others])})"


def starved_text(study: StudyConfig, c: CellResult) -> str:
    """A cell starved by its own configuration: its KV cache holds fewer whole sequences of this workload (input
    tokens net of the cell's prefix-cache hits, plus output) than a small batch (16) or a tenth of max_num_seqs,
    with the fix named (fp8 KV cache, fp8 weights, more tensor
    parallel) and, where the performance model can place it, the KV tokens each fix gives."""
    t = c.target or {}
    kv = t.get("kv_capacity_tokens")
    mi, mo = c.tokens.get("mean_input"), c.tokens.get("mean_output")
    if c.unavailable or not kv or not mi or c.source != "simulated":
        return ""
    hit = min(max(float(c.server.get("prefix_cache_hit_rate") or 0.0), 0.0), 0.99)
    per = (mi or 0.0) * (1 - hit) + (mo or 0.0)  # a shared prefix (a document, a conversation's history) is held once
    seqs = kv / per
    mns = t.get("max_num_seqs") or 256
    if seqs >= min(16.0, mns / 10):
        return ""
    conf = study.configuration(c.config)
    sim = study.sim_for(conf)
    fixes = []
    for what, dtype, kv_dtype, tp in (("fp8 KV cache (sim.kv_dtype: fp8)", sim.dtype, "fp8", None),
                                      ("fp8 weights and KV cache (dtype: fp8, sim.kv_dtype: fp8)", "fp8", "fp8", None),
                                      ("twice the tensor parallel", sim.dtype, sim.kv_dtype, "double")):
        tokens = _kv_tokens(study, conf, c.hardware, dtype, kv_dtype, tp)
        fixes.append(what + (f": {tokens:,.0f} KV tokens ≈ {tokens / per:,.0f} sequences" if tokens else ""))
    shared = f" after its {hit:.0%} prefix-cache hits" if hit >= 0.005 else ""
    return (f"starved by its own configuration: its KV cache holds {kv:,.0f} tokens ≈ {seqs:.0f} sequences of "
            f"{per:,.0f} tokens{shared} (of max_num_seqs {mns}); fix: " + "; ".join(fixes))


def _kv_tokens(study: StudyConfig, conf: Any, hardware: str, dtype: str, kv_dtype: str | None,
               tp: str | None) -> float | None:
    try:
        from infermeter.perfmodel import build_deployment
        from infermeter.perfmodel.configspec import parse_config

        hw = parse_config(hardware)
        if tp == "double":
            hw = parse_config(f"{hw.count * 2}x{hw.hardware}:tp{hw.tp * 2},pp{hw.pp}")
        sim = study.sim_for(conf)
        dep = build_deployment(study.model_for(conf), hw.label, dtype=dtype, kv_dtype=kv_dtype,
                               gpu_memory_utilization=sim.gpu_memory_utilization, max_num_seqs=sim.max_num_seqs,
                               max_batched_tokens=sim.max_num_batched_tokens)
        return float(dep.kv_capacity_tokens) if dep.fits and dep.kv_capacity_tokens > 0 else None
    except Exception:  # the model cannot place it (does not fit, unknown dtype): no figure, the fix is still named
        return None


def caveats(study: StudyConfig, cells: list[CellResult], prices: StudyPrices, d: Decision) -> list[str]:
    """Why to doubt the decision: where the figures come from, the prices' dates, what each shown figure's SLO
    search established, what is not modelled."""
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
    for o in d.options[:2]:
        if o.cost.basis == "SLO capacity":
            out.append(f"{o.cell.config}: {status_of(o.cell, study).text()}.")
    out.append("Not modelled: " + "; ".join(NOT_MODELLED) + ".")
    return out


def decision_line(d: Decision, unit: str | None = None) -> str:
    """The card's first line: the recommendation and its margin, or why there is none (figures as the tables show
    them: 3 significant figures); a failed soak of the recommended fleet is said first."""
    unit = unit or UNIT[d.metric]
    b, r = d.best, d.runner_up
    if b is None:
        return (f"{d.profile}: no recommendation — no configuration serving the study's model could be priced at a "
                "load meeting the SLO.")
    text = f"{d.profile}: rent {b.cell.config} — {fmt_sig_usd(b.value)} {unit} ({b.cell.source})"
    if d.demoted:
        text = (f"{d.profile}: NOT CONFIRMED — {b.cell.config} is cheapest on paper ({fmt_sig_usd(b.value)} {unit}, "
                f"{b.cell.source}) but its fleet failed the soak")
        sv = d.soak
        if sv is not None and sv.value_at_holding is not None:
            text += f"; at the rate its soak holds it costs {fmt_sig_usd(sv.value_at_holding)}"
            if r is not None and sv.value_at_holding > r.value:
                rs = next((v for v in d.other_soaks if v.config == r.cell.config), None)
                text += (f", more than {r.cell.config} ({fmt_sig_usd(r.value)}, "
                         + ("not soaked" if rs is None else "whose soak held" if rs.held else "whose soak failed too")
                         + ")")
        return text + "."
    if r is None:
        return text + "; the only configuration that qualifies."
    if same_shown(b.value, r.value):
        return text + f"; tied with {r.cell.config} ({fmt_sig_usd(r.value)}): too close to call."
    text += f"; {r.cell.config} costs {times_text(r.value / b.value)} ({fmt_sig_usd(r.value)})"
    return text + (f": too close to call ({d.call_text})." if d.too_close else f" ({d.call_text}).")
