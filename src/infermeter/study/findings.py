"""The findings section: sentences written from the study's numbers, each with the figures it quotes.

The contract: :func:`write_findings` recomputes every sentence from the cells, prices and soaks it
is given — nothing is canned, so different inputs give different findings (swap two prices and
the best-value sentence names the other configuration). Each :class:`Finding` carries
:class:`~infermeter.study.matrix.Ref` s: the report table, row and column of every figure it
quotes, whose shown text is the number in the sentence::

    >>> fs = write_findings(study, cells, prices, soaks)
    >>> fs[0].topic, fs[0].text
    ('throughput', 'chat: h200 has the highest throughput at saturation, 5,170 output tokens/s (simulated), ...')
    >>> fs[0].refs[0].table, fs[0].refs[0].row, fs[0].refs[0].column
    ('m_sat_out', 'h200', 'chat')

Topics, in order: sources (measured vs simulated), throughput leader per profile, SLO capacity
per profile, best value per profile with its margin, KV-cache saturation and what it did to
throughput and queueing, prefix caching, latency one request at a time, TP vs PP, CPU vs GPU,
break-even bands, soak. Only comparable cells (serving the study's model) are ranked; a KV cache
counts as full at :data:`KV_FULL` or more, and is compared with the configuration whose KV cache
did not fill, of the same device type (GPU or CPU), whose memory bandwidth per replica is closest
(so the difference is mostly memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infermeter.perfmodel.configspec import parse_config
from infermeter.report.table import fmt_num, fmt_pct, fmt_usd
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.matrix import METRIC, VALUE_METRIC, Ref, ref, value
from infermeter.study.pricing import StudyPrices

KV_FULL = 0.95
SRC = {"simulated": "simulated", "measured": "measured"}
UNIT = {"usd_1m_req": "per 1M requests", "usd_1m_out": "per 1M output tokens", "usd_1m_total": "per 1M total tokens"}


@dataclass(frozen=True)
class Finding:
    topic: str
    text: str
    refs: tuple[Ref, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "text": self.text, "refs": [r.to_json() for r in self.refs]}


def more(a: float, b: float) -> str:
    """How much ``a`` exceeds ``b``: ``"27% more than"`` below 2x, ``"3.4x"`` from there."""
    return f"{a / b - 1:.0%} more than" if a < 2 * b else f"{a / b:.1f}x"


def shown(r: Ref) -> str:
    """The number of a ref as the sentence writes it (its table text without the source tag)."""
    return r.display.rsplit(" (", 1)[0]


class _Writer:
    def __init__(self, study: StudyConfig, cells: list[CellResult], prices: StudyPrices) -> None:
        self.study, self.cells, self.prices = study, cells, prices
        self.out: list[Finding] = []

    def add(self, topic: str, text: str, refs: list[Ref]) -> None:
        self.out.append(Finding(topic, text, tuple(refs)))

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
    measured = [c for c in w.cells if c.source == "measured"]
    n = len(w.cells)
    if not measured:
        w.add("sources", f"All {n} cells were simulated by the twin: no configuration named a measured target.", [])
    else:
        names = sorted({f"{c.config} × {c.profile}" for c in measured})
        w.add("sources", f"{len(measured)} of {n} cells were measured on live endpoints ({', '.join(names)}); "
              f"the other {n - len(measured)} were simulated by the twin.", [w.r("sat_out", c) for c in measured])
        emulated = sorted({c.config for c in measured if (c.target or {}).get("emulated")})
        if emulated:
            w.add("sources", f"The endpoint of {', '.join(emulated)} reported itself as an infermeter emulator: its "
                  "figures measure the emulation, not hardware.", [])
    for c in measured:
        cc = w.prices.cost[c.key]
        if not cc.comparable:
            w.add("sources", f"{c.config} was measured serving {c.model or 'an unnamed model'}, not {w.study.model}: "
                  f"its {c.profile} figures (e.g. {shown(w.r('sat_out', c))} output tokens/s at saturation) are "
                  "shown but left out of rankings, best value and break-even.", [w.r("sat_out", c)])


def _throughput(w: _Writer, profile: str) -> None:
    cs = w.comparable(profile, "sat_out")
    if len(cs) < 2:
        return
    a, b, last = cs[0], cs[1], cs[-1]
    ra, rb, rl = w.r("sat_out", a), w.r("sat_out", b), w.r("sat_out", last)
    text = (f"{profile}: {a.config} has the highest throughput at saturation, {shown(ra)} output tokens/s "
            f"({SRC[a.source]}), {more(w.v('sat_out', a), w.v('sat_out', b))} {b.config} "
            f"({shown(rb)}, {SRC[b.source]})")
    refs = [ra, rb]
    if len(cs) > 2:
        text += f"; the lowest is {last.config} at {shown(rl)} ({w.v('sat_out', a) / w.v('sat_out', last):.1f}x less)"
        refs.append(rl)
    w.add("throughput", text + ".", refs)


def _capacity(w: _Writer, profile: str) -> None:
    if not w.study.slo.limits:
        return
    cs = w.comparable(profile, "cap_rps")
    if cs:
        a = cs[0]
        ra = w.r("cap_rps", a)
        text = (f"{profile}: under the SLO ({w.study.slo.describe()}), {a.config} sustains the most load, "
                f"{shown(ra)} requests/s ({SRC[a.source]})")
        refs = [ra]
        if len(cs) > 1:
            rb = w.r("cap_rps", cs[1])
            text += f", {more(w.v('cap_rps', a), w.v('cap_rps', cs[1]))} {cs[1].config} ({shown(rb)})"
            refs.append(rb)
        w.add("slo", text + ".", refs)
    missing = [c for c in w.cells if c.profile == profile and w.prices.cost[c.key].comparable and c.capacity is None]
    if missing:
        parts = []
        for c in missing:
            sync = next((s for s in c.steps if s.get("kind") == "synchronous"), None)
            why = "; ".join((sync or {}).get("slo_failures") or [])
            parts.append(f"{c.config} (" + (f"even one request at a time: {why}" if sync and why else
                                            "not at the lightest tested load") + ")")
        w.add("slo", f"{profile}: no tested load met the SLO on " + ", ".join(parts) + ".",
              [w.r("cap_rps", c) for c in missing])


def _value(w: _Writer, profile: str) -> None:
    key = VALUE_METRIC[w.study.pricing.value_metric]
    pick = w.prices.picks.get(profile)
    if pick is None:
        w.add("value", f"{profile}: no configuration could be priced at its cost basis, so there is no best value.", [])
        return
    best = pick.best.cell
    rb = w.r(key, best)
    cost = pick.best.result
    assert cost is not None
    price = cost.price
    text = (f"{profile}: best value is {best.config} at {shown(rb)} {UNIT[key]} ({pick.best.basis}, "
            f"{SRC[best.source]}; price {fmt_usd(price.usd_per_hour)}/h, {price.provider}, {price.date_text})")
    refs = [rb, Ref("prices", best.config, "$/h", price.usd_per_hour, fmt_usd(price.usd_per_hour)),
            Ref("prices", best.config, "date", price.date_text, price.date_text)]
    if pick.runner_up is not None and pick.runner_up_value:
        ru = pick.runner_up.cell
        rr = w.r(key, ru)
        text += f", {1 - pick.best_value / pick.runner_up_value:.1%} cheaper than {ru.config} ({shown(rr)})"
        refs.append(rr)
    lead = w.comparable(profile, "sat_out")
    if lead and pick.runner_up is not None and lead[0].config == pick.runner_up.cell.config:
        text += ", which has the highest throughput"
    elif lead and lead[0].config != best.config and w.prices.cost[lead[0].key].result is not None:
        rl = w.r(key, lead[0])
        text += (f"; {lead[0].config} has more throughput but costs {w.v(key, lead[0]) / w.v(key, best) - 1:.0%} "
                 f"more ({shown(rl)})")
        refs.append(rl)
    w.add("value", text + ".", refs)


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


def _kv(w: _Writer) -> None:
    any_full = False
    for profile in w.study.profiles:
        cs = w.comparable(profile, "kv_max")
        full = [c for c in cs if w.v("kv_max", c) >= KV_FULL]
        room = [c for c in cs if w.v("kv_max", c) < KV_FULL]
        if not full:
            continue
        any_full = True
        if not room:
            w.add("kv", f"{profile}: the KV cache filled on every configuration at saturation ("
                  + ", ".join(f"{c.config} {shown(w.r('kv_max', c))}" for c in full) + ").",
                  [w.r("kv_max", c) for c in full])
            continue
        for c in full:
            refs = [w.r(k, c) for k in ("kv_max", "preempt", "waiting_max", "running_max")]
            text = (f"{profile}: the KV cache filled on {c.config} (max {shown(refs[0])}, {shown(refs[1])} preemptions, "
                    f"up to {shown(refs[2])} requests waiting, at most {shown(refs[3])} running)")
            peers = [x for x in room if _device(x) == _device(c)]
            if not peers:
                w.add("kv", text + ".", refs)
                continue
            o = min(peers, key=lambda x: (abs(math.log(_bandwidth(x) / _bandwidth(c))), w.v("sat_out", x)))
            refs += [w.r(k, o) for k in ("kv_max", "running_max")]
            ra, rb = w.r("sat_out", c), w.r("sat_out", o)
            ta, tb = w.r("sat_ttft_p95", c), w.r("sat_ttft_p95", o)
            share = w.v("sat_out", c) / w.v("sat_out", o)
            rel = f"{share:.0%} of" if share < 2 else f"{share:.1f}x"
            text += (f" but not on {o.config} (max {shown(refs[4])}, {shown(refs[5])} running); {c.config} reached "
                     f"{rel} {o.config}'s output tokens/s ({shown(ra)} vs {shown(rb)}) with TTFT p95 {shown(ta)} ms "
                     f"vs {shown(tb)} ms.")
            w.add("kv", text, refs + [ra, rb, ta, tb])
    if not any_full:
        cs = [c for c in w.cells if w.prices.cost[c.key].comparable and c.server.get("kv_cache_usage_max") is not None]
        if cs:
            top = max(cs, key=lambda c: w.v("kv_max", c))
            r = w.r("kv_max", top)
            w.add("kv", f"No configuration's KV cache filled at saturation; the fullest was {top.config} in "
                  f"{top.profile} at {shown(r)}.", [r])


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
                parts, refs = [], []
                for key, where in (("unl_e2e_p99", "one request at a time"), ("sat_e2e_p99", "at saturation")):
                    va, vb = value(key, a, w.prices), value(key, b, w.prices)
                    if va is None or vb is None or vb <= 0:
                        continue
                    ra, rb = w.r(key, a), w.r(key, b)
                    verb = "lower" if va < vb else "higher"
                    parts.append(f"{abs(1 - va / vb):.0%} {verb} {where} ({shown(ra)} vs {shown(rb)} ms)")
                    refs += [ra, rb]
                if parts:
                    w.add("parallelism", f"{profile}: E2E p99 of {tp_side} (more tensor parallel) vs {pp_side} "
                          f"(more pipeline parallel) was " + "; ".join(parts) + ".", refs)


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
        refs = [Ref("break_even", band_row(profile, i), "cheapest", b.winner, b.winner) for i, b in enumerate(bands)]
        last = bands[-1]
        if len(bands) == 1:
            text = (f"{profile}: {last.winner} is the cheapest fleet over the whole range, {fmt_num(last.low)} to "
                    f"{fmt_num(last.high)} requests/day")
        elif len(bands) <= 4:
            steps = [f"{b.winner} up to {fmt_num(b.high)}" for b in bands[:-1]]
            text = (f"{profile}: the cheapest fleet is " + ", then ".join(steps)
                    + f" requests/day, then {last.winner} up to {fmt_num(last.high)}")
        else:
            share: dict[str, float] = {}
            span = math.log(last.low / bands[0].low)
            for b in bands[:-1]:
                share[b.winner] = share.get(b.winner, 0.0) + math.log(b.high / b.low) / span
            parts = ", ".join(f"{k} {x:.0%}" for k, x in sorted(share.items(), key=lambda kv: -kv[1]))
            text = (f"{profile}: from {fmt_num(last.low)} requests/day up to {fmt_num(last.high)}, {last.winner} is "
                    f"the cheapest fleet; below that the lead changes {len(bands) - 1} times as replicas are added "
                    f"(share of that range, on a log scale: {parts})")
            refs = [refs[-1]]
        w.add("break-even", text + f" (peak factor {v.peak_factor:g}, headroom {v.headroom:.0%}).", refs)


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
        text += f"; {len(s.alerts)} alert(s) fired."
        w.add("soak", text, [rl, rh])


def write_findings(study: StudyConfig, cells: list[CellResult], prices: StudyPrices,
                   soaks: list[Any] | None = None) -> list[Finding]:
    """Every finding, in the order of the module docstring."""
    w = _Writer(study, cells, prices)
    _sources(w)
    for profile in study.profiles:
        _throughput(w, profile)
    for profile in study.profiles:
        _capacity(w, profile)
    for profile in study.profiles:
        _value(w, profile)
    _kv(w)
    _prefix(w)
    for profile in study.profiles:
        _unloaded(w, profile)
    _tp_pp(w)
    _cpu(w)
    _break_even(w)
    _soak(w, soaks or [])
    return w.out
