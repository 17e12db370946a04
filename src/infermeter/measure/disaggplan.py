"""``plan --disaggregate``: aggregated vs disaggregated serving of one workload, by simulating both in the twin.

Promises: :func:`compare_layout` simulates one ``prefill=...,decode=...`` layout and aggregated serving on
the same GPUs (same hardware and instance parallelism as the prefill pool); :func:`search_split` finds,
for a GPU budget, an instance size (``tp x pp`` GPUs), a Poisson rate, fixed prompt/output lengths and an
SLO (percentile bounds on TTFT and TPOT), the cheapest layout -- the fewest GPUs -- meeting the SLO,
aggregated (``n`` replicas) or disaggregated (every ``xPyD`` with ``x + y = n``), for every ``n`` up to
the budget. Every layout runs on ``seeds`` seeds (arrivals and prompt text); it *meets* the SLO when
every seed does: each bounded percentile within its bound, no more than ``max_error_rate`` of the
requests failed or unfinished, and the run not saturated. Each figure is reported as its mean and its
range (min–max) over the seeds: a spread of the simulation, not a confidence interval, and it does not
include the performance model's own error (docs/performance-model.md). The verdict states, from the
figures, which layout is cheaper and, when disaggregation loses, why (the idle pool's busy fraction).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig
from infermeter.twin.spec import TwinSpec

FIGS = ("ttft_ms", "tpot_ms")
_RUNS = itertools.count()


@dataclass
class Layout:
    """One layout's figures over the seeds."""

    name: str  # "aggregated" or "xPyD"
    gpus: int
    prefill: int = 0  # instances (0: aggregated)
    decode: int = 0
    replicas: int = 0  # aggregated
    config: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)  # per seed: figures
    meets: bool = False

    def stat(self, key: str) -> dict[str, float | None]:
        vals = [r[key] for r in self.runs if r.get(key) is not None]
        if not vals:
            return {"mean": None, "lo": None, "hi": None}
        return {"mean": sum(vals) / len(vals), "lo": min(vals), "hi": max(vals)}

    def to_json(self) -> dict[str, Any]:
        keys = sorted({k for r in self.runs for k in r if isinstance(r[k], (int, float)) and not isinstance(r[k], bool)})
        return {"layout": self.name, "config": self.config, "gpus": self.gpus, "prefill_instances": self.prefill,
                "decode_instances": self.decode, "replicas": self.replicas, "meets_slo": self.meets,
                "seeds": len(self.runs), "saturated_runs": sum(1 for r in self.runs if r.get("saturated")),
                **{k: self.stat(k) for k in keys}}


def _figures(s: Summary, pct: str) -> dict[str, Any]:
    out: dict[str, Any] = {f"{k}_{pct}": s.distribution(k)[pct] for k in FIGS}
    out["saturated"] = bool(s.saturated)
    sched = s.scheduled
    bad = s.failed + s.unfinished + s.cancelled
    out["error_rate"] = bad / sched if sched else 1.0
    out["output_token_throughput"] = s.output_token_throughput
    kv = s.kv_transfer_ms
    if kv is not None:
        out[f"kv_transfer_ms_{pct}"] = kv[pct]
    d = s.disaggregation
    if d:
        out["prefill_busy"] = d["prefill"].get("busy_fraction")
        out["decode_busy"] = d["decode"].get("busy_fraction")
        out["decode_waiting"] = d["decode"].get("num_requests_waiting_mean")
        out["prefill_waiting"] = d["prefill"].get("num_requests_waiting_mean")
    else:
        out["busy"] = (s.server_metrics or {}).get("busy_fraction")
    return out


def _pct_key(percentile: float) -> str:
    keys = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}
    if float(percentile) not in keys:
        raise ConfigError(f"--slo-percentile {percentile:g}: use 50, 90, 95, 99 or 99.9")
    return keys[float(percentile)]


@dataclass
class Workload:
    """The load every layout is simulated under."""

    model: str
    rate: float
    input_tokens: int
    output_tokens: int
    requests: int = 300
    seeds: int = 3
    slo: dict[str, float] = field(default_factory=dict)  # ttft_ms / tpot_ms bounds at ``percentile``
    percentile: float = 99.0
    max_error_rate: float = 0.01
    spec: dict[str, Any] = field(default_factory=dict)  # TwinSpec knobs (dtype, max_num_seqs, ...)

    def check(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError(f"--rate {self.rate}: plan --disaggregate needs an arrival rate > 0 (requests/s)")
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise ConfigError("--input-tokens and --output-tokens must be >= 1")
        bad = [k for k in self.slo if k not in FIGS]
        if bad:
            raise ConfigError(f"--slo {','.join(bad)}: plan --disaggregate bounds ttft_ms and tpot_ms")
        if self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: must be >= 1")
        _pct_key(self.percentile)


def _run(w: Workload, where: Path, gpu: str, disaggregate: str | None, seed: int) -> dict[str, Any]:
    from infermeter.measure.disagg import DisaggPlan
    from infermeter.measure.simplan import SimPlan

    out = where / f"run-{next(_RUNS)}"
    cfg = RunConfig(model=w.model, rate=w.rate, requests=w.requests, input_tokens=str(w.input_tokens),
                    output_tokens=str(w.output_tokens), seed=seed, out=str(out), prompt_salt=0, history=False,
                    slo={k: float(v) for k, v in w.slo.items()})
    spec = TwinSpec(model=w.model, gpu=gpu, **w.spec)
    plan = DisaggPlan(cfg, spec, disaggregate, token_times="off") if disaggregate else SimPlan(
        cfg, spec, token_times="off")
    return _figures(Summary.from_json(plan.run().summary), _pct_key(w.percentile))


def _judge(w: Workload, lay: Layout) -> None:
    pct = _pct_key(w.percentile)
    lay.meets = bool(lay.runs) and all(
        not r["saturated"] and r["error_rate"] <= w.max_error_rate
        and all(r.get(f"{k}_{pct}") is not None and r[f"{k}_{pct}"] <= b for k, b in w.slo.items())
        for r in lay.runs)


def _instance(config: str) -> tuple[str, int, int, int]:
    from infermeter.perfmodel.configspec import parse_config

    c = parse_config(config)
    return c.hardware, c.tp, c.pp, c.gpus_per_replica


def _label(hw: str, n: int, tp: int, pp: int) -> str:
    from infermeter.perfmodel.configspec import HardwareConfig

    return HardwareConfig(hw, n * tp * pp, tp, pp).label


def evaluate(w: Workload, where: Path, *, hw: str, tp: int, pp: int, prefill: int = 0, decode: int = 0,
             replicas: int = 0, extra: str = "") -> Layout:
    """One layout over the seeds (aggregated with ``replicas``, else ``prefill``P``decode``D)."""
    g = tp * pp
    if replicas:
        lay = Layout("aggregated", replicas * g, replicas=replicas, config=_label(hw, replicas, tp, pp))
        lay.runs = [_run(w, where, lay.config, None, s) for s in range(w.seeds)]
    else:
        text = f"prefill={_label(hw, prefill, tp, pp)},decode={_label(hw, decode, tp, pp)}{extra}"
        lay = Layout(f"{prefill}P{decode}D", (prefill + decode) * g, prefill=prefill, decode=decode, config=text)
        lay.runs = [_run(w, where, _label(hw, prefill, tp, pp), text, s) for s in range(w.seeds)]
    _judge(w, lay)
    return lay


def compare_layout(w: Workload, disaggregate: str) -> dict[str, Any]:
    """``disaggregate`` against aggregated serving on as many GPUs of the prefill pool's kind (module docstring)."""
    from infermeter.perfmodel.configspec import parse_config
    from infermeter.twin.disagg import parse_disaggregate

    w.check()
    ds = parse_disaggregate(disaggregate)
    pc, dc = parse_config(ds.prefill), parse_config(ds.decode)
    g = pc.gpus_per_replica
    total = pc.count + dc.count
    if total % g:
        raise ConfigError(f"--disaggregate {disaggregate}: {total} GPUs do not make whole {g}-GPU instances "
                          f"for the aggregated comparison")
    with tempfile.TemporaryDirectory(prefix="infermeter-disagg-") as tmp:
        where = Path(tmp)
        agg = evaluate(w, where, hw=pc.hardware, tp=pc.tp, pp=pc.pp, replicas=total // g)
        dis = Layout(f"{pc.replicas}P{dc.replicas}D", total, prefill=pc.replicas, decode=dc.replicas,
                     config=ds.text)
        dis.runs = [_run(w, where, ds.prefill, ds.text, s) for s in range(w.seeds)]
        _judge(w, dis)
    return {"workload": _workload_json(w), "layouts": [agg.to_json(), dis.to_json()],
            "verdict": verdict(w, [agg], [dis], same_gpus=True)}


def search_split(w: Workload, instance: str, budget_gpus: int, *, extra: str = "") -> dict[str, Any]:
    """The cheapest layout meeting the SLO within ``budget_gpus`` GPUs of ``instance`` (module docstring)."""
    w.check()
    if not w.slo:
        raise ConfigError("plan --disaggregate search needs --slo (e.g. ttft_ms=3000,tpot_ms=40)")
    hw, tp, pp, g = _instance(instance)
    n_max = budget_gpus // g
    if n_max < 1:
        raise ConfigError(f"--gpus {budget_gpus}: not one {g}-GPU instance of {instance}")
    aggs: list[Layout] = []
    diss: list[Layout] = []
    with tempfile.TemporaryDirectory(prefix="infermeter-disagg-") as tmp:
        where = Path(tmp)
        for n in range(1, n_max + 1):
            aggs.append(evaluate(w, where, hw=hw, tp=tp, pp=pp, replicas=n))
            for x in range(1, n):
                diss.append(evaluate(w, where, hw=hw, tp=tp, pp=pp, prefill=x, decode=n - x, extra=extra))
            if any(a.meets for a in aggs) and any(d.meets for d in diss):
                break  # both cheapest found: larger layouts cost more
    return {"workload": _workload_json(w), "instance": _label(hw, 1, tp, pp), "budget_gpus": budget_gpus,
            "layouts": [x.to_json() for x in sorted(aggs + diss, key=lambda x: (x.gpus, x.name != "aggregated"))],
            "verdict": verdict(w, aggs, diss, same_gpus=False)}


def _margin(w: Workload, lay: Layout) -> float:
    pct = _pct_key(w.percentile)
    return max((lay.stat(f"{k}_{pct}")["mean"] or math.inf) / b for k, b in w.slo.items()) if w.slo else 0.0


def _cheapest(w: Workload, lays: Sequence[Layout]) -> Layout | None:
    ok = [x for x in lays if x.meets]
    return min(ok, key=lambda x: (x.gpus, _margin(w, x))) if ok else None


def verdict(w: Workload, aggs: Sequence[Layout], diss: Sequence[Layout], *, same_gpus: bool) -> dict[str, Any]:
    """Which layout wins, in one plain statement computed from the figures."""
    pct = _pct_key(w.percentile)
    a, d = _cheapest(w, aggs), _cheapest(w, diss)
    out: dict[str, Any] = {"aggregated": a.name + f" on {a.gpus} GPUs" if a else None,
                           "disaggregated": d.name + f" on {d.gpus} GPUs" if d else None}
    if same_gpus:
        agg, dis = aggs[0], diss[0]
        parts = []
        for k in FIGS:
            ka, kd = agg.stat(f"{k}_{pct}"), dis.stat(f"{k}_{pct}")
            if ka["mean"] and kd["mean"] is not None:
                parts.append(f"{k.split('_')[0].upper()} {pct} {kd['mean']:,.1f} ms [{kd['lo']:,.1f}–{kd['hi']:,.1f}] "
                             f"disaggregated vs {ka['mean']:,.1f} ms [{ka['lo']:,.1f}–{ka['hi']:,.1f}] aggregated")
        out["winner"] = ("disaggregated" if dis.meets and not agg.meets else "aggregated" if agg.meets and not dis.meets
                         else "both" if agg.meets else "neither")
        out["statement"] = (f"On {agg.gpus} GPUs: " + "; ".join(parts) + f" (mean [min–max] over {w.seeds} seeds). "
                            + _why(w, dis, agg))
        return out
    if a is None and d is None:
        out["winner"] = "neither"
        out["statement"] = (f"No layout within the budget meets the SLO at {w.rate:g} req/s; raise the budget or "
                            f"lower the rate.")
    elif d is not None and (a is None or d.gpus < a.gpus):
        out["winner"] = "disaggregated"
        out["saving_gpus"] = None if a is None else a.gpus - d.gpus
        out["statement"] = (f"Disaggregation wins: {d.name} meets the SLO on {d.gpus} GPUs; aggregated serving "
                            + (f"needs {a.gpus}." if a else "does not within the budget.") + " " + _why(w, d, a))
    elif a is not None and (d is None or a.gpus < d.gpus):
        out["winner"] = "aggregated"
        out["saving_gpus"] = None if d is None else d.gpus - a.gpus
        out["statement"] = (f"Disaggregation loses here: aggregated serving ({a.replicas} replica{'s' if a.replicas > 1 else ''}) meets "
                            f"the SLO on {a.gpus} GPUs; the best split "
                            + (f"({d.name}) needs {d.gpus}." if d else "does not within the budget.")
                            + " " + _why(w, d, a))
    else:
        assert a is not None and d is not None
        out["winner"] = "tie"
        out["statement"] = (f"A tie on GPUs: both {a.name} and {d.name} meet the SLO on {a.gpus} GPUs; "
                            + _why(w, d, a))
    return out


def _why(w: Workload, d: Layout | None, a: Layout | None) -> str:
    """The reason, from the pools' busy fractions and the TPOT gap."""
    pct = _pct_key(w.percentile)
    bits = []
    if d is not None:
        pb, db = d.stat("prefill_busy")["mean"], d.stat("decode_busy")["mean"]
        if pb is not None and db is not None:
            bits.append(f"in {d.name} the prefill pool is busy {pb:.0%} and the decode pool {db:.0%} of the time")
            if pb < 0.35 or db < 0.35:
                idle = "prefill" if pb < db else "decode"
                bits.append(f"the {idle} pool is lightly used: a split loses when one phase is a small share of "
                            f"the work (short prompts for prefill, short outputs for decode), since its GPUs cannot "
                            f"help the other phase")
        for pool in ("prefill", "decode"):
            q = d.stat(f"{pool}_waiting")["mean"]
            if q is not None and q >= 0.1:
                bits.append(f"{q:.1f} requests wait on average in the {pool} pool's queue"
                            + (" (for KV room or a sequence slot)" if pool == "decode"
                               else ""))
        if a is not None:
            ta, td = a.stat(f"tpot_ms_{pct}")["mean"], d.stat(f"tpot_ms_{pct}")["mean"]
            if ta and td is not None:
                bits.append(f"TPOT {pct} {td:,.1f} ms split vs {ta:,.1f} ms aggregated ({(td - ta) / ta:+.0%}): "
                            f"{'decode steps without prefill chunks' if td < ta else 'no gain from keeping prefills out of decode steps'}")
            kx = d.stat(f"kv_transfer_ms_{pct}")["mean"]
            if kx is not None:
                bits.append(f"KV transfer {pct} {kx:,.1f} ms")
    return ("; ".join(bits)[:1].upper() + "; ".join(bits)[1:] + ".") if bits else ""


def _workload_json(w: Workload) -> dict[str, Any]:
    return {"model": w.model, "rate": w.rate, "input_tokens": w.input_tokens, "output_tokens": w.output_tokens,
            "requests": w.requests, "seeds": w.seeds, "slo": w.slo, "percentile": w.percentile,
            "max_error_rate": w.max_error_rate}


def plan_from_flags(model: str, disaggregate: str, *, gpu: str | None, gpus: int | None, tp: int | None,
                    pp: int | None, rate: float | None, slo: str | None, percentile: float, seeds: int, requests: int,
                    input_tokens: int, output_tokens: int, dtype: str = "bf16",
                    kv_dtype: str | None = None) -> dict[str, Any]:
    """``plan --disaggregate``'s flags -> :func:`search_split` (``search[,link=...,...]``) or :func:`compare_layout`."""
    from infermeter.measure.config import parse_slo

    if rate is None:
        raise ConfigError("plan --disaggregate needs --rate (requests/s): both layouts are simulated under that load")
    w = Workload(model=model, rate=rate, input_tokens=input_tokens, output_tokens=output_tokens, requests=requests,
                 seeds=seeds, slo=parse_slo(slo), percentile=percentile,
                 spec={"dtype": dtype, **({"kv_dtype": kv_dtype} if kv_dtype else {})})
    head, _, rest = disaggregate.partition(",")
    if head.strip() == "search":
        if not gpu:
            raise ConfigError("plan --disaggregate search needs --gpu (the instance: e.g. --gpu h100-sxm --tp 2) "
                              "and --gpus (the budget)")
        from infermeter.perfmodel.configspec import parse_config

        c = parse_config(gpu)
        t, p = tp or c.tp, pp or c.pp
        budget = gpus or c.count
        extra = ""
        if rest.strip():  # link=, pipelining=, route=, overhead_ms= apply to every split
            from infermeter.twin.disagg import parse_disaggregate

            ds = parse_disaggregate(f"prefill={c.hardware},decode={c.hardware},{rest}")
            extra = ds.text.split(f"decode={ds.decode}", 1)[1]
        return search_split(w, _label(c.hardware, 1, t, p), budget, extra=extra)
    if gpu or gpus or tp or pp:
        raise ConfigError("plan --disaggregate prefill=...,decode=... names its hardware; drop --gpu/--gpus/--tp/--pp")
    return compare_layout(w, disaggregate)
