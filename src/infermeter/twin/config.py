"""Engine knobs of the twin, named as vLLM names them.

    >>> EngineConfig(max_num_seqs=128).max_num_batched_tokens
    8192
    >>> EngineConfig(max_num_seqs=512, max_num_batched_tokens=256)
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for EngineConfig
    ...

Defaults are the performance model's vLLM engine defaults (``data/calibration.yaml``):
``max_num_seqs=256``, ``max_num_batched_tokens=8192``, chunked prefill and prefix
caching on, 16-token blocks (``block_size``; vLLM's CPU backend uses 128). ``num_gpu_blocks_override``
replaces the block count the performance model gives (as vLLM's option does); ``max_model_len`` caps
prompt + output tokens (default: the deployment's, clamped to what the KV cache holds).

The API server in front of each replica is a FIFO single server: a request sent at ``t``
reaches the engine at ``max(t + frontend_overhead_s, when the server is free) +
frontend_service_s`` (tokenization and HTTP work, one request at a time). With
``frontend_service_s = 0`` (the default) that is a constant delay.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EngineConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_seqs: int = Field(256, gt=0, description="most sequences in one step")
    max_num_batched_tokens: int = Field(8192, gt=0, description="token budget of one step")
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    max_model_len: int | None = Field(None, gt=0, description="prompt + output tokens per request")
    num_gpu_blocks_override: int | None = Field(None, gt=0, description="KV blocks (block_size tokens each)")
    block_size: int = Field(16, gt=0, description="tokens per KV block (vLLM: 16 on GPUs, 128 on CPUs)")
    template_tokens: int = Field(0, ge=0, description="tokens the server adds to every prompt (its chat template)")
    frontend_overhead_s: float | None = Field(
        None, ge=0, description="seconds from send to the API server (network + fixed; default: the performance "
                                "model's per-request overhead)")
    frontend_service_s: float = Field(
        0.0, ge=0, description="seconds of serial per-request work in the API server (a FIFO single server)")

    @model_validator(mode="after")
    def _check(self) -> "EngineConfig":
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs ({self.max_num_seqs})"
            )
        if (
            not self.enable_chunked_prefill
            and self.max_model_len is not None
            and self.max_num_batched_tokens < self.max_model_len
        ):
            raise ValueError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_model_len ({self.max_model_len})"
            )
        return self

    def describe(self) -> str:
        parts = [f"max_num_seqs={self.max_num_seqs}", f"max_num_batched_tokens={self.max_num_batched_tokens}"]
        if not self.enable_chunked_prefill:
            parts.append("no chunked prefill")
        if not self.enable_prefix_caching:
            parts.append("no prefix caching")
        if self.block_size != 16:
            parts.append(f"block_size={self.block_size}")
        if self.frontend_service_s:
            parts.append(f"front end {self.frontend_service_s * 1e3:g} ms/request")
        return ", ".join(parts)
