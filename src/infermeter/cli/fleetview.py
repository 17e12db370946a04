"""Tables of a multi-model fleet: per pool (``simulate --fleet``) and the sizing (``plan --fleet``).

Figures come from ``summary.json`` ``pools`` / ``models`` and from :func:`infermeter.measure.multifleet.plan_fleet`
as they are; a missing one prints as "–"."""

from __future__ import annotations

from typing import Any

from infermeter.cli.fit import Fit, make_table


def _n(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def _p99(d: Any) -> Any:
    return d.get("p99") if isinstance(d, dict) else None


def fleet_table(s: dict[str, Any]) -> Fit:
    """One row per pool: model, hardware, replicas, requests, TTFT/TPOT p99, SLO attainment, utilisation, cost."""
    t = make_table("Fleet pools", [("pool", "name"), ("model", "name"), ("gpu", "name"), ("replicas", "num"),
                                   ("requests", "num"), ("TTFT p99 ms", "num"), ("TPOT p99 ms", "num"),
                                   ("SLO met", "num"), ("busy", "num"), ("batch", "num"), ("GPU-h", "num"),
                                   ("cost $", "num")])
    for name, p in (s.get("pools") or {}).items():
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
                    ("GPUs", "num"), ("SLO met", "num"), ("busy", "num"), ("TTFT p99 ms", "num"),
                    ("TPOT p99 ms", "num"), ("$/h", "num")])
    for name, p in plan["pools"].items():
        t.add_row(name, str(p["model"]), str(p["gpu"]), _n(p.get("rate"), ".2f"), _n(p.get("replicas"), "d"),
                  _n(p.get("gpus"), "d"), _n(p.get("slo_attainment"), ".1%"), _n(p.get("utilisation"), ".0%"),
                  _n(p.get("ttft_p99_ms"), ",.0f"), _n(p.get("tpot_p99_ms"), ",.1f"),
                  _n(p.get("usd_per_hour"), ",.2f"))
    t.add_row("total", "", "", "", "", _n(plan.get("total_gpus"), "d"), "", "", "", "",
              _n(plan.get("total_usd_per_hour"), ",.2f"))
    return Fit(t)
