"""Console side of ``simulate --disaggregate`` and ``plan --disaggregate``: run, then print tables or JSON.

Promises: :func:`simulate_disaggregated` runs a :class:`~infermeter.measure.disagg.DisaggPlan` and prints
the usual summary table plus one table of both pools and the KV transfer (``--json``: summary.json);
:func:`plan_disaggregated` prints :mod:`infermeter.measure.disaggplan`'s layouts and its verdict.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from infermeter.analysis.results import Distribution, Summary
from infermeter.measure.config import RunConfig
from infermeter.terminal import SafeConsole, escape
from infermeter.twin.spec import TwinSpec


def _f(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def simulate_disaggregated(cfg: RunConfig, spec: TwinSpec, text: str, token_times: str, err: SafeConsole,
                           as_json: bool) -> None:
    from infermeter.cli.view import summary_table
    from infermeter.measure.disagg import DisaggPlan

    plan = DisaggPlan(cfg, spec, text, token_times=token_times)
    dt = plan.dtwin
    link = dt.link
    err.print("[cyan]simulating[/] " + escape(
        f"{dt.prefill.model} disaggregated: prefill {dt.prefill.hardware} ({dt.prefill.replicas} instance(s)) + "
        f"decode {dt.decode.hardware} ({dt.decode.replicas} instance(s)), KV over {link.kind} "
        f"({link.bytes_per_s / 1e9:,.0f} GB/s, {link.streams} stream(s)), route {dt.spec.route}; "
        f"load: {plan.shape.describe()}"), highlight=False)
    res = plan.run(progress=plan.eta(lambda line: err.print(line, highlight=False, markup=False)))
    s = res.summary
    if as_json:
        print(json.dumps(s, indent=2))
        return
    out = SafeConsole()
    summary = Summary.from_json(s)
    out.print(summary_table(summary, None))
    out.print(pools_table(summary))
    out.print(f"results: {escape(res.run_dir)}  (simulated {res.records} requests, "
              f"{res.virtual_s:,.0f} s virtual, in {res.wall_s:.1f} s)")


def pools_table(s: Summary) -> Table:
    """Both pools and the KV transfer, from the summary's ``disaggregation`` and ``kv_transfer_ms``."""
    d = s.disaggregation or {}
    kv = s.kv_transfer_ms or Distribution()
    link = d.get("link") or {}
    t = Table(title=f"disaggregated: {d.get('layout', '')}  (KV over {link.get('kind')}, "
                    f"{_f(link.get('bandwidth_gbs'), ',.0f')} GB/s; transfer p50 {_f(kv.p50, ',.2f')} ms, "
                    f"p99 {_f(kv.p99, ',.2f')} ms)", title_justify="left")
    for c in ("pool", "config", "instances", "busy", "KV use mean / max", "running mean", "waiting mean / max"):
        t.add_column(c, justify="left" if c in ("pool", "config") else "right")
    for name in ("prefill", "decode"):
        p = d.get(name) or {}
        t.add_row(name, escape(str(p.get("config"))), str(p.get("instances")), _f(p.get("busy_fraction"), ".0%"),
                  f"{_f(p.get('kv_cache_usage_mean'), '.0%')} / {_f(p.get('kv_cache_usage_max'), '.0%')}",
                  _f(p.get("num_requests_running_mean"), ".1f"),
                  f"{_f(p.get('num_requests_waiting_mean'), '.2f')} / {p.get('num_requests_waiting_max', '–')}")
    return t


def plan_disaggregated(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    w = result["workload"]
    pct = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}[float(w["percentile"])]
    slo = ", ".join(f"{k} {pct} <= {v:g}" for k, v in w["slo"].items()) or "none"
    t = Table(title=f"{w['model']}: {w['input_tokens']} in / {w['output_tokens']} out at {w['rate']:g} req/s "
                    f"(Poisson, {w['requests']} requests x {w['seeds']} seeds); SLO {slo}", title_justify="left")
    for c in ("layout", "GPUs", f"TTFT {pct} ms", f"TPOT {pct} ms", f"KV transfer {pct} ms", "busy P / D", "meets SLO"):
        t.add_column(c, justify="left" if c == "layout" else "right")

    def rng(st: dict[str, Any] | None, fmt: str) -> str:
        if not st or st.get("mean") is None:
            return "–"
        if st["lo"] == st["hi"]:
            return format(st["mean"], fmt)
        return f"{format(st['mean'], fmt)} [{format(st['lo'], fmt)}–{format(st['hi'], fmt)}]"

    for lay in result["layouts"]:
        busy = (f"{_f((lay.get('prefill_busy') or {}).get('mean'), '.0%')} / "
                f"{_f((lay.get('decode_busy') or {}).get('mean'), '.0%')}" if lay["prefill_instances"]
                else _f((lay.get("busy") or {}).get("mean"), ".0%"))
        name = lay["layout"] if lay["layout"] != "aggregated" else f"aggregated x{lay['replicas']}"
        t.add_row(escape(name), str(lay["gpus"]), rng(lay.get(f"ttft_ms_{pct}"), ",.0f"),
                  rng(lay.get(f"tpot_ms_{pct}"), ",.1f"), rng(lay.get(f"kv_transfer_ms_{pct}"), ",.2f"), busy,
                  "yes" if lay["meets_slo"] else "no" + (" (saturated)" if lay["saturated_runs"] else ""))
    out = SafeConsole()
    out.print(t)
    out.print("figures: mean [min–max] over the seeds (the simulation's spread, not the performance model's error)",
              highlight=False, markup=False)
    out.print(result["verdict"]["statement"], highlight=False, markup=False)
