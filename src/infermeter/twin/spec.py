"""``TwinSpec``: which deployment the twin emulates, declared once for ``simulate``, ``emulate`` and studies.

A model on a hardware configuration with the engine's knobs, named as vLLM names them::

    >>> spec = TwinSpec(model="llama-3.1-70b", gpu="4xa100-80gb:tp4", max_num_seqs=128)
    >>> spec.hardware, spec.engine_options()["max_num_seqs"]
    ('4xa100-80gb:tp4', 128)
    >>> twin = spec.twin()                     # doctest: +SKIP  (the performance model's deployment)

``None`` knobs keep the engine's defaults (``data/calibration.yaml``). Flags are the field
names in kebab case (``--max-num-seqs``); ``--tp``/``--pp`` rewrite the configuration's
parallelism (:func:`~infermeter.twin.deploy.hardware_config`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infermeter.errors import ConfigError
from infermeter.twin.calibration import DeploymentCalibration, calibrated_twin
from infermeter.twin.deploy import Twin, build_twin, engine_defaults, hardware_config
from infermeter.twin.router import RouterName
from infermeter.twin.speculative import parse_speculative

ENGINE_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "num_gpu_blocks_override",
                "enable_prefix_caching", "enable_chunked_prefill", "block_size", "frontend_overhead_s",
                "frontend_service_s")


class TwinSpec(BaseModel):
    """The twin's deployment; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("llama-3.1-8b", description="catalog model to emulate (or a config.json path)")
    gpu: str = Field("h100-sxm", description="hardware configuration, e.g. h100-sxm or 4xa100-80gb:tp4")
    tp: int | None = Field(None, ge=1, description="tensor-parallel degree (overrides the configuration's)")
    pp: int | None = Field(None, ge=1, description="pipeline-parallel degree (overrides the configuration's)")
    dtype: str = Field("bf16", description="weight dtype: bf16, fp16, fp8, int8, int4 ...")
    kv_dtype: str | None = Field(None, description="KV-cache dtype (default: the engine's for the weight dtype)")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="fraction of GPU memory the engine may use")
    max_num_seqs: int | None = Field(
        None, ge=1, description=("most sequences per step (vLLM's option; default: what vLLM V1 picks for the device, "
                                 "1024 on >= 70 GiB GPUs but A100, else 256)"))
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description=("token budget per step (vLLM's option; default: what vLLM V1 picks for the device, "
                                 "8192 on >= 70 GiB GPUs but A100, else 2048)"))
    max_model_len: int | None = Field(None, ge=1, description="prompt + output tokens per request (vLLM's option)")
    num_gpu_blocks_override: int | None = Field(None, ge=1,
                                                description="KV blocks of --block-size tokens (replaces the capacity)")
    enable_prefix_caching: bool = Field(True, description="vLLM's prefix caching")
    enable_chunked_prefill: bool = Field(True, description="vLLM's chunked prefill")
    block_size: int | None = Field(None, ge=1, description="tokens per KV block (vLLM's option; 16, CPU backend 128)")
    frontend_overhead_s: float | None = Field(
        None, ge=0, description="seconds from send to the API server (default: the performance model's overhead)")
    frontend_service_s: float | None = Field(
        None, ge=0, description="seconds of serial work per request in the API server (default 0: none)")
    router: RouterName = Field("round-robin", description="gateway policy across replicas: round-robin | session | "
                                                          "least-outstanding (one process only)")
    served_model_name: str | None = Field(None, description="model id served by /v1/models (default: the model)")
    speculative: str | None = Field(None, description="speculative decoding METHOD:k=K,acceptance=A (METHOD: "
                                                      "ngram, eagle, mtp; or draft:MODEL,k=K,acceptance=A; A is "
                                                      "vLLM's acceptance rate, accepted / drafted tokens), e.g. "
                                                      "ngram:k=3,acceptance=0.6")
    calibration: str | None = Field(None, description="a calibration file (`infermeter calibrate`): the twin of that "
                                                      "measured deployment; model and hardware come from it")

    @property
    def hardware(self) -> str:
        """The configuration with --tp/--pp applied, e.g. ``4xa100-80gb:tp4``."""
        return hardware_config(self.gpu, self.tp, self.pp)

    @field_validator("speculative")
    @classmethod
    def _check_speculative(cls, v: str | None) -> str | None:
        if v is not None:
            parse_speculative(v)  # ConfigError: one line naming the flag
        return v

    def engine_options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ENGINE_KNOBS}

    def twin(self) -> Twin:
        """The performance model's deployment as a twin (ConfigError names a bad model, hardware or knob);
        with ``calibration``, the calibrated deployment's twin, the knobs given here on top."""
        if self.calibration is not None:
            return self._calibrated()
        return build_twin(self.model, self.hardware, dtype=self.dtype, kv_dtype=self.kv_dtype,
                          engine=engine_defaults(self.hardware, **self.engine_options()),
                          gpu_memory_utilization=self.gpu_memory_utilization,
                          served_model_name=self.served_model_name, router=self.router,
                          speculative=self.speculative)

    def _calibrated(self) -> Twin:
        assert self.calibration is not None
        cal = DeploymentCalibration.read(self.calibration)
        for name, theirs in (("model", cal.deployment.model), ("gpu", cal.deployment.hardware)):
            if name in self.model_fields_set and getattr(self, name) != theirs:
                raise ConfigError(f"--calibration {self.calibration}: it calibrates {cal.deployment.model} on "
                                  f"{cal.deployment.hardware}, not --{name} {getattr(self, name)}; drop --{name}")
        knobs = {k: v for k, v in self.engine_options().items() if k in self.model_fields_set}
        twin = calibrated_twin(cal, served_model_name=self.served_model_name, router=self.router, **knobs)
        if self.speculative is not None:
            twin = dataclasses.replace(twin, speculative=parse_speculative(self.speculative))
        return twin
