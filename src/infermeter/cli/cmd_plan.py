"""``infermeter plan``: predict memory, latency and throughput on hardware you do not have.

    infermeter plan --model llama-3.1-70b --gpu h100-sxm --gpus 1 --dtype bf16
    infermeter plan --model llama-3.1-70b --compare "4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2"
    infermeter plan --model llama-3.1-70b --gpu h100-sxm --gpus 2 --check decode_tokens_per_s=115
    infermeter plan --validate tests/data/published-measurements.csv --holdout all

The performance model (``infermeter.perfmodel``) is imported inside the command, so other
commands do not pay for it. ``--json`` prints the same figures with the keys documented in
docs/performance-model.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from infermeter.errors import ConfigError
from infermeter.terminal import clean

Fmt = Callable[[Any], str]  # formats one value of a plan's JSON

_ROWS: list[tuple[str, str, Fmt]] = [  # (label, json key, formatter)
    ("fits", "fits", lambda v: "yes" if v else "NO"),
    ("weights per GPU", "weights_gib_per_gpu", lambda v: f"{v:.1f} GiB"),
    ("KV cache per GPU", "kv_gib_per_gpu", lambda v: f"{v:.1f} GiB"),
    ("KV per token (model)", "kv_bytes_per_token", lambda v: f"{v / 1024:.0f} KiB"),
    ("KV capacity / replica", "kv_capacity_tokens", lambda v: f"{v:,} tokens"),
    ("replicas", "replicas", str),
    ("max concurrency", "max_concurrency", lambda v: f"{v:,} seqs"),
    ("TTFT", "ttft_ms", lambda v: f"{v:,.1f} ms"),
    ("TPOT", "tpot_ms", lambda v: f"{v:,.2f} ms"),
    ("per-user output", "per_user_output_tokens_per_s", lambda v: f"{v:,.1f} tok/s"),
    ("total output", "output_tokens_per_s", lambda v: f"{v:,.0f} tok/s"),
    ("saturation output", "saturation_output_tokens_per_s", lambda v: f"{v:,.0f} tok/s"),
    ("  at concurrency", "saturation_concurrency", lambda v: f"{v:,}"),
    ("bound", "bound", str),
]


# plain number formats of the figures that carry an 80% interval ("8.0 ms (6.9–9.4)")
_NUM: dict[str, Callable[[float], str]] = {"ttft_ms": lambda v: f"{v:,.1f}", "tpot_ms": lambda v: f"{v:,.2f}", "per_user_output_tokens_per_s": lambda v: f"{v:,.1f}",
        "output_tokens_per_s": lambda v: f"{v:,.0f}", "saturation_output_tokens_per_s": lambda v: f"{v:,.0f}"}


def _cell(fmt: Fmt, v: Any, key: str = "", intervals: dict[str, Any] | None = None) -> str:
    if v is None:
        return "-"
    iv = (intervals or {}).get(key)
    if iv and key in _NUM:
        return f"{fmt(v)} ({_NUM[key](iv[0])}–{_NUM[key](iv[1])})"
    return fmt(v)


def _config_string(gpu: str, gpus: int | None, tp: int | None, pp: int | None) -> str:
    # a count is a leading "N x" ("8xmi300x"); an "x" inside an id ("mi300x", "a10g-x") is part of its name
    if ":" in gpu or re.match(r"\s*\d+\s*[x×]", gpu, re.I):
        if gpus or tp or pp:
            raise ConfigError(f"--gpu {gpu!r} already names count/parallelism; drop --gpus/--tp/--pp or give a bare hardware id")
        return gpu
    par = [f"tp{tp}"] if tp else []
    par += [f"pp{pp}"] if pp else []
    head = f"{gpus}x{gpu}" if gpus else gpu
    return head + (":" + ",".join(par) if par else "")


def _speculative_line(config: str, sp: dict[str, Any]) -> str:
    """One line per configuration: the predicted speedup at the planned batch and at saturation, beside the bound."""
    from infermeter.terminal import escape

    method = sp["method"] + (f":{sp['draft_model']}" if sp.get("draft_model") else "")
    sat = sp.get("saturation_speedup")
    at_sat = f", {sat:.2f}x at saturation ({sp.get('saturation_concurrency')} streams)" if sat is not None else ""
    return (f"[cyan]speculative[/] {escape(config)}: {escape(method)}, k={sp['k']}, acceptance {sp['acceptance']:.2f}: "
            f"predicted speedup {sp['speedup']:.2f}x (bound {sp['speedup_bound']:.2f}x; TPOT {sp['tpot_ms_without']:.2f} ms without)"
            f"{at_sat}; the intervals leave the acceptance out")


def _weights_label(model: str, dtype: str) -> str:
    """``bf16 weights``, or for a checkpoint whose routed experts ship quantised (gpt-oss MXFP4) what they are stored in."""
    from infermeter.perfmodel.models import get_model

    try:
        bits = get_model(model).expert_bits
    except ConfigError:
        bits = 0.0
    return f"{dtype} weights, experts at {bits:g} bits" if bits else f"{dtype} weights"


def _print_plans(plans: list[dict[str, Any]], title: str) -> None:
    from infermeter.cli.fit import Fit, make_table
    from infermeter.terminal import SafeConsole, escape

    con = SafeConsole()
    con.print(title, highlight=False)
    # Fit: too wide for the console (plan --compare --cost at 80 columns), it splits into column groups
    # rather than cutting a figure ("($1,902.10–$2,9…")
    table = make_table(None, [("", "text"), *((str(p["config"]), "num") for p in plans)], show_edge=True)
    table.columns[0].style = "bold"
    for label, key, fmt in _ROWS:
        if all(p.get(key) is None for p in plans):
            continue  # e.g. memory rows of a calibrated deployment: not modelled
        table.add_row(label, *[_cell(fmt, p.get(key), key, p.get("intervals")) for p in plans])
    if any("cost" in p for p in plans):
        for label, key, fmt in _COST_ROWS:
            table.add_row(label, *[_cell(fmt, (p.get("cost") or {}).get(key), key, (p.get("cost") or {}).get("intervals"))
                                   for p in plans])
    con.print(Fit(table))
    for p in plans:
        sp = p.get("speculative")
        if sp and sp.get("speedup") is not None:
            con.print(_speculative_line(str(p["config"]), sp), highlight=False)
    for p in plans:
        c = p.get("cost")
        if c and "price" in c:
            con.print(f"[cyan]price[/] {escape(c['price'])} (applied to the predicted saturation throughput)", highlight=False)
        elif c and "error" in c:
            con.print(f"[yellow]{escape(p['config'])}: no price[/]: {escape(c['error'])}", highlight=False)
    if any(p.get("calibration") for p in plans):
        con.print("[cyan]simulated[/] with the calibrated twin: brackets give the 80% interval where the calibration "
                  "covers the load (--json has the basis); none where the batch goes beyond it.", highlight=False)
    elif any(p.get("basis") for p in plans):
        con.print("[cyan]predicted[/]: timings and throughputs are model predictions; brackets give their 80% interval "
                  "(out-of-sample errors on published measurements, by regime, widened by how far past their brackets "
                  "publications no fit had seen fell; --json has the basis). Memory figures are computed.",
                  highlight=False)
        if (line := _first_token_caveat(plans)) is not None:
            con.print(line, highlight=False)
    for p in plans:
        note = _unseen_note(p)
        if note:
            label, text = note
            con.print(f"[yellow]{escape(p['config'])}: {label}[/]: {escape(text)}", highlight=False)
    for p in plans:
        if not p["fits"]:
            con.print(f"[bold red]{escape(p['config'])}: does not fit[/]: {escape(p['why_not'])}", highlight=False)
        for note in p["notes"]:
            con.print(f"[yellow]{escape(p['config'])}: note[/]: {escape(note)}", highlight=False)


def _first_token_caveat(plans: list[dict[str, Any]]) -> str | None:
    """The line that says how often first-token intervals held on publications no fit had seen (the blind history,
    each set held out in turn), beside the other figures, and whether that is worse; None where no plan states a
    first-token interval so built. A first token with other requests in flight (``ttft_queued``) carries a spread of
    its own, and the line says how wide."""
    from infermeter.perfmodel.freshpub import QUEUED
    from infermeter.perfmodel.uncertainty import fresh_held_out, table_of

    helds = [h for p in plans if (h := (p.get("interval_basis") or {}).get("ttft_ms", {}).get("fresh_held_out"))]
    # several configurations (--compare): a queued first token's record, if any has one, is the one to read
    held = next((h for h in helds if h.get("group") == f"ttft_{QUEUED}"), helds[0] if helds else None)
    if not held:
        return None

    rest = [v for g, v in fresh_held_out().items() if not g.startswith("ttft")]
    inside, rows = sum(v["inside"] for v in rest), sum(v["rows"] for v in rest)
    share, other = held["inside"] / held["rows"], (inside / rows if rows else 1.0)
    queued = held.get("group") == f"ttft_{QUEUED}"
    label = "TTFT is the least certain figure" if share < other or queued else "TTFT intervals"
    what = "first-token measurements with other requests in flight" if queued else "first-token measurements of one request alone or a static batch"
    wide = (f"; such intervals carry a spread of their own, x{math.exp(table_of().fresh_tau(QUEUED)):,.0f} either way, as "
            "the model does not place a new run's queue") if queued else ""
    return (f"[yellow]{label}[/]: on blind sets of publications no fit had seen, each held out in turn, "
            f"{held['inside']} of {held['rows']} {what} fell inside intervals built this way "
            f"({share:.0%}; the other figures {inside} of {rows}, {other:.0%}){wide}: a first token takes whatever a run "
            "adds before it (a queue, a client, a network).")


def _unseen_note(plan: dict[str, Any]) -> tuple[str, str] | None:
    """(label, text): what a plan whose intervals rest on a borrowed band must say: for ``unseen`` figures that no fitted publication
    measures its combination, for an MoE model's ``pooled`` figures that its MoE terms rest on few publications (both
    take their class's band), and for an MoE model, or a dense one on the unseen band, how far such predictions missed
    on publications never seen (``data/blind-scores.yaml``, scored from the blind set by ``perfmodel.blindscore``)."""
    from infermeter.perfmodel import blindscore
    from infermeter.perfmodel.models import get_model

    basis = plan.get("interval_basis") or {}
    try:
        moe = get_model(str(plan.get("model"))).model_class == "moe"
    except ConfigError:
        moe = False
    unseen = sorted(k for k, v in basis.items() if isinstance(v, dict) and v.get("basis") == "unseen")
    pooled = sorted(k for k, v in basis.items() if isinstance(v, dict) and v.get("basis") == "pooled") if moe else []
    if unseen:
        label, text = "unseen", (f"no fitted publication measures this model class, hardware, engine and precision together, so the "
                f"brackets of {', '.join(unseen)} are borrowed from other combinations")
    elif pooled:
        label, text = "MoE band", (f"this MoE model's expert terms on this hardware rest on few publications, so the brackets of "
                f"{', '.join(pooled)} take the MoE band")
    else:
        return None
    shipped = blindscore.load() or {}
    cls = ((shipped.get("scores") or {}).get("moe" if moe else "dense")) or {}
    score, which = (cls.get("unseen") or {}, "on this band") if unseen else (cls, "whatever their band")
    if (score.get("rows") or 0) < 5:  # too few blind rows on the band: the class's figures, whatever their band
        score, which = cls, "whatever their band"
    name = "MoE" if moe else "dense"
    then = (((shipped.get("blind_time") or {}).get("scores") or {}).get("moe" if moe else "dense")) or {}
    if score.get("rows") and score.get("median_abs_error") is not None:
        src = shipped.get("source", "the blind set")
        spread = " (whose fresh-publication spread was fitted with that set too)" if shipped.get("spread_saw_it") else ""
        changed = (then.get("median_abs_error"), then.get("max_abs_error")) != (cls.get("median_abs_error"), cls.get("max_abs_error"))
        def today(verb: str) -> str:  # how the shipped model does on the set's figures
            return (f"by a median {score['median_abs_error']:.0%} (max {score['max_abs_error']:.0%}) and "
                    f"{score['inside']} of {score['rows']} {verb} inside their brackets{spread}")

        if then.get("rows") and then.get("median_abs_error") is not None and changed:
            # the blind figures first: the shipped model may have changed for what the set showed once it was read
            at = ", ".join(str(c)[:7] for c in (shipped.get("blind_time") or {}).get("scored_at") or [])
            text += (f"; on {name} models in publications no fit had seen ({src}), the model of {at}, scored before the "
                     f"set was read, missed its {then['rows']} {name} figures by a median {then['median_abs_error']:.0%} "
                     f"(max {then['max_abs_error']:.0%}); this model, changed since (not blind), misses {score['rows']} of "
                     f"them {which} " + today("fall"))
        else:
            text += (f"; on {name} models in publications no fit had seen ({src}: {score['rows']} published figures "
                     f"{which}), this model missed " + today("fell"))
        if score["inside"] < 0.7 * score["rows"] or shipped.get("spread_saw_it"):  # an in-sample count cannot vouch
            text += ": measure or `infermeter calibrate` before relying on these figures"
    return label, text


_METRIC_LABEL = {"output_tokens_per_s": "tok/s", "ttft_ms": "TTFT ms", "tpot_ms": "TPOT ms", "decode_tokens_per_s": "tok/s/user",
                 "prefill_tokens_per_s": "prompt tok/s"}
_KIND_LABEL = {"in": "in-sample", "loo": "leave-one-out", "lopo": "leave-one-publication-out"}
# issue 29's bar for publications never fitted (it replaced issue 14's median <= 10 %, max <= 35 %): judged here on
# the leave-one-publication-out figures, the corpus's stand-in for the next publication
TARGETS = {"median": 0.12, "max": 0.60, "coverage_low": 0.70, "coverage_high": 0.90}


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _pct(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.1%}" if signed else f"{v:.1%}")


def _row_intervals(report: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per row the stated 80% interval and whether the published value is inside, and the summary coverage.

    With leave-one-publication-out (``--holdout source|all``) each row's interval surrounds its LOPO
    prediction and is built from errors without its publication (nested; the row-level part only: the
    fresh-publication spread comes from blind sets, which ``fresh_publication`` checks set by set);
    otherwise it surrounds the in-sample prediction with the shipped table, spread included (an
    in-sample check on the corpus, the judge on a blind file)."""
    from infermeter.perfmodel import blindscore, freshpub
    from infermeter.perfmodel.uncertainty import Check, coverage_by, interval, loco_records, nested_coverage, table_of
    from infermeter.perfmodel.validate import deployment_for, validation_regime

    per: dict[str, dict[str, Any]] = {}
    checks: list[Check] = []
    if "lopo" in report.kinds:
        kind = ("leave-one-publication-out (nested: fit and error table without the row's publication; row-level part, "
                "without the fresh-publication spread)")
        loco = loco_records([r.row for r in report.results], report.calibration)
        checks = nested_coverage(report, loco)[2]
    else:
        kind = "in-sample (shipped calibration and table; blind for a file the fit never saw)"
        for r in report.results:
            reg = validation_regime(r.row, deployment_for(r.row, report.calibration))
            lo, hi, _ = interval(r.row.metric, r.predicted, reg)
            checks.append((r, lo, hi, lo <= r.row.value <= hi, reg))
    for r, lo, hi, ok, reg in checks:
        per[r.row.id] = {"interval": [lo, hi], "inside": ok, "basis": reg.calibration, "class": reg.model_class,
                         "fresh_class": reg.fresh_class}
    n = len(per)
    inside = sum(v["inside"] for v in per.values())
    summary = {"inside": round(inside / n, 4) if n else None, "rows": n, "nominal": 0.8, "kind": kind, **coverage_by(checks)}
    held = freshpub.held_out(freshpub.load())["all"]
    summary["fresh_publication"] = {"tau": {c: round(t, 4) for c, t, _ in table_of(report.calibration).fresh},
                                    "held_out_sets": {"inside": round(held["inside"] / held["rows"], 4) if held["rows"] else None,
                                                      "rows": held["rows"]},
                                    # the file's own rows are in the blind history: its coverage is not a blind figure
                                    "fitted_with_this_file": "lopo" not in report.kinds
                                    and blindscore.in_spread(r.row.id for r in report.results)}
    return per, summary


def _row_interval(v: dict[str, Any] | None) -> dict[str, Any]:
    if v is None:  # too few other rows to state an interval for this one
        return {"interval": None, "inside": None, "interval_basis": None, "model_class": None, "fresh_class": None}
    return {"interval": [round(x, 4) for x in v["interval"]], "inside": v["inside"], "interval_basis": v["basis"],
            "model_class": v["class"], "fresh_class": v["fresh_class"]}


def _validation_json(report: Any) -> dict[str, Any]:
    kinds = report.kinds
    per, cov = _row_intervals(report)
    return {
        "holdout": report.holdout,
        "rows": [{"id": r.row.id, "metric": r.row.metric, "measured": r.row.value, "predicted": round(r.predicted, 4),
                  "error": round(r.error, 4),
                  **{f"predicted_{k}": (None if r.prediction(k) is None else round(r.prediction(k), 4)) for k in kinds if k != "in"},
                  **{f"error_{k}": (None if r.error_of(k) is None else round(r.error_of(k), 4)) for k in kinds if k != "in"},
                  **_row_interval(per.get(r.row.id))}
                 for r in report.results],
        "summary": {k: {"median_abs_error": round(report.median_abs(k), 4), "max_abs_error": round(report.max_abs(k), 4)} for k in kinds},
        "by_family": {g.name: {"n": g.n, **{k: {"median": _r4(g.median_abs[k]), "max": _r4(g.max_abs[k])} for k in kinds}}
                      for g in report.breakdown("family")},
        "by_engine": {g.name: {"n": g.n, **{k: {"median": _r4(g.median_abs[k]), "max": _r4(g.max_abs[k])} for k in kinds}}
                      for g in report.breakdown("engine")},
        "interval_coverage": cov,
    }


def _r4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _print_validation(report: Any, path: str) -> None:
    from rich.table import Table

    from infermeter.terminal import SafeConsole, escape

    con = SafeConsole()
    con = SafeConsole(width=max(con.width, 120))  # the per-row table has up to 7 columns: keep it unwrapped when piped
    kinds = report.kinds
    con.print(f"validation against {escape(path)}: {len(report.results)} published measurements\n(err = predicted / measured - 1; "
              "LOO = predicted by a fit without the row, LOPO = by a fit without the row's publication, both from the priors)",
              highlight=False)
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    cols = ["id", "metric", "meas.", "pred.", "err"] + [{"loo": "LOO err", "lopo": "LOPO err"}[k] for k in kinds if k != "in"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("id", "metric") else "right", no_wrap=True, min_width=7 if "err" in col else None)
    for r in report.results:
        table.add_row(r.row.id, _METRIC_LABEL.get(r.row.metric, r.row.metric), _num(r.row.value), _num(r.predicted), _pct(r.error, True),
                      *[_pct(r.error_of(k), True) for k in kinds if k != "in"])
    con.print(table)
    for by in ("family", "engine"):
        t = Table(title=f"median / max |error| by hardware {by}" if by == "family" else "median / max |error| by engine",
                  box=None, pad_edge=False, header_style="bold underline", title_justify="left")
        t.add_column(by, justify="left")
        t.add_column("rows", justify="right")
        for k in kinds:
            t.add_column(_KIND_LABEL[k], justify="right")
        for g in report.breakdown(by):
            t.add_row(g.name, str(g.n), *[f"{_pct(g.median_abs[k])} / {_pct(g.max_abs[k])}" for k in kinds])
        t.add_row("all", str(len(report.results)), *[f"{_pct(report.median_abs(k))} / {_pct(report.max_abs(k))}" for k in kinds])
        con.print(t)
    for k in kinds:
        worst = report.worst(k, 1)[0]
        con.print(f"{_KIND_LABEL[k]}: median |error| {report.median_abs(k):.1%}, max {report.max_abs(k):.1%} ({worst.row.id})",
                  highlight=False)
    _, cov = _row_intervals(report)
    if cov["rows"]:
        parts = ", ".join(f"{b} {v['inside']:.0%} of {v['rows']}" for b, v in cov["by_class_basis"].items())
        con.print(f"80% prediction intervals, {cov['kind']}: hold {cov['inside']:.1%} of {cov['rows']} rows ({parts})", highlight=False)
        fresh = cov["fresh_publication"]
        if fresh["fitted_with_this_file"]:
            con.print("[yellow]not blind[/]: the fresh-publication spread in these intervals was fitted with this file's rows "
                      "(python -m infermeter.perfmodel.freshpub checks each blind set against the others' spread)", highlight=False)
        if fresh["tau"]:
            held = fresh["held_out_sets"]
            con.print("fresh-publication spread (added in quadrature; from blind sets scored before they joined the corpus): "
                      + ", ".join(f"{c} {t:.2f}" for c, t in fresh["tau"].items())
                      + (f"; each blind set against the other sets' spread: {held['inside']:.1%} of {held['rows']} rows inside"
                         if held["rows"] else ""), highlight=False)
    if "lopo" in kinds:
        misses = [r.row.id for r in report.results if abs(r.error_lopo or 0) > TARGETS["max"]]
        why = [f"median {report.median_abs('lopo'):.1%}"] if report.median_abs("lopo") > TARGETS["median"] else []
        why += [f"{len(misses)} rows beyond {TARGETS['max']:.0%}"] if misses else []
        if cov["rows"] and not TARGETS["coverage_low"] <= cov["inside"] <= TARGETS["coverage_high"]:
            why.append(f"intervals hold {cov['inside']:.1%}")
        con.print(f"targets (leave-one-publication-out median <= {TARGETS['median']:.0%}, max <= {TARGETS['max']:.0%}, "
                  f"80% intervals holding {TARGETS['coverage_low']:.0%}-{TARGETS['coverage_high']:.0%} of rows): "
                  + ("[green]met[/]" if not why else f"[red]NOT met[/] ({'; '.join(why)})"), highlight=False)


MAX_RATE_REQUESTS = 10_000_000  # at_rate walks each request's admission; past this a run is its steady state

_PER_WORK = ("usd_per_1m_output_tokens", "usd_per_1m_input_tokens", "usd_per_1m_total_tokens", "usd_per_1m_requests")
_NUM.update({"usd_per_1m_output_tokens": lambda v: f"${v:,.3f}", "usd_per_1m_total_tokens": lambda v: f"${v:,.3f}",
             "usd_per_1m_requests": lambda v: f"${v:,.2f}"})

_COST_ROWS: list[tuple[str, str, Fmt]] = [
    ("$/hour", "usd_per_hour", lambda v: f"${v:,.2f}"),
    ("$/1M output tokens", "usd_per_1m_output_tokens", lambda v: f"${v:,.3f}"),
    ("$/1M total tokens", "usd_per_1m_total_tokens", lambda v: f"${v:,.3f}"),
    ("$/1M requests", "usd_per_1m_requests", lambda v: f"${v:,.2f}"),
]


def _add_costs(plans: list[dict[str, Any]], input_tokens: int, output_tokens: int, options: Any, overhead: float) -> None:
    """Price each plan at its predicted saturation throughput (labelled 'predicted')."""
    from infermeter.analysis.cost import cost_for_throughput
    from infermeter.errors import UserError

    for p in plans:
        out_tps = p.get("saturation_output_tokens_per_s")
        if not p["fits"] or not out_tps:
            p["cost"] = None
            continue
        try:
            c = cost_for_throughput(p["config"], output_tokens_per_s=out_tps,
                                    input_tokens_per_s=out_tps * input_tokens / output_tokens,
                                    requests_per_s=out_tps / output_tokens, options=options, overhead=overhead,
                                    source="predicted", label=p["config"], model=p.get("model"))
        except UserError as exc:
            p["cost"] = {"error": str(exc)}
            continue
        j = c.to_json()
        p["cost"] = {k: j[k] for k in ("usd_per_hour", "usd_per_month", "usd_per_1m_output_tokens",
                                       "usd_per_1m_input_tokens", "usd_per_1m_total_tokens", "usd_per_1m_requests",
                                       "price_source", "price_date")}
        p["cost"]["price"] = c.price.describe()
        p["cost"]["basis"] = "predicted saturation throughput"
        iv = (p.get("intervals") or {}).get("saturation_output_tokens_per_s")
        if iv:  # a cost per unit of work scales with 1/throughput: the throughput's interval, inverted
            p["cost"]["intervals"] = {k: [round(p["cost"][k] * out_tps / iv[1], 4), round(p["cost"][k] * out_tps / iv[0], 4)]
                                      for k in _PER_WORK if p["cost"].get(k) is not None}
            p["cost"]["intervals_basis"] = "the 80% interval of the predicted saturation throughput, inverted"


def register(app: typer.Typer) -> None:
    from infermeter.cli.costview import with_price_flags

    @app.command("plan")
    @with_price_flags
    def plan_cmd(
        model: Annotated[Optional[str], typer.Option("--model", "-m", help="Catalog id (e.g. llama-3.1-70b), HF id, or path to a config.json.")] = None,
        gpu: Annotated[Optional[str], typer.Option("--gpu", help="Hardware id (h100-sxm, a100-80gb, l40s, mi300x, cpu-epyc-9654...) or a full config like 4xa100-80gb:tp4.")] = None,
        gpus: Annotated[Optional[int], typer.Option("--gpus", help="Number of devices (default tp*pp); extra devices become data-parallel replicas.")] = None,
        tp: Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel degree (default: --gpus when neither --tp nor --pp is given).")] = None,
        pp: Annotated[Optional[int], typer.Option("--pp", help="Pipeline-parallel degree.")] = None,
        dtype: Annotated[str, typer.Option("--dtype", help="Weights: bf16, fp16, fp8, int8, int4/awq/gptq, fp4, or a GGUF type (q4_k_m, q8_0...).")] = "bf16",
        kv_dtype: Annotated[Optional[str], typer.Option("--kv-dtype", help="KV cache dtype: bf16, fp16, fp8 (default: the engine's rule, FP8 for TensorRT-LLM FP8/FP4 checkpoints, else 16-bit).")] = None,
        input_tokens: Annotated[int, typer.Option("--input-tokens", help="Prompt tokens per request.")] = 1000,
        output_tokens: Annotated[int, typer.Option("--output-tokens", help="Generated tokens per request.")] = 200,
        lengths: Annotated[str, typer.Option("--lengths", help="Length distribution whose means are --input-tokens/--output-tokens: fixed, uniform (SGLang random, range ratio 0) or sharegpt (chat: log-normal, CV 1).")] = "fixed",
        concurrency: Annotated[int, typer.Option("--concurrency", help="Concurrent users (closed loop) over the whole configuration.")] = 1,
        engine: Annotated[str, typer.Option("--engine", help="vllm | trtllm | sglang | lmdeploy | llamacpp, optionally @VERSION (trtllm@0.6.1; vllm@0.8.5+v0 for a vLLM 0.8-0.10 server run with VLLM_USE_V1=0).")] = "vllm",
        gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization", help="Fraction of device memory the engine may use (vLLM semantics).")] = 0.9,
        hardware_file: Annotated[Optional[str], typer.Option("--hardware-file", help="YAML file adding or overriding hardware entries.")] = None,
        compare: Annotated[Optional[list[str]], typer.Option("--compare", help="Configurations to plan side by side, e.g. \"4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2\".")] = None,
        check: Annotated[Optional[str], typer.Option("--check", help="A claimed figure METRIC=VALUE to test against physics: decode_tokens_per_s, ttft_ms, tpot_ms or output_tokens_per_s.")] = None,
        validate: Annotated[Optional[str], typer.Option("--validate", help="CSV of published measurements: per-row prediction, error, and out-of-sample error.")] = None,
        holdout: Annotated[str, typer.Option("--holdout", help="With --validate: row (leave-one-out), source (leave-one-publication-out), all (both) or none.")] = "row",
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
        cost: Annotated[bool, typer.Option("--cost", help="Add $/hour, $/1M tokens and $/1M requests at the predicted saturation throughput (dated catalog price).")] = False,
        overhead: Annotated[float, typer.Option("--overhead", help="With --cost: hidden costs as a fraction of the hourly price.")] = 0.0,
        calibration: Annotated[Optional[str], typer.Option("--calibration", help="A calibration file (`infermeter calibrate`): plan the measured deployment (model, hardware and engine from the file) by simulating its calibrated twin.")] = None,
        speculative: Annotated[Optional[str], typer.Option("--speculative", help="Plan speculative decoding: METHOD:k=K,acceptance=A with METHOD draft:MODEL, eagle, mtp or ngram and A vLLM's acceptance rate (accepted / drafted tokens; conditional=C for the per-position form), e.g. draft:llama-3.1-8b,k=4,acceptance=0.7.")] = None,
        fleet: Annotated[Optional[str], typer.Option("--fleet", help="Size every pool of a fleet file (docs/fleet.md) to its SLO at the least total cost, by simulating each pool at its traffic (the file's rates) with --input-tokens/--output-tokens.")] = None,
        disaggregate: Annotated[Optional[str], typer.Option("--disaggregate", help="Simulate disaggregated prefill/decode against aggregated serving on the same GPUs: prefill=CONFIG,decode=CONFIG[,...], or 'search' for the cheapest xPyD split within --gpus of --gpu/--tp/--pp instances (docs/disaggregation.md).")] = None,
        rate: Annotated[Optional[float], typer.Option("--rate", help="Poisson arrival rate (requests/s): plan an open loop instead of --concurrency users (with --disaggregate: the simulated rate).")] = None,
        slo: Annotated[Optional[str], typer.Option("--slo", help="With --disaggregate: bounds, e.g. ttft_ms=3000,tpot_ms=40 (at --slo-percentile).")] = None,
        slo_percentile: Annotated[float, typer.Option("--slo-percentile", help="With --disaggregate: the percentile the SLO bounds (50, 90, 95, 99, 99.9).")] = 99.0,
        seeds: Annotated[int, typer.Option("--seeds", help="With --disaggregate: seeds each layout is simulated on (figures: mean and range).")] = 3,
        enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="Plan a vLLM or SGLang server run without CUDA/HIP graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph): every decode step launches each layer's kernels: a cost per layer, fitted per GPU family where rows state it, else a prior (the note says which).")] = False,
        max_output: Annotated[Optional[int], typer.Option("--max-output", help="With --lengths uniform or sharegpt: the output cap every request carries (max_tokens); --output-tokens is then the mean of the capped outputs. It shortens a finite run's drain.")] = None,
        network: Annotated[Optional[str], typer.Option("--network", help="The network between nodes when a configuration spans more than one (more GPUs than a node holds, 8): one of data/networks.yaml (ib-ndr400, ib-hdr200, roce-400, ethernet-100, ethernet-25). Default ib-ndr400, one 400 Gb/s NIC per GPU.")] = None,
        requests: Annotated[Optional[int], typer.Option("--requests", help="With --rate: a finite run of that many requests (needed past the configuration's rate, where the queue has no steady mean wait); with --disaggregate: requests per simulated run (300).")] = None,
        price_options: Any = None,
        extra: Annotated[Optional[list[str]], typer.Argument(help="More configurations for --compare.", show_default=False)] = None,
    ) -> None:
        """Predict fit, memory, TTFT, TPOT and throughput of a model on hardware you may not have."""
        if (fleet or validate) and (rate is not None or requests is not None):
            raise ConfigError(f"--rate and --requests plan one deployment's open loop; {'--fleet' if fleet else '--validate'} "
                              "takes the rates from its file")
        own = next((f for f, on in (("--enforce-eager", enforce_eager), ("--max-output", max_output is not None),
                                    ("--network", network is not None)) if on), None)
        if own and (fleet or validate or calibration or disaggregate or check):
            which = next(f for f, on in (("--fleet", fleet), ("--validate", validate), ("--calibration", calibration),
                                         ("--disaggregate", disaggregate), ("--check", check)) if on)
            setting = {"--enforce-eager": "enforce_eager=1", "--max-output": "max_output=N", "--network": "network=ID"}[own]
            raise ConfigError(f"{own} sets how one planned deployment runs; {which} does not take it"
                              + (f" (a row of the file states it: settings {setting})" if validate else "")
                              + (" (give the link in the spec: link=NETWORK)" if disaggregate and own == "--network" else ""))
        if network is not None:
            from infermeter.perfmodel.hardware import get_network

            try:
                get_network(network)  # an unknown id fails before any modelling, naming the known ones
            except ConfigError as exc:
                raise ConfigError(f"--network {network!r}: {exc}") from None
        if fleet:
            from infermeter.cli.fleetview import plan_fleet_cmd

            plan_fleet_cmd(fleet, input_tokens, output_tokens, as_json)
            return
        if validate:
            from infermeter.perfmodel.validate import load_rows
            from infermeter.perfmodel.validate import validate as run_validation

            report = run_validation(load_rows(validate), holdout=holdout)
            if as_json:
                print(json.dumps(_validation_json(report), indent=2))
            else:
                _print_validation(report, validate)
            return
        if calibration:
            from infermeter.measure.calibrate import plan_calibrated
            from infermeter.twin.calibration import DeploymentCalibration

            cal = DeploymentCalibration.read(calibration)
            if model and model != cal.deployment.model:
                raise ConfigError(f"--calibration {calibration} calibrates {cal.deployment.model}, not --model {model}")
            given = [flag for flag, on in (
                ("--gpu", gpu), ("--compare", compare or extra), ("--check", check), ("--cost", cost), ("--gpus", gpus),
                ("--tp", tp), ("--pp", pp), ("--dtype", dtype != "bf16"), ("--kv-dtype", kv_dtype),
                ("--engine", engine != "vllm"), ("--gpu-memory-utilization", gpu_memory_utilization != 0.9),
                ("--hardware-file", hardware_file), ("--rate", rate is not None), ("--requests", requests is not None)) if on]
            if given:
                raise ConfigError(f"--calibration plans the calibrated deployment itself (its hardware, engine and KV "
                                  f"capacity come from the file): drop {', '.join(given)}")
            plans = [plan_calibrated(cal, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency)]
            if as_json:
                print(json.dumps(plans[0], indent=2))
                return
            _print_plans(plans, f"{cal.deployment.model} served by {cal.deployment.engine} on {cal.deployment.hardware} "
                                f"(calibrated), {input_tokens} in / {output_tokens} out, concurrency {concurrency}")
            return
        if not model:
            raise ConfigError("--model is required (e.g. --model llama-3.1-70b), unless --validate is given")
        if requests is not None and requests < 1:
            raise ConfigError(f"--requests must be >= 1, got {requests}")
        if disaggregate:
            from infermeter.cli.disagg import plan_disaggregated
            from infermeter.measure.disaggplan import plan_from_flags

            plan_disaggregated(plan_from_flags(model, disaggregate, gpu=gpu, gpus=gpus, tp=tp, pp=pp, rate=rate,
                                               slo=slo, percentile=slo_percentile, seeds=seeds,
                                               requests=300 if requests is None else requests,
                                               input_tokens=input_tokens, output_tokens=output_tokens, dtype=dtype,
                                               kv_dtype=kv_dtype), as_json)
            return
        if requests is not None and rate is None:
            raise ConfigError("--requests sizes a run at --rate (or a --disaggregate simulation); give --rate too")
        if rate is not None and speculative:
            raise ConfigError("--rate with --speculative is not modelled yet (speculation shortens each request, which "
                              "changes how many an open loop holds); plan --concurrency, or simulate --rate --speculative")
        if requests is not None and requests > MAX_RATE_REQUESTS:
            raise ConfigError(f"--requests {requests} is more than {MAX_RATE_REQUESTS:,}: a run that long is the steady "
                              "state; drop --requests below the configuration's rate")
        configs = [c for item in (compare or []) + (extra or []) for c in item.split()]
        if extra and not compare:
            raise ConfigError(f"unexpected argument(s) {' '.join(extra)!r}: list several configurations after --compare")
        if not configs:
            if not gpu:
                raise ConfigError("--gpu is required (e.g. --gpu h100-sxm), or give --compare CONFIGS")
            configs = [_config_string(gpu, gpus, tp, pp)]
        elif gpu or gpus or tp or pp:
            raise ConfigError("--compare takes full configurations (e.g. 4xa100-80gb:tp4); drop --gpu/--gpus/--tp/--pp")
        if check:
            from infermeter.perfmodel.check import check_claim

            metric, sep, value = check.partition("=")
            try:
                claim = float(value)
            except ValueError:
                raise ConfigError(f"--check {check!r}: expected METRIC=VALUE, e.g. decode_tokens_per_s=115") from None
            verdicts = [check_claim(metric, claim, model, c, dtype=dtype, kv_dtype=kv_dtype, engine=engine, input_tokens=input_tokens,
                                    output_tokens=output_tokens, hardware_file=hardware_file) for c in configs]
            if as_json:
                print(json.dumps([{"config": c, "metric": v.metric, "claim": v.claim, "verdict": v.verdict,
                                   "ceiling": None if math.isnan(v.ceiling) else round(v.ceiling, 4),
                                   "predicted": None if math.isnan(v.predicted) else round(v.predicted, 4),
                                   "ratio_to_ceiling": None if math.isnan(v.ceiling) else round(v.ratio_to_ceiling, 4),
                                   "interval": None if v.interval is None else [round(x, 4) for x in v.interval],
                                   "interval_basis": v.interval_basis,
                                   "reason": v.reason or None} for c, v in zip(configs, verdicts)], indent=2))
            else:
                for c, v in zip(configs, verdicts):
                    print(clean(f"{model} on {c} ({dtype}): {v.sentence()}"))
            return
        from infermeter.perfmodel.planner import plan

        plans = [plan(model, c, dtype=dtype, kv_dtype=kv_dtype, engine=engine, input_tokens=input_tokens, output_tokens=output_tokens,
                      concurrency=concurrency, gpu_memory_utilization=gpu_memory_utilization, hardware_file=hardware_file,
                      speculative=speculative, lengths=lengths, rate=rate, requests=requests, enforce_eager=enforce_eager,
                      max_output=max_output, **({"network": network} if network else {})).to_json()
                 for c in configs]
        if cost:
            _add_costs(plans, input_tokens, output_tokens, price_options, overhead)
        if as_json:
            print(json.dumps(plans[0] if len(plans) == 1 else plans, indent=2))
            return
        first = plans[0]
        load = f"{rate:g} requests/s" + (f" ({requests} requests)" if requests else "") if rate is not None else f"concurrency {concurrency}"
        _print_plans(plans, f"{first['model']} ({_weights_label(str(first['model']), str(first['dtype']))}, {first['kv_dtype']} KV, {engine}{', eager' if enforce_eager else ''}), "
                            f"{input_tokens} in / {output_tokens} out, {load}")
