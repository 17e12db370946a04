"""The soak section: a simulated production run per configuration, in windows, with alerts and an error budget.

:func:`run_soaks` simulates ``soak.rate_per_s`` Poisson traffic of one profile for
``soak.duration_s`` on each configuration, sized as capacity planning says: ``replicas: auto``
gives each configuration ``max(1, ceil(rate / (capacity x (1 - headroom))))`` replicas, capacity
being the cell's SLO capacity (else saturation) in requests/s. The fleet runs on the simulator's
fleet path (:mod:`infermeter.measure.fleet`): the gateway routes with ``soak.router``
(``round-robin`` or ``session``), the replicas are split over ``soak.workers`` processes (``auto``:
every core; or Ray actors with ``soak.ray``), and progress lines carry an ETA from the first
seconds. Requests still in flight ``grace_s`` after the end are cancelled and count as failed
(``cancelled``) in their window. Each run is cut into windows (``window_s``, hourly by default)
by :func:`soak_windows`, reading ``requests.parquet`` in batches (memory does not grow with the
run)::

    soaks = run_soaks(study, cells, out_dir / "soak")
    soaks[0].windows[5]["ttft_ms"]["p99"], soaks[0].budget["consumed"], soaks[0].alerts

Per window (requests belong to the window they were sent in): requests sent, completed and failed,
requests/s and output tokens/s (completed requests' tokens / window length), TTFT / TPOT / E2E
percentiles (log buckets, within 0.5 %), errors by class, SLO misses (a completed request over a
latency limit, per request), burn rate = (bad / sent) / (1 - objective). With ``timeout_s`` a
request whose E2E from its intended send passes it counts as a client ``timeout`` error.
Error budget: ``allowed = (1 - objective) x requests``; ``bad = failed + SLO misses``; the
budget is exhausted in the first window where cumulative bad passes allowed-so-far's total.
Alerts (:func:`infermeter.analysis.alerts.evaluate_alerts`): the study's rules, else one per SLO
limit at the SLO percentile plus ``error_rate > 1 - objective``.

A soak **holds** when its bad requests stay within the budget and no window misses the study's SLO
at its percentile (:func:`held`, :func:`slo_misses`). One that fails is
followed by probes (:func:`probe_holding_rate`): a fleet of at most 4 replicas of the same
configuration and router, at most ``soak.probes`` runs of ``min(duration, 1 h)``, bisecting the
per-replica rate at which the budget holds (from half the soak's per-replica rate; within 10 %),
so the decision card can say by how much the capacity it was sized from must shrink.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from infermeter.analysis.alerts import evaluate_alerts, parse_alert
from infermeter.analysis.capacity import replicas_needed
from infermeter.analysis.metrics import col
from infermeter.analysis.results import Summary
from infermeter.analysis.sketch import LogHistogram
from infermeter.perfmodel.configspec import parse_config
from infermeter.records import store
from infermeter.study.capstatus import capacity_status
from infermeter.study.cells import CellResult
from infermeter.study.config import Configuration, Slo, StudyConfig

_COLUMNS = ["phase", "intended_at", "sent_at", "first_token_at", "ended_at", "outcome", "error_class",
            "completion_tokens"]


@dataclass
class SoakResult:
    config: str
    hardware: str  # the simulated fleet, e.g. 3xh100-sxm:tp1
    replicas: int
    replicas_basis: str
    profile: str
    rate_per_s: float
    duration_s: float
    window_s: float
    run_dir: str
    summary: dict[str, Any]
    windows: list[dict[str, Any]]
    budget: dict[str, Any]
    alerts: list[dict[str, Any]]
    source: str = "simulated"
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    router: str = "round-robin"
    workers: int = 1
    probes: list[dict[str, Any]] = field(default_factory=list)  # after a failed soak: probe_holding_rate's runs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Window:
    __slots__ = ("sent", "ok", "failed", "out_tokens", "slo_miss", "errors", "ttft", "tpot", "e2e")

    def __init__(self) -> None:
        self.sent = self.ok = self.failed = self.slo_miss = 0
        self.out_tokens = 0.0
        self.errors: dict[str, int] = {}
        self.ttft, self.tpot, self.e2e = LogHistogram(), LogHistogram(), LogHistogram()


def soak_windows(path: Path, window_s: float, duration_s: float, slo: Slo, objective: float,
                 timeout_s: float | None = None, batch_rows: int = 262_144) -> list[dict[str, Any]]:
    """Per-window figures of a run's records (see the module docstring)."""
    n_win = max(1, math.ceil(duration_s / window_s - 1e-9))
    wins = [_Window() for _ in range(n_win)]
    with pq.ParquetFile(path) as f:
        for batch in f.iter_batches(columns=[c for c in _COLUMNS if c in f.schema_arrow.names], batch_size=batch_rows):
            _add_batch(batch, wins, window_s, slo, timeout_s)
    out = []
    for i, w in enumerate(wins):
        done = w.ok + w.failed
        bad = w.failed + w.slo_miss
        out.append({
            "index": i, "window_s": window_s, "start_s": i * window_s, "end_s": min((i + 1) * window_s, duration_s),
            "sent": w.sent, "completed": w.ok, "failed": w.failed, "slo_misses": w.slo_miss, "bad": bad,
            "request_throughput": w.ok / window_s, "output_token_throughput": w.out_tokens / window_s,
            "error_rate": w.failed / done if done else None, "errors": dict(sorted(w.errors.items())),
            "burn_rate": (bad / w.sent) / (1 - objective) if w.sent else None,
            "ttft_ms": w.ttft.distribution(1000.0), "tpot_ms": w.tpot.distribution(1000.0),
            "e2e_ms": w.e2e.distribution(1000.0),
        })
    return out


def _add_batch(batch: Any, wins: list[_Window], window_s: float, slo: Slo, timeout_s: float | None) -> None:
    import pyarrow as pa

    t = pa.Table.from_batches([batch])
    phase = np.asarray(t.column("phase").to_numpy(zero_copy_only=False), dtype=object) if "phase" in t.column_names \
        else np.full(t.num_rows, "measure", dtype=object)
    keep = phase == "measure"
    intended, first, ended = col(t, "intended_at")[keep], col(t, "first_token_at")[keep], col(t, "ended_at")[keep]
    sent = col(t, "sent_at")[keep]
    n_out = col(t, "completion_tokens")[keep]
    outcome = np.asarray(t.column("outcome").to_numpy(zero_copy_only=False), dtype=object)[keep]
    eclass = np.asarray(t.column("error_class").to_numpy(zero_copy_only=False), dtype=object)[keep]
    ok = outcome == "ok"
    gave_up = outcome == "cancelled"  # still in flight when the run ended: a failure for its client
    eclass = np.where(gave_up, "cancelled", eclass)
    outcome = np.where(gave_up, "error", outcome)
    e2e_i = ended - intended
    if timeout_s is not None:
        late = ok & (e2e_i > timeout_s)
        ok = ok & ~late
        eclass = np.where(late, "timeout", eclass)
        outcome = np.where(late, "error", outcome)
    failed = outcome == "error"
    ttft_i = first - intended
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out >= 2, (ended - first) / (n_out - 1), np.nan)
    miss = np.zeros(ok.size, dtype=bool)
    for key, limit in slo.limits.items():
        v = {"ttft_ms": ttft_i, "tpot_ms": tpot, "e2e_ms": e2e_i}[key] * 1000.0
        miss |= v > limit
    miss &= ok
    idx = np.clip(np.floor(intended / window_s).astype(np.int64), 0, len(wins) - 1)
    for i in np.unique(idx):
        sel = idx == i
        w = wins[int(i)]
        oks = sel & ok
        w.sent += int(sel.sum())
        w.ok += int(oks.sum())
        w.failed += int((sel & failed).sum())
        w.slo_miss += int((sel & miss).sum())
        w.out_tokens += float(np.nansum(n_out[oks]))
        for cls in eclass[sel & failed]:
            w.errors[str(cls)] = w.errors.get(str(cls), 0) + 1
        w.ttft.add(ttft_i[oks])
        w.tpot.add(tpot[oks])
        w.e2e.add((ended - sent)[oks])


def error_budget(windows: list[dict[str, Any]], objective: float) -> dict[str, Any]:
    total = sum(w["sent"] for w in windows)
    bad = sum(w["bad"] for w in windows)
    allowed = (1 - objective) * total
    exhausted = None
    running = 0
    for w in windows:
        running += w["bad"]
        if running > allowed:
            exhausted = w["end_s"]
            break
    return {"objective": objective, "requests": total, "allowed_bad": allowed, "bad": bad,
            "failed": sum(w["failed"] for w in windows), "slo_misses": sum(w["slo_misses"] for w in windows),
            "consumed": bad / allowed if allowed > 0 else None, "exhausted_at_s": exhausted}


def default_alerts(slo: Slo, objective: float) -> list[str]:
    rules = [f"{k.removesuffix('_ms')}_{slo.percentile}_ms>{v:g}" for k, v in slo.limits.items()]
    return rules + [f"error_rate>{1 - objective:g}"]


def soak_fleet(conf: Configuration, cell: CellResult | None, rate: float, replicas: int | str,
               headroom: float) -> tuple[str, int, str]:
    """(fleet configuration label, replicas, why that many)."""
    hw = parse_config(conf.config)
    if replicas == "auto":
        ranked = cell is not None and cell.capacity is not None and capacity_status(cell).ranked
        block = (cell.capacity if ranked else cell.saturation) if cell else None
        cap = (block or {}).get("requests_per_s")
        if cap and cap > 0:
            n = replicas_needed(rate * 86400.0, cap, 1.0, headroom)
            basis = "SLO capacity" if ranked else "saturation"
            why = f"{rate:g} req/s over {cap:.3g} req/s per replica ({basis}) at {headroom:.0%} headroom"
        else:
            n, why = 1, "no capacity figure for this configuration: one replica"
    else:
        n, why = int(replicas), "set in the study file"
    fleet = parse_config(f"{hw.count * n}x{hw.hardware}:tp{hw.tp},pp{hw.pp}")
    return fleet.label, n, why


def _simulate(study: StudyConfig, conf: Configuration, fleet: str, rate: float, duration_s: float, run_dir: Path,
              profile: str, n: int, say: Callable[[str], None], router: str | None = None) -> tuple[Any, list[dict[str, Any]], dict[str, Any],
                                                                         list[dict[str, Any]], int]:
    """One simulated fleet run: (run result, windows, error budget, alerts, workers)."""
    from infermeter.measure import RunConfig
    from infermeter.measure.simplan import SimPlan

    soak = study.soak
    assert soak is not None
    rules = [parse_alert(a) for a in (soak.alerts or default_alerts(study.slo, soak.objective))]
    sim = study.sim_for(conf)
    workers = soak_workers(soak.workers, n, soak.ray)
    cfg = RunConfig(model=study.model, rate=rate, duration_s=duration_s, seed=study.seed,
                    profile=profile, slo=study.slo.limits, out=str(run_dir), label=f"soak {conf.label}",
                    profile_overrides=study.profile_overrides.get(profile) or {}, workers=workers, ray=soak.ray)
    spec = sim.spec(study.model, fleet).model_copy(update={"router": router or soak.router})
    plan = SimPlan(cfg, spec, token_times="off")
    res = plan.run(progress=plan.eta(say))
    windows = soak_windows(run_dir / store.PARQUET, min(soak.window_s, duration_s), duration_s, study.slo,
                           soak.objective, soak.timeout_s)
    whole = Summary.from_json(res.summary)
    return res, windows, error_budget(windows, soak.objective), evaluate_alerts(rules, whole, windows), \
        int(res.run["runtime"].get("workers") or 1)


def held(budget: dict[str, Any], misses: list[str] | None = None) -> bool:
    """Whether a run held: its bad requests (failed + SLO misses) within the error budget, (1 - objective) x
    requests, and (when given) no window missing the SLO at its percentile (:func:`slo_misses`)."""
    return bool(budget["requests"]) and budget["bad"] <= budget["allowed_bad"] and not misses


def slo_misses(windows: list[dict[str, Any]], slo: Slo) -> list[str]:
    """The windows that missed the study's SLO as the load steps judge it — each latency limit at the SLO's
    percentile, the error rate within ``max_error_rate`` — as ``"0–10 min: ttft_ms p95 1,450 > 500"`` (windows
    with too few requests for the percentile are not judged)."""
    out = []
    for w in windows:
        why = []
        for k, lim in slo.limits.items():
            v = (w.get(k) or {}).get(slo.percentile)
            if v is not None and v > lim:
                why.append(f"{k} {slo.percentile} {v:,.0f} > {lim:g}")
        if (w.get("error_rate") or 0.0) > slo.max_error_rate:
            why.append(f"error rate {w['error_rate']:.2%} > {slo.max_error_rate:.2%}")
        if why:
            out.append(f"{window_label(w)}: " + "; ".join(why))
    return out


PROBE_REPLICAS = 4
PROBE_MAX_S = 3600.0
PROBE_TOLERANCE = 0.1


def probe_holding_rate(study: StudyConfig, conf: Configuration, s: SoakResult, soak_dir: Path,
                       say: Callable[[str], None]) -> list[dict[str, Any]]:
    """After a failed soak: probe runs of a fleet of a few replicas (at most :data:`PROBE_REPLICAS`), for
    ``min(duration, 1 h)`` each, at most ``soak.probes`` runs. With the round-robin router the first probe is the
    counterfactual: the soak's per-replica rate with session routing (every turn of a conversation on one replica,
    so its history stays in that replica's prefix cache); when that holds, the router broke the soak and the probes
    stop. Otherwise they bisect (with whichever router did better) the per-replica rate at which it holds, from half the soak's
    per-replica rate, until the bracket is within 10 %."""
    soak = study.soak
    assert soak is not None
    hw = parse_config(conf.config)
    m = min(s.replicas, PROBE_REPLICAS)
    fleet = parse_config(f"{hw.count * m}x{hw.hardware}:tp{hw.tp},pp{hw.pp}").label
    duration = min(soak.duration_s, PROBE_MAX_S)
    lo, hi = 0.0, s.rate_per_s / s.replicas  # per replica: hi failed (the soak itself)
    out: list[dict[str, Any]] = []

    def probe(i: int, x: float, router: str) -> dict[str, Any]:
        run_dir = soak_dir / f"probe-{i + 1}"
        say(f"    probe {i + 1}: {m} replica(s) at {x:.3g} req/s each, router {router}, for {duration / 3600:g} h "
            "(simulated)")
        res, windows, budget, alerts, _ = _simulate(study, conf, fleet, x * m, duration, run_dir, s.profile, m,
                                                    lambda _line: None, router)
        misses = slo_misses(windows, study.slo)
        ok = held(budget, misses)
        sm = res.summary.get("server_metrics") if isinstance(res.summary.get("server_metrics"), dict) else {}
        say(f"    -> {'held' if ok else 'failed'}: {budget['bad']:,} of {budget['requests']:,} bad")
        return {"per_replica_rps": x, "replicas": m, "rate_per_s": x * m, "duration_s": duration, "held": ok,
                "router": router, "prefix_cache_hit_rate": (sm or {}).get("prefix_cache_hit_rate"),
                "requests": budget["requests"], "bad": budget["bad"], "consumed": budget["consumed"],
                "ttft_ms_p99": (res.summary.get("ttft_ms") or {}).get("p99"), "alerts": len(alerts),
                "windows_missing_slo": len(misses), "windows": len(windows),
                "mean_input_tokens": res.summary.get("mean_input_tokens"),
                "run_dir": str(run_dir)}

    k, router = 0, soak.router
    if soak.router == "round-robin" and m > 1:  # the counterfactual first: the same rate with each session kept whole
        out.append(probe(k, hi, "session"))
        k += 1
        if out[-1]["held"]:
            return out
        s_bad = out[-1]["bad"] / max(1, out[-1]["requests"])
        if s_bad < s.budget["bad"] / max(1, s.budget["requests"]):
            router = "session"  # it did better: bisect with it
    for i in range(k, soak.probes):
        x = (lo + hi) / 2 if lo > 0 else hi / 2
        out.append(probe(i, x, router))
        if out[-1]["held"]:
            lo = x
        else:
            hi = x
        if lo > 0 and hi / lo - 1 <= PROBE_TOLERANCE:
            break
    return out


def run_soaks(study: StudyConfig, cells: list[CellResult], soak_dir: Path,
              progress: Callable[[str], None] | None = None) -> list[SoakResult]:
    """One simulated soak per configuration (see the module docstring); a soak that fails its objective is
    followed by :func:`probe_holding_rate`."""
    soak = study.soak
    assert soak is not None
    say = progress or (lambda _line: None)
    profile = soak.profile or study.profiles[0]
    out = []
    for conf in study.configurations:
        if soak.configurations and conf.label not in soak.configurations:
            continue
        cell = next((c for c in cells if c.config == conf.label and c.profile == profile), None)
        fleet, n, why = soak_fleet(conf, cell, soak.rate_per_s, soak.replicas, study.volume.headroom)
        from infermeter.study.runner import slug

        run_dir = soak_dir / slug(conf.label)
        say(f"soak {conf.label}: {n} replica(s) ({fleet}), {soak.rate_per_s:g} req/s {profile} for "
            f"{soak.duration_s / 3600:g} h (simulated)")
        if n > 1:
            say(f"    router {soak.router}; " + (f"Ray actors ({soak.ray})" if soak.ray else
                                                 f"{soak_workers(soak.workers, n, soak.ray)} worker process(es)"))
        res, windows, budget, alerts, workers = _simulate(study, conf, fleet, soak.rate_per_s, soak.duration_s,
                                                          run_dir, profile, n, say)
        result = SoakResult(conf.label, fleet, n, why, profile, soak.rate_per_s, soak.duration_s, soak.window_s,
                            str(run_dir), _brief(Summary.from_json(res.summary)), windows, budget, alerts, wall_s=res.wall_s,
                            router=soak.router, workers=workers)
        say(f"    -> {res.records:,} requests in {res.wall_s:.1f} s; budget consumed "
            f"{(budget['consumed'] or 0):.1%}; {len(alerts)} alert(s)")
        if not held(budget, slo_misses(windows, study.slo)) and soak.probes:
            say(f"    the soak failed its {soak.objective:.3%} objective: probing the rate at which it holds")
            result.probes = probe_holding_rate(study, conf, result, soak_dir / (slug(conf.label) + "-probes"), say)
        out.append(result)
    return out


def soak_workers(workers: int | str, replicas: int, ray: str | None) -> int:
    """Processes a soak's fleet is split over: ``auto`` = every core, never more than its replicas
    (with Ray, ``auto`` = one actor per CPU of the cluster)."""
    import os

    if workers == "auto":
        return 1 if ray else max(1, min(os.cpu_count() or 1, replicas))
    return max(1, min(int(workers), replicas)) if not ray else int(workers)


def _brief(s: Summary) -> dict[str, Any]:
    """The figures of a soak's summary its result keeps, as summary.json holds them."""
    keys = ("completed", "failed", "duration_s", "request_throughput", "output_token_throughput", "error_rate",
            "errors", "summary_method", "server_metrics", "mean_input_tokens", "mean_output_tokens")
    j = s.to_json()
    return {**{k: j.get(k) for k in keys}, **{f"{d}_ms": j.get(f"{d}_ms") for d in ("ttft", "tpot", "e2e")}}


def window_label(w: dict[str, Any]) -> str:
    """``"5–6 h"``: a window's row name in its soak table (unit from the window's length)."""
    length = w.get("window_s") or (w["end_s"] - w["start_s"])
    div, unit = (3600.0, "h") if length >= 3600 else (60.0, "min") if length >= 60 else (1.0, "s")
    return f"{w['start_s'] / div:g}–{w['end_s'] / div:g} {unit}"


def windows_key(config: str) -> str:
    """The table key of a configuration's soak windows."""
    import re

    return "soak_" + re.sub(r"[^A-Za-z0-9]+", "_", config).strip("_")
