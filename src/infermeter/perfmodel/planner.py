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
replicas); ``kv_capacity_tokens`` is per replica (``replicas`` says how many).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infermeter.perfmodel.api import Deployment, build_deployment
from infermeter.perfmodel.configspec import HardwareConfig
from infermeter.perfmodel.serving import Estimate, at_concurrency, max_concurrency, saturation


@dataclass(frozen=True, slots=True)
class Plan:
    deployment: Deployment
    input_tokens: int
    output_tokens: int
    concurrency: int
    estimate: Estimate | None
    saturation_tokens_per_s: float | None
    saturation_batch: int | None

    @property
    def fits(self) -> bool:
        return self.deployment.fits

    def to_json(self) -> dict[str, Any]:
        d, e = self.deployment, self.estimate
        replicas = d.config.replicas
        return {
            "config": d.config.label,
            "model": d.model_name,
            "hardware": d.hardware,
            "engine": d.engine,
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
            "notes": self.notes(),
        }

    def notes(self) -> list[str]:
        d = self.deployment
        out = list(d.notes)
        if d.fits and d.kv_capacity_tokens < d.spec.max_context:
            out.append(f"the KV cache holds {d.kv_capacity_tokens:,} tokens per replica, less than the model's {d.spec.max_context:,}-token "
                       f"context: the engine must be started with a max model length <= {d.kv_capacity_tokens:,}")
        if self.estimate and self.concurrency > self.estimate.max_concurrency * d.config.replicas:
            out.append(f"concurrency {self.concurrency} exceeds the {self.estimate.max_concurrency * d.config.replicas} sequences that fit at once: "
                       "the rest queue, which the TTFT includes")
        return out


def plan(model: str, config: str | HardwareConfig, *, dtype: str = "bf16", kv_dtype: str | None = None, engine: str = "vllm",
         input_tokens: int = 1000, output_tokens: int = 200, concurrency: int = 1, gpu_memory_utilization: float = 0.9,
         hardware_file: str | None = None) -> Plan:
    from infermeter.errors import ConfigError

    for name, v in (("--input-tokens", input_tokens), ("--output-tokens", output_tokens), ("--concurrency", concurrency)):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    d = build_deployment(model, config, dtype=dtype, kv_dtype=kv_dtype, engine=engine, gpu_memory_utilization=gpu_memory_utilization,
                         max_model_len=input_tokens + output_tokens, hardware_file=hardware_file)
    if not d.fits or max_concurrency(d, input_tokens, output_tokens) < 1:
        return Plan(d, input_tokens, output_tokens, concurrency, None, None, None)
    est = at_concurrency(d, input_tokens, output_tokens, concurrency)
    sat, batch = saturation(d, input_tokens, output_tokens)
    return Plan(d, input_tokens, output_tokens, concurrency, est, sat, batch)
