"""``simulate --fleet FILE`` and ``plan --fleet FILE``: multi-model fleets in the twin, per-model results, pool sizing.

:class:`FleetPlan` turns a fleet file (:mod:`infermeter.twin.fleetfile`) and the usual workload and
load flags into one event loop over every pool's engines (each pool its own model, hardware and
step times), fed by a :class:`~infermeter.twin.fleetroute.FleetSource` (arrivals, routing, cascade,
autoscaling). It writes the files every simulated run writes, and adds to ``summary.json``::

    models: {model_id: {ttft_ms, tpot_ms, e2e_ms, slo_attainment, goodput, utilisation, gpu_hours, cost_usd, ...}}
    pools:  {pool: {model, gpu, replicas, utilisation, kv_cache_usage_mean, gpu_hours, cost_usd,
                    autoscale: {scale_ups, mean_ready, ...}, ...the same figures for the pool}}
    cascade: {escalated, end_to_end_ms}          # routing: cascade only

Each request is judged by its pool's SLO (``slo_attainment`` = requests that met it / requests
sent to the pool); a model's attainment sums its pools'. Utilisation = the pool's busy
engine-seconds / its provisioned engine-seconds (ready, loading and draining replicas; a loading
replica is paid for and idle). GPU-hours = provisioned replica-seconds x GPUs per replica / 3600;
cost = the configuration's hourly price (``price_per_gpu_hour`` in the file, else the price
catalog's cheapest offer) x provisioned replica-hours.

:func:`plan_fleet` sizes each pool alone: the fewest replicas whose simulated SLO attainment
reaches the pool's ``slo_attainment`` target under its share of the traffic (a cascade's target
pool also gets ``escalation`` x its source's rate as Poisson arrivals). The pools' costs rise with
their replicas and do not depend on each other under by-model routing, so the sum of the
cheapest passing counts is the least total cost.

Limits (docs/fleet.md): one workload for all pools; every pool's API server has the first pool's
front-end delay; a shared GPU (``gpu_memory_utilization`` < 1 on two pools) splits memory, not
compute; pools with pipeline parallelism need the same ``pp``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from infermeter.analysis.accumulator import EXACT_LIMIT, Accumulator, exact_distribution
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig
from infermeter.measure.feeder import local_stream, workload_specs
from infermeter.measure.simplan import SimPlan
from infermeter.measure.simulate import WINDOW, SimulationResult, engine_stats, finish_run, gc_paused, open_writer
from infermeter.measure.recorder import WindowSink
from infermeter.records import store
from infermeter.records.outputs import claim_run_dir
from infermeter.twin.deploy import Twin
from infermeter.twin.fleetfile import FleetFile, Pool, Traffic
from infermeter.twin.fleetroute import FleetSource, expected_rate, replica_seconds
from infermeter.twin.loop import EventLoop, VirtualClock
from infermeter.twin.router import Router
from infermeter.twin.spec import TwinSpec

FIGURES = ("scheduled", "completed", "failed", "request_throughput", "output_token_throughput", "ttft_ms", "tpot_ms",
           "e2e_ms", "slo", "slo_attainment", "goodput")


def pool_twin(pool: Pool, where: str, i: int) -> Twin:
    try:
        twin = TwinSpec(model=pool.model, gpu=pool.gpu, dtype=pool.dtype, max_num_seqs=pool.max_num_seqs,
                        gpu_memory_utilization=pool.gpu_memory_utilization).twin()
    except ConfigError as exc:
        raise ConfigError(f"{where}: pools[{i}] ({pool.label}): {exc}") from None
    if twin.replicas != 1:
        raise ConfigError(f"{where}: pools[{i}].gpu: {pool.gpu!r} holds {twin.replicas} replicas; give one "
                          f"replica's configuration and replicas: N")
    return twin


def price_per_hour(pool: Pool, twin: Twin) -> float | None:
    """USD per hour of one replica of ``pool`` (the file's price per GPU-hour, else the catalog's cheapest offer)."""
    from infermeter.perfmodel.configspec import parse_config

    cfg = parse_config(twin.hardware or pool.gpu)
    if pool.price_per_gpu_hour is not None:
        return pool.price_per_gpu_hour * cfg.count
    try:
        from infermeter.analysis.prices import load_catalog

        return load_catalog().choose(cfg).usd_per_hour
    except ConfigError:
        return None


class FleetPlan:
    """A fleet file and a RunConfig's workload and load flags -> one simulation (module docstring)."""

    def __init__(self, cfg: RunConfig, fleet: FleetFile, *, where: str = "fleet file", token_times: str = "off") -> None:
        self.fleet = fleet
        self.where = where
        given = [flag for flag, on in (
            ("--workers", cfg.workers > 1), ("--ray", cfg.ray), ("--checkpoint", cfg.checkpoint_s),
            ("--concurrency", cfg.concurrency), ("--max-concurrency", cfg.max_concurrency), ("--load", cfg.load),
            ("--ramp-up-strategy", cfg.ramp_up_strategy)) if on]
        if given:
            raise ConfigError(f"--fleet: {', '.join(given)} cannot apply (a fleet runs in one process, open loop, "
                              "its arrivals from the file's rates or --rate); drop it")
        self.twins = [pool_twin(p, where, i) for i, p in enumerate(fleet.pools)]
        pps = {t.pp for t in self.twins}
        if len(pps) > 1:
            raise ConfigError(f"{where}: pools with different pipeline depths ({sorted(pps)}) cannot share one fleet")
        self.duration_s = cfg.duration_s
        if self.duration_s is None:
            ends = [p.profile[-1][0] for p in fleet.pools if p.profile] + (
                [fleet.traffic.profile[-1][0]] if fleet.traffic is not None and fleet.traffic.profile else [])
            if ends and cfg.requests is None:
                self.duration_s = max(ends)
        if self.duration_s is None and cfg.requests is None:
            raise ConfigError("--fleet: give --duration or --requests (or a profile in the file, whose last point ends it)")
        self.rate = cfg.rate
        needs_rate = any(s > 0 for s in fleet.shares()) and not (
            fleet.traffic is not None and (fleet.traffic.rate is not None or fleet.traffic.profile is not None))
        if needs_rate and self.rate is None:
            raise ConfigError(f"{where}: pools with a share need the fleet's arrivals: traffic: {{rate: R}} in the "
                              "file, or --rate")
        rates = expected_rate(fleet, rate=self.rate, duration_s=self.duration_s or 3600.0)
        first = fleet.pools[0]
        self.cfg = cfg.model_copy(update={"rate": sum(rates) or 1.0, "model": first.model,
                                          "duration_s": self.duration_s})
        self.plan = SimPlan(self.cfg, TwinSpec(model=first.model, gpu=first.gpu), token_times=token_times,
                            twin=self.twins[0])
        self.offsets = [0]
        for p in fleet.pools[:-1]:
            self.offsets.append(self.offsets[-1] + p.max_replicas)

    def describe(self) -> str:
        parts = []
        for p, t in zip(self.fleet.pools, self.twins):
            n = f"{p.autoscale.min}-{p.autoscale.max} (autoscaled)" if p.autoscale else str(p.initial_replicas)
            parts.append(f"{p.label}: {t.model} on {n} x {t.hardware}")
        return "; ".join(parts) + f"; routing {self.fleet.routing}"

    def run(self, progress: Callable[[float, int], None] | None = None, *, out: Path | None = None) -> SimulationResult:
        """Simulate and write the run directory (``out``, else --out, else a fresh default folder)."""
        dest, label = self.plan.out_dir()
        label = self.cfg.label or "fleet-" + "-".join(p.label for p in self.fleet.pools)
        if out is None and not self.cfg.out:
            from infermeter.measure.header import default_out_dir

            dest = default_out_dir(label)
        if out is not None:
            dest = out
        with claim_run_dir(dest, files=(store.SUMMARY,), fresh=out is None and not self.cfg.out) as claimed:
            return self._run(claimed, label, progress)

    def _run(self, out: Path, label: str, progress: Callable[[float, int], None] | None) -> SimulationResult:
        t0 = time.perf_counter()
        fleet, plan, cfg = self.fleet, self.plan, self.cfg
        tt = plan.token_times
        engines = []
        for p, twin in zip(fleet.pools, self.twins):
            engines.extend(twin.engines(keep_token_times=tt, replicas=p.max_replicas))
        n_rep = sum(p.max_replicas for p in fleet.pools)
        pp = self.twins[0].pp
        loop = EventLoop(engines, lanes=pp, router=Router("round-robin", n_rep), frontend=self.twins[0].frontend,
                         known_arrivals=False)
        content = local_stream(None, workload_specs(plan.workload, plan.keys), seed=cfg.seed, keys=plan.keys,
                               chars_per_block=plan.calibrate(), block_size=self.twins[0].block_size)
        source = FleetSource(fleet, content, offsets=self.offsets, seed=cfg.seed, rate=self.rate,
                             duration_s=self.duration_s,
                             requests=None if cfg.requests is None else cfg.requests + cfg.warmup)
        run = plan.run_header(label)
        run["model"] = ",".join(dict.fromkeys(p.model for p in fleet.pools))
        run["hardware"] = ",".join(dict.fromkeys(t.hardware or p.gpu for p, t in zip(fleet.pools, self.twins)))
        run["fleet"] = {"file": self.where, **fleet.model_dump(mode="json", by_alias=True, exclude_none=True)}
        run["target"] = {**(run.get("target") or {}), "emulated": {
            "backend": "twin", "fleet": {p.label: t.describe() for p, t in zip(fleet.pools, self.twins)}}}
        writer = open_writer(out, run, tt, EXACT_LIMIT)
        sink = WindowSink(warmup=cfg.warmup, token_times=tt)
        split = _Split(fleet, source, run, tt)
        clock = VirtualClock()
        seen = 0
        try:
            with gc_paused():
                for _, t in loop.run(source, sink.add, clock, cancel_at=plan.cancel_at, window=WINDOW,
                                     timeouts=plan.timeouts):
                    table = sink.window()
                    if table is not None:
                        seen += table.num_rows
                        writer.add(table)
                        split.add(table)
                    if progress is not None:
                        progress(min(t, clock.now), seen)
        finally:
            source.close()
        stats = [engine_stats(e) for e in engines]
        res = finish_run(out, run, writer, stats, [e.waiting_series.state() for e in engines], loop.stats, t0,
                         runtime={"fleet_pools": len(fleet.pools)})
        end = loop.stats.end
        extra = split.results(stats, pp, self.offsets, self.twins, end)
        res.summary.update(extra)
        store.write_json(out / store.SUMMARY, res.summary)
        return res


class _Split:
    """Window tables -> one accumulator per pool (its SLO) and per model; a cascade's end-to-end times."""

    def __init__(self, fleet: FleetFile, source: FleetSource, run: dict[str, Any], token_times: bool) -> None:
        self.fleet, self.source, self.run = fleet, source, run
        plain = {k: v for k, v in run.items() if k not in ("slo", "server_metrics")}
        self.plain = plain
        self.pool_acc = [Accumulator.for_run(plain, slo=p.slo or None, derive_itl=not token_times)
                         for p in fleet.pools]
        self.models = list(dict.fromkeys(p.model for p in fleet.pools))
        self.model_acc = {m: Accumulator.for_run(plain, slo=None, derive_itl=not token_times) for m in self.models}
        self.cascade_ms: list[float] = []

    def add(self, table: pa.Table) -> None:
        ids = table.column("request_id").to_numpy()
        pool_of = np.frombuffer(self.source.pool_of, dtype=np.int32) if len(self.source.pool_of) else \
            np.zeros(0, np.int32)
        pools = pool_of[ids]
        for i, p in enumerate(self.fleet.pools):
            mask = pools == i
            if not mask.any():
                continue
            part = table.filter(pa.array(mask))
            self.pool_acc[i].add(part)
            self.model_acc[p.model].add(part)
        origin = self.source.origin
        if origin:
            ended = table.column("ended_at").to_numpy(zero_copy_only=False)
            ok = np.asarray(table.column("outcome").to_pylist()) == "ok"
            for k, rid in enumerate(ids.tolist()):
                first = origin.get(rid)
                if first is not None and ok[k]:
                    self.cascade_ms.append((float(ended[k]) - first[1]) * 1e3)

    def results(self, stats: list[dict[str, Any]], pp: int, offsets: list[int], twins: list[Twin],
                end: float) -> dict[str, Any]:
        fleet, src = self.fleet, self.source
        pools: dict[str, dict[str, Any]] = {}
        per_model: dict[str, dict[str, float]] = {}
        for i, (p, twin) in enumerate(zip(fleet.pools, twins)):
            s = self.pool_acc[i].summary(self.plain).to_json()
            lanes = stats[offsets[i] * pp:(offsets[i] + p.max_replicas) * pp]
            rs = replica_seconds(src.changes[i], end)
            prov_engine_s = rs["provisioned_replica_s"] * pp
            busy = sum(float(st["busy_s"]) for st in lanes)
            usage = sum(float(st["usage_integral"]) for st in lanes)
            running = sum(float(st["running_integral"]) for st in lanes)
            gpus = _gpus(twin)
            gpu_h = rs["provisioned_replica_s"] * gpus / 3600.0
            price = price_per_hour(p, twin)
            cost = None if price is None else price * rs["provisioned_replica_s"] / 3600.0
            entry: dict[str, Any] = {
                "model": p.model, "gpu": twin.hardware, "gpus_per_replica": gpus, "replicas": p.initial_replicas,
                **{k: s.get(k) for k in FIGURES},
                "utilisation": busy / prov_engine_s if prov_engine_s > 0 else None,
                "kv_cache_usage_mean": usage / prov_engine_s if prov_engine_s > 0 else None,
                "batch_occupancy_mean": running / (prov_engine_s * twin.config.max_num_seqs) if prov_engine_s > 0
                else None,
                "gpu_hours": gpu_h, "usd_per_replica_hour": price, "cost_usd": cost,
                "good": self.pool_acc[i].good,
            }
            if p.autoscale is not None:
                a = p.autoscale
                entry["autoscale"] = {
                    "min": a.min, "max": a.max, "headroom": a.headroom, "target": a.target, "load_s": list(a.load_s),
                    "interval_s": a.interval_s, "cooldown_s": a.cooldown_s, "scale_ups": src.scale_ups[i],
                    "scale_downs": src.scale_downs[i], "mean_ready": rs["ready_replica_s"] / end if end > 0 else None,
                    "mean_provisioned": rs["provisioned_replica_s"] / end if end > 0 else None,
                    "min_ready": rs["min_ready"], "max_ready": rs["max_ready"],
                    "max_provisioned": rs["max_provisioned"],
                    "loading_replica_s": rs["provisioned_replica_s"] - rs["ready_replica_s"]}
            pools[p.label] = entry
            m = per_model.setdefault(p.model, {"good": 0.0, "scheduled": 0.0, "busy": 0.0, "prov": 0.0,
                                               "gpu_h": 0.0, "cost": 0.0, "priced": 1.0, "slo": 0.0})
            m["good"] += self.pool_acc[i].good
            m["scheduled"] += self.pool_acc[i].scheduled
            m["busy"] += busy
            m["prov"] += prov_engine_s
            m["gpu_h"] += gpu_h
            m["slo"] += 1.0 if p.slo else 0.0
            if cost is None:
                m["priced"] = 0.0
            else:
                m["cost"] += cost
        models: dict[str, Any] = {}
        for model in self.models:
            s = self.model_acc[model].summary(self.plain).to_json()
            m = per_model[model]
            names = [p.label for p in fleet.pools if p.model == model]
            slos = [p.slo for p in fleet.pools if p.model == model]
            judged = m["slo"] > 0
            duration = s.get("duration_s") or 0.0
            models[model] = {
                "pools": names, **{k: s.get(k) for k in FIGURES if k not in ("slo", "slo_attainment", "goodput")},
                "slo": slos[0] if judged and all(x == slos[0] for x in slos) else None,
                "slo_attainment": m["good"] / m["scheduled"] if judged and m["scheduled"] else None,
                "goodput": m["good"] / duration if judged and duration > 0 else None,
                "utilisation": m["busy"] / m["prov"] if m["prov"] > 0 else None,
                "gpu_hours": m["gpu_h"], "cost_usd": m["cost"] if m["priced"] else None}
        out: dict[str, Any] = {"models": models, "pools": pools}
        if fleet.cascade is not None:
            out["cascade"] = {"from": fleet.cascade.source, "to": fleet.cascade.to,
                              "escalation": fleet.cascade.escalation, "escalated": len(src.origin),
                              "end_to_end_ms": exact_distribution(self.cascade_ms).model_dump(mode="json")}
        return out


def _gpus(twin: Twin) -> int:
    from infermeter.perfmodel.configspec import parse_config

    return parse_config(twin.hardware or "h100-sxm").count


# -- sizing ------------------------------------------------------------------------------------------

def _alone(fleet: FleetFile, i: int, rate: float | None, n: int, extra_rate: float) -> FleetFile:
    """Pool ``i`` by itself with ``n`` fixed replicas and its own arrivals (its share made a rate or profile)."""
    p = fleet.pools[i]
    share = fleet.shares()[i]
    upd: dict[str, Any] = {"replicas": n, "autoscale": None, "share": None}
    if not p.own_arrivals:
        tr = fleet.traffic or Traffic(rate=rate)
        if tr.profile is not None:
            upd["profile"] = tuple((t, r * share + extra_rate) for t, r in tr.profile)
        else:
            upd["rate"] = (tr.rate or rate or 0.0) * share + extra_rate
    elif extra_rate:
        if p.rate is not None:
            upd["rate"] = p.rate + extra_rate
        else:
            upd["profile"] = tuple((t, r + extra_rate) for t, r in p.profile or ())
    alone = p.model_copy(update=upd)
    return FleetFile(pools=(alone,))


def plan_fleet(cfg: RunConfig, fleet: FleetFile, *, where: str = "fleet file", max_replicas: int = 64,
               say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Size every pool to its SLO at the least total cost (module docstring); the pools' figures and the total."""
    probe = FleetPlan(cfg, fleet, where=where)  # validates the file and the flags once
    duration = probe.duration_s
    rates = expected_rate(fleet, rate=cfg.rate, duration_s=duration or 3600.0)
    extra = [0.0] * len(fleet.pools)
    if fleet.cascade is not None:
        names = [p.label for p in fleet.pools]
        extra[names.index(fleet.cascade.to)] = fleet.cascade.escalation * rates[names.index(fleet.cascade.source)]
    out: dict[str, Any] = {"pools": {}, "duration_s": duration, "method": (
        "each pool simulated alone at its traffic; the fewest replicas whose SLO attainment reaches the pool's "
        "slo_attainment target")}
    total_cost: float | None = 0.0
    total_gpus = 0
    with tempfile.TemporaryDirectory(prefix="infermeter-fleet-plan-") as tmp:
        for i, p in enumerate(fleet.pools):
            tried: dict[int, dict[str, Any]] = {}
            if rates[i] + extra[i] <= 0:
                out["pools"][p.label] = {"model": p.model, "gpu": probe.twins[i].hardware, "rate": 0.0,
                                         "replicas": 0, "gpus": 0, "usd_per_hour": 0.0, "why": "no traffic"}
                continue

            def attempt(n: int) -> bool:
                alone = _alone(fleet, i, cfg.rate, n, extra[i])
                fp = FleetPlan(cfg.model_copy(update={"out": None}), alone, where=where)
                res = fp.run(out=Path(tmp) / f"{i}-{n}")
                pool = res.summary["pools"][p.label]
                att = pool["slo_attainment"] if p.slo else (1.0 - (pool["failed"] or 0) / max(1, pool["scheduled"]))
                tried[n] = {**pool, "attainment": att}
                if say is not None:
                    say(f"{p.label}: {n} replica(s): SLO attainment {att:.1%}, batch occupancy "
                        f"{(pool['batch_occupancy_mean'] or 0):.0%}")
                return att is not None and att >= p.slo_attainment

            lo, hi = 0, 1
            while not attempt(hi):
                lo = hi
                if hi >= max_replicas:
                    hi = 0
                    break
                hi = min(2 * hi, max_replicas)
            if hi:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if attempt(mid):
                        hi = mid
                    else:
                        lo = mid
            best = tried.get(hi) if hi else None
            entry: dict[str, Any] = {
                "model": p.model, "gpu": probe.twins[i].hardware, "rate": rates[i] + extra[i],
                "slo": p.slo, "slo_attainment_target": p.slo_attainment, "replicas": hi or None,
                "tried": {str(n): t["attainment"] for n, t in sorted(tried.items())}}
            if best is not None:
                price = best["usd_per_replica_hour"]
                entry.update({"gpus": hi * best["gpus_per_replica"], "slo_attainment": best["attainment"],
                              "utilisation": best["utilisation"], "kv_cache_usage_mean": best["kv_cache_usage_mean"],
                              "batch_occupancy_mean": best["batch_occupancy_mean"],
                              "ttft_p99_ms": (best["ttft_ms"] or {}).get("p99"),
                              "tpot_p99_ms": (best["tpot_ms"] or {}).get("p99"),
                              "usd_per_hour": None if price is None else price * hi})
                total_gpus += hi * best["gpus_per_replica"]
                if price is None or total_cost is None:
                    total_cost = None
                else:
                    total_cost += price * hi
            else:
                entry["why"] = f"no count up to {max_replicas} replicas meets the SLO"
                total_cost = None
            out["pools"][p.label] = entry
    out["total_gpus"] = total_gpus
    out["total_usd_per_hour"] = total_cost
    return out

