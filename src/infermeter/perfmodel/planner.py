"""One capacity plan: memory verdict plus serving estimates for a model on a configuration.

Promises: :func:`plan` returns a frozen :class:`Plan` for one configuration, whose
:meth:`Plan.to_json` has exactly the keys ``infermeter plan --json`` documents (``fits``,
``weights_gib_per_gpu``, ``kv_capacity_tokens``, ``max_concurrency``, ``ttft_ms``, ``tpot_ms``,
``output_tokens_per_s``, ``saturation_output_tokens_per_s``, ``bound``) plus context keys
(``config``, ``model``, ``why_not``, ...). Timing values are ``None`` when the model does not fit::

    >>> p = plan("llama-3.1-70b", "h100-sxm", dtype="bf16")
    >>> p.fits, p.to_json()["ttft_ms"] is None
    (False, True)

Throughputs and ``max_concurrency`` are for the whole configuration (all data-parallel
replicas); ``kv_capacity_tokens`` is per replica (``replicas`` says how many). Every predicted
timing and throughput carries an 80% interval (``intervals``: metric -> [low, high], from
:mod:`perfmodel.uncertainty`; ``interval_basis``: metric -> ``{basis: calibrated | pooled | unseen |
deployment, n: rows behind it, cell, fresh_held_out: {rows, inside} of the figure's metric group over the blind
sets, each held out in turn}``) and ``basis`` says where the intervals come from; the memory
figures are computed from the catalogs and carry none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.calibration import Calibration, load_calibration
from infermeter.perfmodel.configspec import HardwareConfig
from infermeter.perfmodel.hardware import DEFAULT_NETWORK
from infermeter.perfmodel.lengths import Lengths
from infermeter.perfmodel.serving import Estimate, at_concurrency, at_rate, max_concurrency, saturation

INTERVAL_METRICS = ("ttft_ms", "tpot_ms", "per_user_output_tokens_per_s", "output_tokens_per_s", "saturation_output_tokens_per_s")


@dataclass(frozen=True, slots=True)
class Plan:
    deployment: Deployment
    input_tokens: int
    output_tokens: int
    concurrency: int
    estimate: Estimate | None
    saturation_tokens_per_s: float | None
    saturation_batch: int | None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> 80% interval
    regimes: dict[str, str] = field(default_factory=dict)  # metric -> regime label (uncertainty.Regime)
    basis: str = ""
    interval_basis: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> {basis, n, cell} (uncertainty.basis_of)
    speculative: dict[str, Any] | None = None  # the speculative-decoding block (perfmodel.speculative), when planned with one
    lengths: str = "fixed"  # the length distribution planned (perfmodel.lengths); the token counts are its means
    rate: float | None = None  # requests a second of an open loop (serving.at_rate); None: a closed loop of `concurrency`
    requests: int | None = None  # with `rate`: a finite run of that many requests
    max_output: int | None = None  # the output cap (max_tokens) of a length distribution; None: uncapped
    lockstep_ttft_s: float | None = None  # equal lengths, several users: a benchmark's first token in lockstep cohorts

    @property
    def fits(self) -> bool:
        return self.deployment.fits

    def to_json(self) -> dict[str, Any]:
        d, e = self.deployment, self.estimate
        replicas = d.config.replicas
        out: dict[str, Any] = {
            "config": d.config.label,
            "model": d.model_name,
            "hardware": d.hardware,
            "engine": d.engine,
            **({"enforce_eager": True} if d.enforce_eager else {}),
            **({"network": d.network} if d.network else {}),
            "dtype": d.dtype,
            "kv_dtype": d.kv_dtype,
            "replicas": replicas,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "concurrency": self.concurrency,
            "fits": d.fits,
            "why_not": d.why_not or None,
            "weights_gib_per_gpu": round(d.weights_gib_per_gpu, 3),
            "kv_gib_per_gpu": round(d.memory.kv_gib_per_gpu, 3),
            "kv_bytes_per_token": d.kv_bytes_per_token,
            "kv_capacity_tokens": d.kv_capacity_tokens,
            "max_concurrency": e.max_concurrency * replicas if e else 0,
            "ttft_ms": round(e.ttft_s * 1e3, 3) if e else None,
            "tpot_ms": round(e.tpot_s * 1e3, 3) if e else None,
            "per_user_output_tokens_per_s": round(e.per_user_tokens_per_s, 2) if e else None,
            "output_tokens_per_s": round(e.output_tokens_per_s, 2) if e else None,
            "saturation_output_tokens_per_s": round(self.saturation_tokens_per_s, 2) if self.saturation_tokens_per_s else None,
            "saturation_concurrency": self.saturation_batch * replicas if self.saturation_batch else None,
            "bound": e.bound if e else None,
            "bound_shares": {k: round(v, 3) for k, v in e.shares.items()} if e else None,
            "mfu": d.mfu,
            "mbu": d.mbu,
            "intervals": {k: [_r(lo, k), _r(hi, k)] for k, (lo, hi) in self.intervals.items()},
            "regimes": dict(self.regimes),
            "interval_basis": {k: dict(v) for k, v in self.interval_basis.items()},
            "basis": self.basis or None,
            "notes": self.notes(),
            **({"speculative": self.speculative} if self.speculative else {}),
        }
        if self.lengths != "fixed":
            out["lengths"] = self.lengths
        if self.max_output is not None:
            out["max_output"] = self.max_output
        if self.rate is not None:
            out["rate"] = self.rate
            out["requests"] = self.requests
        if self.lockstep_ttft_s is not None:
            out["lockstep_ttft_ms"] = round(self.lockstep_ttft_s * 1e3, 3)
        return out

    def notes(self) -> list[str]:
        d = self.deployment
        out = list(d.notes)
        longest = self.input_tokens + (self.max_output or self.output_tokens)
        if longest > d.spec.max_context:
            out.append(f"a request of {longest:,} tokens (prompt + " + ("output cap" if self.max_output else "output")
                       + f") exceeds {d.spec.name}'s {d.spec.max_context:,}-token context window: engines refuse it unless "
                       "the model is served with a longer context (RoPE scaling, e.g. YaRN); the figures extrapolate")
        if d.fits and d.kv_capacity_tokens < d.spec.max_context:
            out.append(f"the KV cache holds {d.kv_capacity_tokens:,} tokens per replica, less than the model's {d.spec.max_context:,}-token "
                       f"context: the engine must be started with a max model length <= {d.kv_capacity_tokens:,}")
        if self.estimate and self.rate is not None:
            run = f" ({self.requests} request{'s' if self.requests != 1 else ''})" if self.requests else ""
            if self.estimate.overloaded:
                out.append(f"open loop at {self.rate:g} requests a second{run}, at or past what the configuration completes: "
                           f"{self.estimate.concurrency} run at once (where the configuration completes the most) and the rest "
                           "queue for a slot; the TTFT includes their mean wait")
            else:
                out.append(f"open loop at {self.rate:g} requests a second{run}: about {self.estimate.concurrency} in the system "
                           "at once (Little's law)")
        elif self.lockstep_ttft_s is not None and self.estimate:
            out.append(f"a benchmark that sends these equal lengths from {self.concurrency} users at once keeps them in step "
                       f"(prompts arrive in cohorts that fill the engine's token budget): its mean first token would be about "
                       f"{self.lockstep_ttft_s * 1e3:,.0f} ms, not {self.estimate.ttft_s * 1e3:,.0f} ms; the table is traffic "
                       "whose requests drift apart, as varied lengths make them (plan --validate models benchmark rows in step)")
        if self.estimate and self.rate is None and self.concurrency > self.estimate.max_concurrency * d.config.replicas:
            out.append(f"concurrency {self.concurrency} exceeds the {self.estimate.max_concurrency * d.config.replicas} sequences that fit at once: "
                       "the rest queue, which the TTFT includes")
        return out


def _r(v: float, metric: str) -> float:
    return round(v, 3) if metric.endswith("_ms") else round(v, 2)


def plan(model: str, config: str | HardwareConfig, *, dtype: str = "bf16", kv_dtype: str | None = None, engine: str = "vllm",
         input_tokens: int = 1000, output_tokens: int = 200, concurrency: int = 1, gpu_memory_utilization: float = 0.9,
         hardware_file: str | None = None, calibration: Calibration | str | None = None, speculative: str | None = None,
         lengths: str = "fixed", rate: float | None = None, requests: int | None = None, enforce_eager: bool = False,
         max_output: int | None = None, network: str = DEFAULT_NETWORK) -> Plan:
    """One configuration's plan; ``calibration`` is a table or a per-deployment calibration file (default: the shipped table).

    ``speculative`` (``METHOD:k=K,acceptance=A``, :mod:`perfmodel.speculative`) plans speculative
    decoding: TPOT and throughputs become the speculative ones, the plain ones in ``speculative``. ``lengths``
    (:mod:`perfmodel.lengths`: ``fixed``, ``uniform`` or ``sharegpt``) plans a length distribution whose means are
    ``input_tokens`` and ``output_tokens`` (the running batch's context is output-length biased). ``rate``: an open loop
    of that many requests a second instead of ``concurrency`` users (:func:`serving.at_rate`; ``requests``: a finite run
    of that many, needed past the configuration's rate, where the queue has no steady mean). ``enforce_eager``: the
    engine runs without CUDA/HIP graphs (:func:`api.build_deployment`). ``max_output``: with a length distribution, the
    cap every request carries (``max_tokens``): the outputs are the kind's law cut there, ``output_tokens`` their mean
    under the cap (:meth:`Lengths.of`); it shortens a finite run's drain and the running batch's context. ``network``:
    the network between nodes (``data/networks.yaml``) when the configuration spans more than one (:func:`api.build_deployment`).
    """
    from infermeter.errors import ConfigError
    from infermeter.perfmodel.uncertainty import basis_of, interval, regime_of, table_of

    for name, v in (("--input-tokens", input_tokens), ("--output-tokens", output_tokens), ("--concurrency", concurrency)):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    from infermeter.perfmodel.speculative import parse_spec

    spec = parse_spec(speculative) if speculative else None  # a bad spec fails before any modelling
    if max_output is not None and lengths.strip().lower() == "fixed":
        raise ConfigError(f"--max-output {max_output}: equal lengths have no tail to cap; give --lengths uniform or sharegpt")
    if max_output is not None and max_output < output_tokens:
        raise ConfigError(f"--max-output {max_output}: below --output-tokens {output_tokens}, the mean of the capped outputs")
    dist = Lengths.of(lengths, input_tokens, output_tokens, max_output)
    cal = load_calibration(calibration) if isinstance(calibration, str) else (calibration or load_calibration())
    d = build_deployment(model, config, dtype=dtype, kv_dtype=kv_dtype, engine=engine, gpu_memory_utilization=gpu_memory_utilization,
                         max_model_len=input_tokens + (output_tokens if dist.cap_o is None else int(dist.cap_o)),
                         hardware_file=hardware_file, calibration=cal,
                         enforce_eager=enforce_eager, network=network)
    if not d.fits or max_concurrency(d, input_tokens, output_tokens) < 1:
        return Plan(d, input_tokens, output_tokens, concurrency, None, None, None)
    lockstep_ttft = None
    if rate is not None:
        try:
            est = at_rate(d, input_tokens, output_tokens, rate, dist, requests=requests)
        except ValueError as exc:
            raise ConfigError(f"--rate {rate:g}: {exc}") from None
        concurrency = est.concurrency
    else:
        est = at_concurrency(d, input_tokens, output_tokens, concurrency, dist)
        if dist.fixed and concurrency > 1:  # what a benchmark of these equal lengths would show: its users stay in step
            locked = at_concurrency(d, input_tokens, output_tokens, concurrency, dist, lockstep=True).ttft_s
            lockstep_ttft = locked if locked > 1.1 * est.ttft_s else None
    sat, batch = saturation(d, input_tokens, output_tokens, dist)
    values = {"ttft_ms": est.ttft_s * 1e3, "tpot_ms": est.tpot_s * 1e3, "per_user_output_tokens_per_s": est.per_user_tokens_per_s,
              "output_tokens_per_s": est.output_tokens_per_s, "saturation_output_tokens_per_s": sat}
    table = table_of(cal)
    intervals, regimes, cells, bases = {}, {}, [], {}
    for metric in INTERVAL_METRICS:
        running = batch if metric == "saturation_output_tokens_per_s" else est.running_per_replica * d.config.replicas
        reg = regime_of(d, metric, input_tokens, output_tokens, running, est.concurrency / d.config.replicas)
        lo, hi, _ = interval(metric, values[metric], reg, table)
        intervals[metric], regimes[metric], bases[metric] = (lo, hi), reg.label, basis_of(reg, table)
        cells.append(f"{metric} in {reg.label} (cell {table.multipliers(reg)[2]})")
    block = None
    if spec is not None:
        from infermeter.perfmodel.speculative import apply_to_estimate

        est, sat, intervals, block = apply_to_estimate(d, spec, est, sat, batch, input_tokens, output_tokens, intervals)
    basis = (f"predicted; 80% intervals from {table.rows} out-of-sample errors on published measurements "
             f"({table.publications} publications; each measurement predicted by a fit without its publication, and again "
             f"without its (hardware family, engine, precision) combination), in the figure's regime: "
             + "; ".join(cells))
    return Plan(d, input_tokens, output_tokens, concurrency, est, sat, batch, intervals, regimes, basis, bases, block, dist.kind,
                rate, requests if rate is not None else None, None if dist.cap_o is None else max_output, lockstep_ttft)
