"""The study report's tables beyond the matrix: rankings, best value, break-even, prices, cells, steps.

The contract: each builder turns study results into a :class:`~infermeter.report.table.Table`
(the report package's model, so HTML and Markdown show the same cells); every value cell of a
simulated cell carries ``flag="simulated"`` and a ``source`` column says measured or simulated::

    >>> best_value_table(study, prices).columns[:3]
    ['profile', 'best value', '$ per 1M requests']
    >>> band_row("chat", 0)
    'chat · band 1'

Row names that findings point at are made by one function each (:func:`band_row`; price rows are
configuration names), so a finding's reference always names an existing row.
"""

from __future__ import annotations

from typing import Any

from infermeter.report.table import Cell, Table, fmt_num, fmt_usd
from infermeter.study.cells import CellResult
from infermeter.study.config import StudyConfig
from infermeter.study.matrix import METRIC, TAG, VALUE_METRIC, display
from infermeter.study.pricing import StudyPrices

UNIT = {"usd_1m_req": "$ per 1M requests", "usd_1m_out": "$ per 1M output tokens",
        "usd_1m_total": "$ per 1M total tokens"}


def band_row(profile: str, i: int) -> str:
    return f"{profile} · band {i + 1}"


def _flag(c: CellResult) -> str | None:
    return "simulated" if c.source == "simulated" else None


def _src(c: CellResult) -> Cell:
    return Cell.text(c.source, flag=_flag(c))


def _m(metric: str, c: CellResult, prices: StudyPrices) -> Cell:
    v, text = display(METRIC[metric], c, prices.cost.get(c.key))
    return Cell(text, v, flag=_flag(c))


def ranking_tables(study: StudyConfig, cells: list[CellResult], prices: StudyPrices) -> list[Table]:
    """Per profile: configurations ranked by output tokens/s at saturation, with their cost rank."""
    vkey = VALUE_METRIC[study.pricing.value_metric]
    out = []
    for profile in study.profiles:
        cs = [c for c in cells if c.profile == profile]
        # a saturation figure from a run judged invalid is shown (flagged) but never ranked against valid ones
        comp = [c for c in cs if prices.cost[c.key].comparable and c.saturation_valid]
        ranked = sorted(comp, key=lambda c: -(c.saturation.get("output_tokens_per_s") or 0.0))
        ranked += [c for c in cs if c not in comp]
        lead = ranked[0].saturation.get("output_tokens_per_s") if comp else None
        by_cost = sorted((c for c in cs if prices.cost[c.key].comparable and METRIC[vkey].value(c, prices.cost[c.key]) is not None),
                         key=lambda c: METRIC[vkey].value(c, prices.cost[c.key]) or 0.0)
        rows = []
        for i, c in enumerate(ranked):
            tps = c.saturation.get("output_tokens_per_s")
            share = tps / lead if (tps is not None and lead and c in comp) else None
            if c in comp:
                rank = Cell.num(i + 1)
            elif not c.saturation_valid:
                rank = Cell.text("not ranked (saturation run invalid: "
                                 f"{'; '.join(c.saturation.get('invalid_reasons') or []) or 'see its run'})", flag="invalid")
            else:
                rank = Cell.text("not ranked (other model)")
            cost_rank = Cell.num(by_cost.index(c) + 1) if c in by_cost else Cell.text(None)
            sat = _m("sat_out", c, prices)
            if not c.saturation_valid:
                sat = Cell(sat.display, sat.value, flag="invalid")
            rows.append([rank, Cell.text(c.config), _src(c), sat, Cell.pct(share),
                         _m("cap_rps", c, prices), _m(vkey, c, prices), cost_rank])
        cols = ["rank", "configuration", "source", "output tok/s at saturation", "share of the leader",
                "req/s at SLO capacity", UNIT[vkey], "cost rank"]
        out.append(Table(f"rank_{profile}", f"Ranking: {profile}", cols, rows, section="rankings",
                         note="Ranked by output tokens/s at saturation; cost rank by the study's value metric "
                              "(1 = cheapest)."))
    return out


def best_value_table(study: StudyConfig, prices: StudyPrices) -> Table:
    vkey = VALUE_METRIC[study.pricing.value_metric]
    rows = []
    for profile in study.profiles:
        pick = prices.picks.get(profile)
        if pick is None:
            rows.append([Cell.text(profile)] + [Cell.text(None)] * 7)
            continue
        best, ru = pick.best, pick.runner_up
        rows.append([
            Cell.text(profile), Cell.text(best.cell.config), _m(vkey, best.cell, prices), Cell.text(best.basis),
            Cell.text(ru.cell.config if ru else None), _m(vkey, ru.cell, prices) if ru else Cell.text(None),
            Cell.usd(pick.margin), Cell.pct(pick.margin_pct),
        ])
    cols = ["profile", "best value", UNIT[vkey], "basis", "runner-up", f"runner-up {UNIT[vkey]}", "margin ($)",
            "margin (%)"]
    return Table("best_value", "Best value per profile", cols, rows, section="value",
                 note="Among configurations serving the study's model and meeting the SLO; margin = how much more "
                      "the runner-up costs, in $ and as a share of the best.")


MAX_BANDS = 5


def break_even_table(study: StudyConfig, prices: StudyPrices) -> Table:
    """At most :data:`MAX_BANDS` bands per profile: where more, the low-volume bands (where whole replicas make the
    lead alternate) are one row naming the configurations that are cheapest there and their share of it."""
    import math

    rows = []
    for profile in study.profiles:
        be = prices.break_even.get(profile)
        source = {c.name: c.source for c in prices.candidates.get(profile, [])}
        bands = list(be.bands if be else ())
        keep = list(enumerate(bands))
        if len(bands) > MAX_BANDS:
            head, keep = bands[:len(bands) - MAX_BANDS + 1], keep[len(bands) - MAX_BANDS + 1:]
            span = math.log(head[-1].high / head[0].low) or 1.0
            share: dict[str, float] = {}
            for b in head:
                share[b.winner] = share.get(b.winner, 0.0) + math.log(b.high / b.low) / span
            mixed = ", ".join(f"{k} ({x:.0%})" for k, x in sorted(share.items(), key=lambda kv: -kv[1]))
            rows.append([Cell.text(f"{profile} · low volumes"), Cell.text(profile), Cell.num(head[0].low),
                         Cell.num(head[-1].high), Cell.text(f"alternates as replicas are added: {mixed}"),
                         Cell.text(None), Cell.text(None), Cell.text(None)])
        for i, b in keep:
            src = source.get(b.winner)
            rows.append([Cell.text(band_row(profile, i)), Cell.text(profile), Cell.num(b.low), Cell.num(b.high),
                         Cell.text(b.winner), Cell.text(src, flag="simulated" if src == "simulated" else None),
                         Cell.num(b.replicas_at_high), Cell.usd(b.usd_per_month_at_high)])
    v = study.volume
    cols = ["band", "profile", "from (req/day)", "to (req/day)", "cheapest", "source", "replicas at the top",
            "$ per month at the top"]
    return Table("break_even", "Break-even: cheapest fleet by daily volume", cols, rows, section="break-even",
                 note=f"Replicas = ceil(peak / (capacity x (1 - headroom))), peak = volume / 86400 x {v.peak_factor:g}, "
                      f"headroom {v.headroom:.0%}; capacity = each configuration's requests/s at its cost basis; "
                      f"bands are right-closed; at most {MAX_BANDS} per profile (shares of a merged band are of its "
                      "log-volume range).")


def volume_tables(study: StudyConfig, prices: StudyPrices) -> list[Table]:
    """Per profile: monthly fleet cost of each configuration at 1-2-5 daily volumes, cheapest marked."""
    out = []
    for profile in study.profiles:
        be = prices.break_even.get(profile)
        if be is None:
            continue
        cands = prices.candidates.get(profile, [])
        names = [c.name for c in cands]
        heads = [f"{c.name} ({TAG.get(c.source, c.source)})" for c in cands]
        rows = []
        for volume, costs, cheapest in be.grid:
            row = [Cell.num(volume)] + [Cell(fmt_usd(costs.get(n)), costs.get(n), best=n == cheapest) for n in names]
            rows.append(row + [Cell.text(cheapest)])
        out.append(Table(f"volume_{profile}", f"Monthly fleet cost by daily volume: {profile}",
                         ["requests/day", *heads, "cheapest"], rows, section="break-even",
                         note="★ = cheapest at that volume (replicas rounded up)."))
    return out


def prices_table(study: StudyConfig, prices: StudyPrices, cells: list[CellResult]) -> Table:
    source = {c.config: c.source for c in cells}
    rows = []
    for conf in study.configurations:
        p = prices.prices.get(conf.label)
        flag = "simulated" if source.get(conf.label) == "simulated" else None
        head = [Cell.text(conf.label), Cell.text(conf.config), Cell.text(source.get(conf.label), flag=flag)]
        if isinstance(p, str) or p is None:
            rows.append(head + [Cell.text(None)] * 6 + [Cell.text(p)])
            continue
        rows.append(head + [Cell.usd(p.usd_per_hour), Cell.usd(p.usd_per_gpu_hour), Cell.text(p.provider),
                            Cell.text(p.instance), Cell.text(p.billing), Cell.text(p.date_text),
                            Cell.text(p.source + ("; " + "; ".join(p.notes) if p.notes else ""))])
    pr = study.pricing
    extra = [f"overhead {pr.overhead:.0%}" if pr.overhead else "", f"utilization {pr.utilization:.0%}"
             if pr.utilization != 1 else ""]
    note = "Hourly on-demand prices (per GPU-hour billing unless noted); prices go stale: check the dates."
    if any(extra):
        note += " Costs add " + ", ".join(x for x in extra if x) + "."
    return Table("prices", "Prices used", ["configuration", "hardware", "source", "$/h", "$/GPU-h", "provider",
                                          "instance", "billing", "date", "price source"], rows, section="value",
                 note=note)


def cost_table(cells: list[CellResult], prices: StudyPrices) -> Table:
    rows = []
    for c in cells:
        cc = prices.cost[c.key]
        r, s = cc.result, cc.at_saturation
        f = _flag(c)
        rows.append([Cell.text(c.config), Cell.text(c.profile), _src(c), Cell.text(cc.basis),
                     Cell.usd(r.usd_per_hour if r else None, f),
                     Cell.usd(r.usd_per_1k_output_tokens if r else None, f),
                     Cell.usd(r.usd_per_1m_output_tokens if r else None, f),
                     Cell.usd(r.usd_per_1m_input_tokens if r else None, f),
                     Cell.usd(r.usd_per_1m_total_tokens if r else None, f),
                     Cell.usd(r.usd_per_1m_requests if r else None, f),
                     Cell.usd(s.usd_per_1m_requests if s else None, f),
                     Cell.text(r.price.date_text if r else None), Cell.text(cc.reason)])
    cols = ["configuration", "profile", "source", "basis", "$/h", "$/1K out tok", "$/1M out tok", "$/1M in tok",
            "$/1M total tok", "$/1M req", "$/1M req at saturation", "price date", "note"]
    return Table("cells_cost", "Cost per cell", cols, rows, section="cells",
                 note="Each $/1M figure charges the whole hourly price to that one unit (alternative views, not "
                      "parts of a sum).")


def throughput_table(cells: list[CellResult]) -> Table:
    rows = []
    for c in cells:
        s, k, f = c.saturation, c.capacity or {}, _flag(c)
        rows.append([Cell.text(c.config), Cell.text(c.profile), _src(c), Cell.text(c.model),
                     Cell.num(s.get("concurrency")), Cell.num(s.get("requests_per_s"), flag=f),
                     Cell.num(s.get("input_tokens_per_s"), flag=f), Cell.num(s.get("output_tokens_per_s"), flag=f),
                     Cell.text(k.get("describe")), Cell.num(k.get("requests_per_s"), flag=f),
                     Cell.num(k.get("input_tokens_per_s"), flag=f), Cell.num(k.get("output_tokens_per_s"), flag=f),
                     Cell.num(c.tokens.get("mean_input")), Cell.num(c.tokens.get("mean_output"))])
    cols = ["configuration", "profile", "source", "model", "saturation concurrency", "req/s at saturation",
            "in tok/s at saturation", "out tok/s at saturation", "highest load meeting the SLO", "req/s there",
            "in tok/s there", "out tok/s there", "mean input tokens", "mean output tokens"]
    return Table("cells_throughput", "Throughput per cell", cols, rows, section="cells",
                 note="Saturation: steady window of the closed-loop step (every stream busy).")


def latency_table(cells: list[CellResult]) -> Table:
    rows = []
    names = {"unloaded": "one at a time", "capacity": "SLO capacity", "saturation": "saturation"}
    for c in cells:
        for at in ("unloaded", "capacity", "saturation"):
            lat = c.latency.get(at)
            if lat is None:
                continue
            row = [Cell.text(c.config), Cell.text(c.profile), _src(c), Cell.text(names[at])]
            row += [Cell.num(lat[m].get(p), flag=_flag(c)) for m in ("ttft_ms", "tpot_ms", "e2e_ms")
                    for p in ("p50", "p95", "p99")]
            rows.append(row)
    cols = ["configuration", "profile", "source", "load"] + [f"{m} {p}" for m in ("TTFT", "TPOT", "E2E")
                                                              for p in ("p50", "p95", "p99")]
    return Table("cells_latency", "Latency per cell (ms)", cols, rows, section="cells")


def server_table(cells: list[CellResult]) -> Table:
    rows = []
    for c in cells:
        sv, f = c.server, _flag(c)
        errs = ", ".join(f"{k}: {n}" for k, n in sorted(c.errors.get("by_class", {}).items())) or "none"
        rows.append([Cell.text(c.config), Cell.text(c.profile), _src(c),
                     Cell.pct(sv.get("kv_cache_usage_mean"), f), Cell.pct(sv.get("kv_cache_usage_max"), f),
                     Cell.pct(sv.get("prefix_cache_hit_rate"), f), Cell.num(sv.get("num_requests_waiting_mean"), flag=f),
                     Cell.num(sv.get("num_requests_waiting_max"), flag=f),
                     Cell.num(sv.get("num_requests_running_max"), flag=f), Cell.num(sv.get("num_preemptions"), flag=f),
                     Cell.pct(c.errors.get("error_rate_all"), f), Cell.text(errs)])
    cols = ["configuration", "profile", "source", "KV usage mean", "KV usage max", "prefix-cache hit rate",
            "waiting mean", "waiting max", "running max", "preemptions", "error rate (all steps)", "errors by class"]
    return Table("cells_server", "Server state at saturation", cols, rows, section="cells",
                 note="From the twin's engine counters (simulated) or the endpoint's /metrics (measured); "
                      "– = the target did not expose it.")


def steps_table(cells: list[CellResult]) -> Table:
    rows = []
    for c in cells:
        for s in c.steps:
            f = _flag(c)
            rows.append([Cell.text(c.config), Cell.text(c.profile), _src(c), Cell.num(s.get("k")),
                         Cell.text(s.get("kind")), Cell.text(s.get("describe")), Cell.num(s.get("target_rate")),
                         Cell.num(s.get("offered_rate")),
                         Cell.num(s.get("request_throughput"), flag=f), Cell.num(s.get("output_token_throughput"), flag=f),
                         Cell.num(s.get("ttft_ms_p95"), flag=f), Cell.num(s.get("tpot_ms_p95"), flag=f),
                         Cell.num(s.get("e2e_ms_p95"), flag=f), Cell.pct(s.get("error_rate"), f),
                         Cell.text("yes" if s.get("meets_slo") else "no"),
                         Cell.text("; ".join(s.get("slo_failures") or []))])
    cols = ["configuration", "profile", "source", "step", "kind", "load", "target req/s", "realized req/s", "req/s",
            "out tok/s", "TTFT p95", "TPOT p95", "E2E p95", "error rate", "meets SLO", "why not"]
    return Table("steps", "Every load step", cols, rows, section="cells",
                 note="Each step is a run directory under cells/<configuration>/<profile>/steps/<k>/. Realized req/s = "
                      "the open-loop schedule's own rate over the measured requests (the target when the step scales its "
                      "arrivals to their exact mean).")


def findings_evidence_table(findings: list[Any]) -> Table:
    rows = []
    for i, f in enumerate(findings, 1):
        for r in f.refs:
            rows.append([Cell.text(f"F{i}"), Cell.text(f.topic), Cell.text(r.table), Cell.text(r.row), Cell.text(r.column),
                         Cell.text(r.display)])
    return Table("findings_evidence", "Where each finding's figures are", ["finding", "topic", "table", "row",
                                                                         "column", "shown as"], rows,
                 section="findings")


def kv_table(study: StudyConfig, targets: dict[str, dict[str, Any]]) -> Table:
    rows = []
    for conf in study.configurations:
        t = targets.get(conf.label) or {}
        if t.get("kind") == "twin":
            rows.append([Cell.text(conf.label), Cell.text("simulated", flag="simulated"), Cell.text(t.get("engine")),
                         Cell.text(t.get("model")), Cell.num(t.get("kv_capacity_tokens")), Cell.num(t.get("num_gpu_blocks")),
                         Cell.num(t.get("max_num_seqs")), Cell.num(t.get("max_num_batched_tokens")),
                         Cell.text(f"tp{t.get('tp')} pp{t.get('pp')} x{t.get('replicas')}"), Cell.text(t.get("dtype")),
                         Cell.text(None)])
        else:
            rows.append([Cell.text(conf.label), Cell.text("measured"), Cell.text(t.get("engine")),
                         Cell.text(t.get("model")), Cell.text(None), Cell.text(None), Cell.text(None), Cell.text(None),
                         Cell.text(conf.config), Cell.text(None), Cell.text(t.get("url"))])
    cols = ["configuration", "source", "engine", "model", "KV capacity (tokens/replica)", "KV blocks",
            "max_num_seqs", "max_num_batched_tokens", "parallelism", "dtype", "endpoint"]
    return Table("targets", "What served each configuration", cols, rows, section="methodology")


def methodology_table(study: StudyConfig, cells: list[CellResult], version: str, wall_s: float) -> Table:
    measured = sum(1 for c in cells if c.source == "measured")
    items = [
        ("model", study.model),
        ("cells", f"{len(cells)} ({measured} measured, {len(cells) - measured} simulated)"),
        ("simulated cells", "infermeter's twin: a vLLM-like continuous-batching engine (waiting/running queues, "
                            "chunked prefill, paged KV cache in 16-token blocks, prefix caching, preemption by "
                            "recompute) with step times from the performance model, run in virtual time"),
        ("measured cells", "infermeter run against the endpoint: streamed OpenAI API, per-request records, "
                           "server /metrics scraped when exposed"),
        ("load", study.load.describe()),
        ("saturation throughput", "steady window of the closed-loop step: from the first second-round send to "
                                  "the last send, output tokens spread over each request's generation"),
        ("SLO", study.slo.describe()),
        ("workload seed", str(study.seed)),
        ("profile overrides", ", ".join(f"{p}: {o}" for p, o in study.profile_overrides.items()) or "none"),
        ("cost basis", "the highest load meeting the SLO" if study.slo.limits else "saturation"),
        ("value metric", study.pricing.value_metric),
        ("volume range", f"{fmt_num(study.volume.low)} to {fmt_num(study.volume.high)} requests/day, peak factor "
                         f"{study.volume.peak_factor:g}, headroom {study.volume.headroom:.0%}"),
        ("soak", (f"{study.soak.rate_per_s:g} req/s for {study.soak.duration_s / 3600:g} h in "
                  f"{study.soak.window_s / 3600:g} h windows, objective {study.soak.objective:.3%}")
         if study.soak else "none"),
        ("infermeter", f"{version}; study ran in {wall_s:,.1f} s"),
    ]
    return Table("methodology", "Methodology", ["item", "value"],
                 [[Cell.text(k), Cell.text(v)] for k, v in items], section="methodology")


def workloads_table(study: StudyConfig, cells: list[CellResult]) -> Table:
    from infermeter.workload import build_workload

    rows = []
    for profile in study.profiles:
        wl = build_workload(profile=profile, seed=study.seed, overrides=study.profile_overrides.get(profile) or None)
        d = wl.describe()
        params = ", ".join(f"{k}={v}" for k, v in (d.get("parameters") or {}).items() if k != "kind")
        cs = [c for c in cells if c.profile == profile and c.tokens.get("mean_input") is not None]
        mi = sum(c.tokens["mean_input"] or 0.0 for c in cs) / len(cs) if cs else None  # every cell in cs has one
        mo = sum(c.tokens["mean_output"] or 0 for c in cs) / len(cs) if cs else None
        rows.append([Cell.text(profile), Cell.text(params), Cell.num(mi), Cell.num(mo),
                     Cell.text((d.get("content_hash") or "")[:16])])
    return Table("workloads", "Workloads", ["profile", "parameters", "mean input tokens (at saturation)",
                                            "mean output tokens", "content hash"], rows, section="methodology",
                 note="Every configuration received the same request stream per profile (same seed).")


def _term_column(term: str) -> str:
    """A commitment's column: on demand, 1-yr, 3-yr, spot, or other (a prepaid plan of no stated length)."""
    if term in ("on demand", "as given", "spot"):
        return "on demand" if term == "as given" else term
    return "1-yr" if term.startswith("1yr") else "3-yr" if term.startswith("3yr") else "other"


def price_terms_table(study: StudyConfig, prices: StudyPrices, cells: list[CellResult]) -> Table:
    """Per priced configuration: $/h and the value metric on demand, on 1- and 3-year commitments and spot, side by
    side, where the catalog has them (the best of a provider's plans of that length; – where it has none)."""
    from infermeter.study.pricing import price_terms

    vkey = VALUE_METRIC[study.pricing.value_metric]
    cols_t = ("on demand", "1-yr", "3-yr", "other", "spot")
    rows = []
    for conf in study.configurations:
        p = prices.prices.get(conf.label)
        if p is None or isinstance(p, str):
            continue
        # the value metric at the cost basis of the first profile that has one, scaled by each term's price
        cc = next((prices.cost[c.key] for c in cells if c.config == conf.label and c.key in prices.cost
                   and prices.cost[c.key].result is not None), None)
        v = METRIC[vkey].value(cc.cell, cc) if cc is not None else None
        best: dict[str, tuple[float | None, str]] = {}
        for term, usd, why in price_terms(study, conf.label, p):
            col = _term_column(term)
            if col not in best or (usd is not None and (best[col][0] is None or usd < (best[col][0] or 0.0))):
                best[col] = (usd, term if usd is not None else why)
        row = [Cell.text(conf.label), Cell.text(p.provider), Cell.text(cc.cell.profile if cc else None)]
        for col in cols_t:
            usd, name = best.get(col, (None, ""))
            row.append(Cell(f"{fmt_usd(usd)}/h" + (f" ({name})" if col in ("1-yr", "3-yr", "other") else ""), usd)
                       if usd is not None else Cell.text(None))
            row.append(Cell.usd(v * usd / p.usd_per_hour if v is not None and usd is not None and p.usd_per_hour
                                else None))
        rows.append(row)
    cols = ["configuration", "provider", "profile"]
    for col in cols_t:
        cols += [f"{col} $/h", f"{col} {UNIT[vkey]}"]
    return Table("price_terms", "Prices by commitment", cols, rows, section="value",
                 note="On-demand list price, each provider's catalogued commitments (1- and 3-year plans; 'other' = a "
                      "prepaid plan of no stated length) and spot; – = the catalog has none (no spot prices are "
                      "catalogued). The value metric is the first profile's at its cost basis, scaled by each price.")
