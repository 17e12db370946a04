"""Tables of a multi-model fleet: per pool (``simulate --fleet``) and the sizing (``plan --fleet``).

Figures come from ``summary.json`` ``pools`` / ``models`` and from :func:`infermeter.measure.multifleet.plan_fleet`
as they are; a missing one prints as "–"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infermeter.analysis.results import Summary
from infermeter.cli.fit import Fit, make_table

SIZING_S = 600.0  # virtual seconds each candidate pool is simulated for (plan --fleet), unless a profile is longer


def _n(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def _p99(d: Any) -> Any:
    return d.get("p99") if isinstance(d, dict) else None


def fleet_table(s: Summary) -> Fit:
    """One row per pool: model, hardware, replicas, requests, TTFT/TPOT p99, SLO attainment, utilisation, cost."""
    t = make_table("Fleet pools", [("pool", "name"), ("model", "name"), ("gpu", "name"), ("replicas", "num"),
                                   ("requests", "num"), ("TTFT p99 ms", "num"), ("TPOT p99 ms", "num"),
                                   ("SLO met", "num"), ("busy", "num"), ("batch", "num"), ("GPU-h", "num"),
                                   ("cost $", "num")])
    for name, p in (s.pools or {}).items():
        a = p.get("autoscale")
        reps = (f"{_n(a.get('mean_ready'), '.1f')} ({a['min']}-{a['max']})" if a else str(p.get("replicas")))
        t.add_row(name, str(p.get("model")), str(p.get("gpu")), reps, _n(p.get("scheduled"), ","),
                  _n(_p99(p.get("ttft_ms")), ",.0f"), _n(_p99(p.get("tpot_ms")), ",.1f"),
                  _n(p.get("slo_attainment"), ".1%"), _n(p.get("utilisation"), ".0%"),
                  _n(p.get("batch_occupancy_mean"), ".0%"), _n(p.get("gpu_hours"), ",.2f"),
                  _n(p.get("cost_usd"), ",.2f"))
    return Fit(t)


def plan_table(plan: dict[str, Any]) -> Fit:
    """One row per pool of :func:`~infermeter.measure.multifleet.plan_fleet`, and the total."""
    t = make_table("Fleet sizing (each pool to its SLO, least cost)",
                   [("pool", "name"), ("model", "name"), ("gpu", "name"), ("req/s", "num"), ("replicas", "num"),
                    ("GPUs", "num"), ("SLO met", "num"), ("busy", "num"), ("batch", "num"), ("TTFT p99 ms", "num"),
                    ("TPOT p99 ms", "num"), ("$/h", "num")])
    for name, p in plan["pools"].items():
        t.add_row(name, str(p["model"]), str(p["gpu"]), _n(p.get("rate"), ".2f"), _n(p.get("replicas"), "d"),
                  _n(p.get("gpus"), "d"), _n(p.get("slo_attainment"), ".1%"), _n(p.get("utilisation"), ".0%"),
                  _n(p.get("batch_occupancy_mean"), ".0%"),
                  _n(p.get("ttft_p99_ms"), ",.0f"), _n(p.get("tpot_p99_ms"), ",.1f"),
                  _n(p.get("usd_per_hour"), ",.2f"))
    t.add_row("total", "", "", "", "", _n(plan.get("total_gpus"), "d"), "", "", "", "", "",
              _n(plan.get("total_usd_per_hour"), ",.2f"))
    return Fit(t)


def plan_fleet_cmd(path: str, input_tokens: int, output_tokens: int, as_json: bool) -> None:
    """``plan --fleet FILE``: the file's traffic, ``SIZING_S`` of it (or its profile's length) per candidate."""
    from infermeter.measure.config import RunConfig
    from infermeter.measure.multifleet import plan_fleet
    from infermeter.terminal import SafeConsole, escape
    from infermeter.twin.fleetfile import load_fleet

    spec = load_fleet(path)
    ends = [p.profile[-1][0] for p in spec.pools if p.profile] + (
        [spec.traffic.profile[-1][0]] if spec.traffic is not None and spec.traffic.profile else [])
    cfg = RunConfig(duration_s=max([SIZING_S, *ends]), input_tokens=str(input_tokens),
                    output_tokens=str(output_tokens), history=False)
    err = SafeConsole(stderr=True)
    plan = plan_fleet(cfg, spec, where=f"fleet file {Path(path)}",
                      say=None if as_json else (lambda line: err.print(escape(line), highlight=False)))
    if as_json:
        print(json.dumps(plan, indent=2))
        return
    SafeConsole().print(plan_table(plan))
    SafeConsole().print(escape(f"method: {plan['method']}; {plan['duration_s']:,.0f} s simulated per candidate, "
                               f"{input_tokens} in / {output_tokens} out"), highlight=False)
