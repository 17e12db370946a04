"""The findings: sentences written from the study's numbers, ranked by how much they bear on the decision.

The contract: :func:`write_findings` recomputes every sentence from the cells, prices, decisions
and soaks it is given — nothing is canned, so different inputs give different findings (swap two
prices and the best-value sentence names the other configuration). Each :class:`Finding` carries
:class:`~infermeter.study.matrix.Ref` s: the report table, row and column of every figure it
quotes, whose shown text is the number in the sentence, and a ``weight`` (how much it changes the
decision); the list comes back heaviest first::

    >>> fs = write_findings(study, cells, prices, soaks)
    >>> fs[0].topic
    'value'
    >>> print(fs[0].text)
    chat: best value is h200 at $374 per 1M requests (SLO capacity, simulated; price $4.04/h, ...), 32.5% cheaper
    than h100-sxm ($554); clear: the cost ratio's 80% interval is 1.35–1.62; ...
    >>> fs[0].refs[0].table, fs[0].refs[0].row, fs[0].refs[0].column
    ('m_usd_1m_req', 'h200', 'chat')

Rules: ties (figures that print the same at 3 significant figures) are stated as ties, never as
"0 % more"; causal words only where the numbers carry them and survive the counterfactual they
imply (:func:`limit_of`) — "the KV cache limited X" needs a nearly full cache and preemptions, or
fewer running than offered that neither max_num_seqs nor the prefill budget explains and that no
peer with room in its cache matches; the prefill budget or max_num_seqs is named when the running
count sits at what it admits; no finding counts
something the decision does not use (e.g. how often the break-even lead changes). Only
comparable cells (serving the study's model) are ranked. Topics, heaviest first: best value and
its margin, what would change it, configurations left out, SLO capacity, KV cache limits,
throughput at saturation, latency one request at a time, TP vs PP, CPU vs GPU, break-even, soak,
prefix caching, measured sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infermeter.perfmodel.configspec import parse_config
from infermeter.report.table import fmt_num, fmt_pct, fmt_usd
from infermeter.study.capstatus import closest_text, status_of
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.decision import Decision, same_shown, short_reason
from infermeter.study.matrix import METRIC, VALUE_METRIC, Ref, fmt_sig, ref, value
from infermeter.study.pricing import StudyPrices

KV_FULL = 0.95
SRC = {"simulated": "simulated", "measured": "measured", "emulated": "emulated"}
UNIT = {"usd_1m_req": "per 1M requests", "usd_1m_out": "per 1M output tokens", "usd_1m_total": "per 1M total tokens"}
WEIGHT = {"value": 100, "change": 90, "excluded": 80, "slo": 70, "kv": 60, "throughput": 50, "latency": 40,
          "parallelism": 35, "cpu": 30, "break-even": 25, "soak": 20, "prefix": 15, "sources": 10}


@dataclass(frozen=True)
class Finding:
    topic: str
    text: str
    refs: tuple[Ref, ...] = ()
    weight: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "text": self.text, "weight": self.weight, "refs": [r.to_json() for r in self.refs]}


def more(a: float, b: float) -> str:
    """How much ``a`` exceeds ``b``: ``"27% more than"`` below 2x, ``"3.4x"`` from there (never a 0 % lead:
    callers state ties with :func:`same_shown` first)."""
    if a < 2 * b:
        pct = a / b - 1
        return f"{pct:.0%} more than" if pct >= 0.005 else f"{pct:.1%} more than"
    return f"{a / b:.1f}x"


def shown(r: Ref) -> str:
    """The number of a ref as the sentence writes it (its table text without the source tag)."""
    return r.display.rsplit(" (", 1)[0]


class _Writer:
    def __init__(self, study: StudyConfig, cells: list[CellResult], prices: StudyPrices,
                 decisions: dict[str, Decision] | None = None) -> None:
        self.study, self.cells, self.prices = study, cells, prices
        self.decisions = decisions or {}
        self.out: list[Finding] = []

    def add(self, topic: str, text: str, refs: list[Ref]) -> None:
        self.out.append(Finding(topic, text, tuple(refs), WEIGHT.get(topic, 0)))

    def comparable(self, profile: str, metric: str) -> list[CellResult]:
        """Comparable cells of ``profile`` with a value for ``metric``, best first."""
        m = METRIC[metric]
        cs = [c for c in self.cells if c.profile == profile and self.prices.cost[c.key].comparable
              and value(metric, c, self.prices) is not None]
        return sorted(cs, key=lambda c: value(metric, c, self.prices) or 0.0, reverse=m.higher_is_better)

    def r(self, metric: str, c: CellResult) -> Ref:
        return ref(metric, c, self.prices)

    def v(self, metric: str, c: CellResult) -> float:
        return float(value(metric, c, self.prices) or 0.0)


def _sources(w: _Writer) -> None:
    measured = [c for c in w.cells if c.source in ("measured", "emulated")]
    n = len(w.cells)
    if measured:
        names = sorted({f"{c.config} × {c.profile}" for c in measured})
        w.add("sources", f"{len(measured)} of {n} cells were measured on live endpoints ({', '.join(names)}); "
              f"the other {n - len(measured)} were simulated by the twin.", [w.r("sat_out", c) for c in measured])
        emulated = sorted({c.config for c in measured if c.source == "emulated"})
        if emulated:
            w.add("sources", f"The endpoint of {', '.join(emulated)} reported itself as an infermeter emulator: its "
                  "figures measure the emulation (a digital twin), not hardware, and are labelled emulated.", [])
    for c in measured:
        cc = w.prices.cost[c.key]
        if not cc.comparable:
            w.add("sources", f"{c.config} was measured serving {c.model or 'an unnamed model'}, not {w.study.model}: "
                  f"its {c.profile} figures (e.g. {shown(w.r('sat_out', c))} output tokens/s at saturation) are "
                  "shown but left out of rankings, best value and break-even.", [w.r("sat_out", c)])


def _lead(w: _Writer, key: str, a: CellResult, b: CellResult) -> tuple[str, list[Ref]]:
    """'27% more than Y (n, source)' or 'tied with Y (n, source)' for the top two cells of ``key``."""
    ra, rb = w.r(key, a), w.r(key, b)
    if same_shown(w.v(key, a), w.v(key, b)):
        return f"tied with {b.config} ({shown(rb)}, {SRC[b.source]})", [ra, rb]
    return f"{more(w.v(key, a), w.v(key, b))} {b.config} ({shown(rb)}, {SRC[b.source]})", [ra, rb]


def _throughput(w: _Writer, profile: str) -> None:
    # a saturation figure from a run judged invalid is not ranked (study/tables.py): no leader, no lowest
    cs = [c for c in w.comparable(profile, "sat_out") if c.saturation_valid]
    if len(cs) < 2:
        return
    a, b, last = cs[0], cs[1], cs[-1]
    ra, rl = w.r("sat_out", a), w.r("sat_out", last)
    lead, refs = _lead(w, "sat_out", a, b)
    verb = "shares the highest" if lead.startswith("tied") else "has the highest"
    text = (f"{profile}: {a.config} {verb} throughput at saturation, {shown(ra)} output tokens/s ({SRC[a.source]}), "
            + lead)
    if len(cs) > 2 and not same_shown(w.v("sat_out", a), w.v("sat_out", last)):
        text += f"; the lowest is {last.config} at {shown(rl)} ({w.v('sat_out', a) / w.v('sat_out', last):.1f}x less)"
        refs.append(rl)
    w.add("throughput", text + ".", refs)


def _capacity(w: _Writer, profile: str) -> None:
    if not w.study.slo.limits:
        return
    cs = w.comparable(profile, "cap_rps")
    if not cs:
        return
    a = cs[0]
    ra = w.r("cap_rps", a)
    text = (f"{profile}: under the SLO ({w.study.slo.describe()}), {a.config} sustains the most load, "
            f"{shown(ra)} requests/s ({SRC[a.source]})")
    refs = [ra]
    if len(cs) > 1:
        lead, more_refs = _lead(w, "cap_rps", a, cs[1])
        text += ", " + lead
        refs.append(more_refs[1])
    st = status_of(a, w.study)
    if st.precision is not None:
        text += f"; its SLO edge lies less than {st.precision:.1%} above that (the next rate tried missed the SLO)"
    elif st.status == "lower_bound":
        text += "; it met the SLO at the highest load tried, so that is a lower bound"
    w.add("slo", text + ".", refs)


def _excluded(w: _Writer, profile: str) -> None:
    """Configurations the decision could not consider, and why (one sentence per profile)."""
    parts, refs = [], []
    for c in (c for c in w.cells if c.profile == profile):
        cc = w.prices.cost[c.key]
        if c.unavailable:
            parts.append(f"{c.config} ({c.unavailable})")
        elif cc.comparable and w.study.slo.limits and not status_of(c, w.study).ranked:
            st = status_of(c, w.study)
            sync = next((s for s in c.steps if s.get("kind") == "synchronous"), None)
            why = "; ".join((sync or {}).get("slo_failures") or [])
            head = f"fails the SLO at this workload: {closest_text(st)}" if st.status == "upper_bound" \
                else "no tested load met the SLO"
            parts.append(f"{c.config} ({head}" + (f"; even one request at a time: {why}" if sync and why else "") + ")")
            refs.append(w.r("cap_rps", c))
        elif cc.comparable and cc.result is None and cc.reason:
            parts.append(f"{c.config} ({short_reason(cc.reason)})")
    if parts:
        w.add("excluded", f"{profile}: left out of the decision: " + "; ".join(parts) + ".", refs)


def _value(w: _Writer, profile: str) -> None:
    key = VALUE_METRIC[w.study.pricing.value_metric]
    d = w.decisions.get(profile)
    if d is None or d.best is None:
        w.add("value", f"{profile}: no configuration could be priced at its cost basis, so there is no best value.", [])
        return
    best = d.best.cell
    rb = w.r(key, best)
    cost = d.best.cost.result
    assert cost is not None
    price = cost.price
    text = (f"{profile}: best value is {best.config} at {shown(rb)} {UNIT[key]} ({d.best.cost.basis}, "
            f"{SRC[best.source]}; price {fmt_usd(price.usd_per_hour)}/h, {price.provider}, {price.date_text})")
    refs = [rb, Ref("prices", best.config, "$/h", price.usd_per_hour, fmt_usd(price.usd_per_hour)),
            Ref("prices", best.config, "date", price.date_text, price.date_text)]
    r = d.runner_up
    if r is not None:
        rr = w.r(key, r.cell)
        refs.append(rr)
        if same_shown(d.best.value, r.value):
            text += f"; tied with {r.cell.config} ({shown(rr)}): too close to call"
        else:
            text += f", {(d.margin or 0) / (1 + (d.margin or 0)):.1%} cheaper than {r.cell.config} ({shown(rr)})"
            text += f"; too close to call: {d.call_text}" if d.too_close else f"; clear: {d.call_text}"
    lead = w.comparable(profile, "sat_out")
    if lead and r is not None and lead[0].config == r.cell.config:
        text += f"; {r.cell.config} has the highest throughput"
    elif lead and lead[0].config != best.config and w.prices.cost[lead[0].key].result is not None:
        rl = w.r(key, lead[0])
        text += (f"; {lead[0].config} has more throughput but costs {w.v(key, lead[0]) / w.v(key, best) - 1:.0%} "
                 f"more ({shown(rl)})")
        refs.append(rl)
    w.add("value", text + ".", refs)


def _change(w: _Writer, profile: str) -> None:
    """What would flip the decision: the runner-up's price (or capacity) at which it would match."""
    d = w.decisions.get(profile)
    if d is None or d.best is None or d.runner_up is None or d.too_close:
        return
    r = d.runner_up
    res = r.cost.result
    if res is None or not r.value:
        return
    ratio = d.best.value / r.value
    price = res.price
    rp = Ref("prices", r.cell.config, "$/h", price.usd_per_hour, fmt_usd(price.usd_per_hour))
    w.add("change", f"{profile}: {r.cell.config} would match {d.best.cell.config} at "
          f"{fmt_usd(price.usd_per_hour * ratio)}/h instead of {fmt_usd(price.usd_per_hour)}/h ({1 - ratio:.1%} "
          f"cheaper), or with {_more_capacity(1 / ratio)} capacity at its cost basis.", [rp])


def _more_capacity(x: float) -> str:
    """``"27.0% more"`` below 2x, ``"65x the"`` from there."""
    return f"{x - 1:.1%} more" if x < 2 else (f"{x:.1f}x the" if x < 10 else f"{x:,.0f}x the")


def _bandwidth(c: CellResult) -> float:
    """Memory bandwidth of one replica (GB/s): picks the closest configuration to compare a full KV cache with."""
    from infermeter.errors import UserError
    from infermeter.perfmodel.hardware import get_hardware

    hw = parse_config(c.hardware)
    try:
        return get_hardware(hw.hardware).memory_bandwidth_gbs * hw.tp * hw.pp
    except UserError:
        return 1.0


def _device(c: CellResult) -> str:
    """``cpu`` or ``gpu`` (unknown hardware counts as gpu)."""
    from infermeter.errors import UserError
    from infermeter.perfmodel.hardware import get_hardware

    try:
        return get_hardware(parse_config(c.hardware).hardware).type
    except UserError:
        return "gpu"


def prefill_bound(c: CellResult) -> float | None:
    """How many requests the prefill budget lets run at once: with ``B = max_num_batched_tokens`` per step, each
    step admits about ``(B - running) / mean input`` new prompts and each stays ``mean output`` steps, so at
    steady state ``running = B x out / (in + out)`` (None without the figures)."""
    b = (c.target or {}).get("max_num_batched_tokens")
    mi, mo = c.tokens.get("mean_input"), c.tokens.get("mean_output")
    if not b or not mi or not mo:
        return None
    return float(b) * mo / (mi + mo)


def limit_of(c: CellResult, peers: list[CellResult] | None = None) -> tuple[str, str] | None:
    """What limited a cell's saturation batch, only where the evidence supports it, as ``(kind, evidence)``:

    - ``max_num_seqs``: the running requests reached the engine's max_num_seqs (within 5 %), below the offered;
    - ``prefill``: fewer ran than offered and max_num_seqs, and about as many as the prefill budget admits
      (:func:`prefill_bound`, within 25 %);
    - ``kv``: the KV cache was nearly full (>= 95 %) and there were preemptions, or fewer ran than offered with
      neither of the above explaining it and no peer of the same profile whose cache stayed below 80 % held to
      about the same number (within 10 %) below its own offered load (then something else sets the cap).
    None: no evidence."""
    sv, t = c.server, c.target or {}
    running = sv.get("num_requests_running_max")
    offered = c.saturation.get("concurrency")
    mns = t.get("max_num_seqs")
    lanes = t.get("replicas") or 1
    full = (sv.get("kv_cache_usage_max") or 0.0) >= KV_FULL
    if full and (sv.get("num_preemptions") or 0) > 0:
        return "kv", "preemptions"
    if running is None or not offered or running >= offered:
        return None
    if mns and running >= 0.95 * mns * lanes and mns * lanes < offered:
        return "max_num_seqs", f"at most {running:,.0f} running: max_num_seqs {mns}"
    bound = prefill_bound(c)
    if bound and abs(running / (bound * lanes) - 1) <= 0.25 and bound * lanes < min(offered, (mns or offered) * lanes):
        b = t.get("max_num_batched_tokens")
        return "prefill", (f"max_num_batched_tokens {b:,} over prompts of about {c.tokens.get('mean_input') or 0:,.0f} "
                           f"tokens admits about {bound * lanes:,.0f} running requests; at most {running:,.0f} ran of "
                           f"{offered} offered")
    if not full:
        return None

    def capped_alike(p: CellResult) -> bool:  # room in its cache, yet held to about the same number below its offered
        pr, po = p.server.get("num_requests_running_max"), p.saturation.get("concurrency")
        if pr is None or not po or not running:
            return False
        return (p.server.get("kv_cache_usage_max") or 1.0) < 0.8 and pr < float(po) and abs(pr / running - 1) <= 0.1

    if any(capped_alike(p) for p in (peers or []) if p is not c):
        return None  # the counterfactual: without a full cache the same cap appears, so the cache did not set it
    return "kv", "running"


def _kv_limited(c: CellResult, peers: list[CellResult] | None = None) -> str | None:
    """The evidence that the KV cache limited a cell (see :func:`limit_of`): "preemptions", "running", or None."""
    lim = limit_of(c, peers)
    return lim[1] if lim is not None and lim[0] == "kv" else None


def _kv(w: _Writer) -> None:
    """What limited each cell's batch, only where the evidence supports it (:func:`limit_of`)."""
    for profile in w.study.profiles:
        cs = w.comparable(profile, "kv_max")
        everyone = [c for c in w.cells if c.profile == profile and not c.unavailable]
        limits = {c.config: limit_of(c, everyone) for c in cs}
        limited = [c for c in cs if (limits[c.config] or ("",))[0] == "kv"]
        room = [c for c in cs if c not in limited]
        for c in cs:
            lim = limits[c.config]
            if lim is not None and lim[0] != "kv":
                rr = w.r("running_max", c)
                what = "the prefill budget" if lim[0] == "prefill" else "max_num_seqs"
                w.add("kv", f"{profile}: {what} limited {c.config} at saturation, not its KV cache (max "
                      f"{shown(w.r('kv_max', c))} used): {lim[1]}.", [w.r("kv_max", c), rr])
        for c in limited:
            rk, rp, rr = (w.r(k, c) for k in ("kv_max", "preempt", "running_max"))
            if _kv_limited(c, everyone) == "preemptions":
                evidence, refs = f"{shown(rp)} preemptions", [rk, rp]
            else:
                evidence = f"at most {shown(rr)} requests running of {c.saturation.get('concurrency')} offered"
                refs = [rk, rr]
            text = f"{profile}: the KV cache limited {c.config} at saturation (max {shown(rk)} used, {evidence})"
            peers = [x for x in room if _device(x) == _device(c)]
            if peers:
                o = min(peers, key=lambda x: (abs(math.log(_bandwidth(x) / _bandwidth(c))), w.v("sat_out", x)))
                ra, rb = w.r("sat_out", c), w.r("sat_out", o)
                share = w.v("sat_out", c) / w.v("sat_out", o)
                rel = f"{share:.0%} of" if share < 2 else f"{share:.1f}x"
                text += (f"; it reached {rel} the output tokens/s of {o.config}, whose cache did not limit it "
                         f"({shown(ra)} vs {shown(rb)})")
                refs += [ra, rb]
            w.add("kv", text + ".", refs)


def _prefix(w: _Writer) -> None:
    spans = []
    for profile in w.study.profiles:
        cs = w.comparable(profile, "prefix")
        if cs:
            spans.append((profile, cs[-1], cs[0]))
    if len(spans) < 1:
        return
    parts, refs = [], []
    for profile, lo, hi in spans:
        rlo, rhi = w.r("prefix", lo), w.r("prefix", hi)
        if shown(rlo) == shown(rhi):
            n = len(w.comparable(profile, "prefix"))
            parts.append(f"{profile} {shown(rlo)}" + (f" on all {n} configurations" if n > 1 else f" ({lo.config})"))
            refs.append(rlo)
        else:
            parts.append(f"{profile} {shown(rlo)} ({lo.config}) to {shown(rhi)} ({hi.config})")
            refs += [rlo, rhi]
    most = max(spans, key=lambda s: w.v("prefix", s[2]))
    least = min(spans, key=lambda s: w.v("prefix", s[2]))
    text = "Prefix-cache hit rate at saturation: " + "; ".join(parts)
    if most[0] != least[0]:
        text += f". Prefix caching paid off most in {most[0]} and least in {least[0]}"
    w.add("prefix", text + ".", refs)


def _unloaded(w: _Writer, profile: str) -> None:
    t, p = w.comparable(profile, "unl_ttft_p50"), w.comparable(profile, "unl_tpot_p50")
    if len(t) < 2 or len(p) < 2:
        return
    rt, rp = w.r("unl_ttft_p50", t[0]), w.r("unl_tpot_p50", p[0])
    if t[0].config == p[0].config:
        text = f"{profile}, one request at a time: {t[0].config} has the lowest TTFT p50 ({shown(rt)} ms) and TPOT p50 ({shown(rp)} ms)"
    else:
        text = (f"{profile}, one request at a time: {t[0].config} has the lowest TTFT p50 ({shown(rt)} ms) and "
                f"{p[0].config} the lowest TPOT p50 ({shown(rp)} ms)")
    w.add("latency", text + ".", [rt, rp])


def _differences(w: _Writer, a: CellResult, b: CellResult, keys: tuple[tuple[str, str], ...],
                 line: Callable[[str, float, str, str, str], str]) -> tuple[list[str], list[Ref]]:
    """``line(what, |1 - a/b|, "lower"|"higher", a shown, b shown)`` for each ``(metric, what)`` both cells have."""
    parts: list[str] = []
    refs: list[Ref] = []
    for key, what in keys:
        va, vb = value(key, a, w.prices), value(key, b, w.prices)
        if va is None or vb is None or vb <= 0:
            continue
        ra, rb = w.r(key, a), w.r(key, b)
        parts.append(line(what, abs(1 - va / vb), "lower" if va < vb else "higher", shown(ra), shown(rb)))
        refs += [ra, rb]
    return parts, refs


def _tp_pp(w: _Writer) -> None:
    confs = {c.config: parse_config(c.hardware) for c in w.cells}
    names = sorted(confs)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            hx, hy = confs[x], confs[y]
            if (hx.hardware, hx.count) != (hy.hardware, hy.count) or (hx.tp, hx.pp) == (hy.tp, hy.pp):
                continue
            tp_side, pp_side = (x, y) if hx.pp < hy.pp else (y, x)
            for profile in w.study.profiles:
                a = next((c for c in w.cells if c.key == (tp_side, profile)), None)
                b = next((c for c in w.cells if c.key == (pp_side, profile)), None)
                if a is None or b is None:
                    continue
                parts, refs = _differences(w, a, b, (("unl_e2e_p99", "one request at a time"), ("sat_e2e_p99", "at saturation")),
                                           lambda what, d, verb, ra, rb: f"{d:.0%} {verb} {what} ({ra} vs {rb} ms)")
                if parts:
                    w.add("parallelism", f"{profile}: E2E p99 of {tp_side} (more tensor parallel) vs {pp_side} "
                          f"(more pipeline parallel) was " + "; ".join(parts) + ".", refs)
                    continue
                # too few requests for a p99 (20 one at a time, or a saturation step that mostly failed): the
                # percentiles both cells do have
                parts, refs = _differences(w, a, b, (("unl_ttft_p50", "TTFT p50 one request at a time"),
                                                     ("unl_tpot_p50", "TPOT p50 one request at a time"),
                                                     ("sat_ttft_p95", "TTFT p95 at saturation")),
                                           lambda what, d, verb, ra, rb: f"{what} {d:.0%} {verb} ({ra} vs {rb} ms)")
                if parts:
                    w.add("parallelism", f"{profile}: {tp_side} (more tensor parallel) vs {pp_side} (more pipeline "
                          "parallel), the same GPUs: E2E p99 has too few requests to compare; " + "; ".join(parts)
                          + ".", refs)


def _cpu(w: _Writer) -> None:
    def is_cpu(c: CellResult) -> bool:
        return _device(c) == "cpu"

    for profile in w.study.profiles:
        cs = w.comparable(profile, "sat_out")
        gpus = [c for c in cs if not is_cpu(c)]
        for c in (c for c in cs if is_cpu(c)):
            if not gpus:
                continue
            g = gpus[-1]
            rc, rg = w.r("sat_out", c), w.r("sat_out", g)
            w.add("cpu", f"{profile}: {c.config} reached {shown(rc)} output tokens/s at saturation, "
                  f"{w.v('sat_out', g) / max(w.v('sat_out', c), 1e-12):.0f}x less than the slowest GPU configuration, "
                  f"{g.config} ({shown(rg)}).", [rc, rg])


def _break_even(w: _Writer) -> None:
    from infermeter.study.tables import band_row

    v = w.study.volume
    for profile in w.study.profiles:
        be = w.prices.break_even.get(profile)
        if be is None or not be.bands:
            continue
        bands = be.bands
        last = bands[-1]
        start = len(bands) - 1
        while start > 0 and bands[start - 1].winner == last.winner:
            start -= 1
        ref = Ref("break_even", band_row(profile, len(bands) - 1), "cheapest", last.winner, last.winner)
        if start == 0:
            text = (f"{profile}: {last.winner} is the cheapest fleet over the whole range, {fmt_sig(bands[0].low)} to "
                    f"{fmt_sig(last.high)} requests/day")
        else:
            text = (f"{profile}: from {fmt_sig(bands[start].low)} requests/day up to {fmt_sig(last.high)}, "
                    f"{last.winner} is the cheapest fleet; below that, rounding to whole replicas decides")
        w.add("break-even", text + f" (peak factor {v.peak_factor:g}, headroom {v.headroom:.0%}).", [ref])


def _soak(w: _Writer, soaks: list[Any]) -> None:
    from infermeter.study.soak import window_label, windows_key

    for s in soaks:
        # the highest percentile every window has enough samples for (p99 needs 100 per window)
        pk = next((k for k in ("p99", "p95", "p90", "p50")
                   if s.windows and all((x["ttft_ms"] or {}).get(k) is not None for x in s.windows)), None)
        ws = [x for x in s.windows if pk is not None and (x["ttft_ms"] or {}).get(pk) is not None]
        if not ws or pk is None:
            continue
        lo = min(ws, key=lambda x: x["ttft_ms"][pk])
        hi = max(ws, key=lambda x: x["ttft_ms"][pk])
        key = windows_key(s.config)
        name = f"TTFT {pk} (ms)"
        rl = Ref(key, window_label(lo), name, lo["ttft_ms"][pk], fmt_num(lo["ttft_ms"][pk]))
        rh = Ref(key, window_label(hi), name, hi["ttft_ms"][pk], fmt_num(hi["ttft_ms"][pk]))
        b = s.budget
        totals: dict[str, int] = {}
        for x in s.windows:
            for k, n in x["errors"].items():
                totals[k] = totals.get(k, 0) + n
        err_text = ", ".join(f"{n:,} {k}" for k, n in sorted(totals.items(), key=lambda kv: -kv[1])) or "no errors"
        text = (f"Soak on {s.hardware} ({s.replicas} replica(s) of {s.config}) at {s.rate_per_s:g} req/s of "
                f"{s.profile} for {s.duration_s / 3600:g} h (simulated): TTFT {pk} per window ranged from {shown(rl)} ms "
                f"({window_label(lo)}) to {shown(rh)} ms ({window_label(hi)}); {err_text}; "
                f"{b['bad']:,} bad requests used {fmt_pct(b['consumed'])} of the error budget "
                f"({b['objective']:.3%} objective)")
        if b["exhausted_at_s"] is not None:
            text += f", exhausted by {b['exhausted_at_s'] / 3600:.3g} h"
        text += f"; {len(s.alerts)} alert(s) fired"
        from infermeter.study.soak import held, slo_misses

        misses = slo_misses(s.windows, w.study.slo)
        text += ("; it held" if held(b, misses) else "; it FAILED" + (
            f" ({len(misses)} of {len(s.windows)} windows missed the SLO)" if misses else " its error budget"))
        w.add("soak", text + ".", [rl, rh])


def write_findings(study: StudyConfig, cells: list[CellResult], prices: StudyPrices,
                   soaks: list[Any] | None = None, decisions: dict[str, Decision] | None = None) -> list[Finding]:
    """Every finding, heaviest first (see the module docstring)."""
    if decisions is None:
        from infermeter.study.decision import decide

        decisions = decide(study, cells, prices)
    w = _Writer(study, cells, prices, decisions)
    _sources(w)
    for profile in study.profiles:
        _value(w, profile)
        _change(w, profile)
        _excluded(w, profile)
    for profile in study.profiles:
        _throughput(w, profile)
    for profile in study.profiles:
        _capacity(w, profile)
    _kv(w)
    _prefix(w)
    for profile in study.profiles:
        _unloaded(w, profile)
    _tp_pp(w)
    _cpu(w)
    _break_even(w)
    _soak(w, soaks or [])
    return sorted(w.out, key=lambda f: -f.weight)  # stable: within a topic, the order written
