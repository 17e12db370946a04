"""What the twin emulates: a model on hardware, as engines ready to run (offline or live).

:func:`build_twin` asks the performance model for the deployment (KV capacity,
context limit, step times) and returns a :class:`Twin` that makes engines::

    twin = build_twin("llama-3.1-8b", "h100-sxm", engine=EngineConfig(max_num_seqs=128))
    engines = twin.engines()          # one per replica x pipeline stage (see below)
    twin.describe()                   # -> run.json "target.emulated"

Parallelism: ``tp`` is inside the step time. Data-parallel replicas (``count /
(tp*pp)``) are separate engines with their own KV cache; requests go to the least
loaded. With ``pp > 1`` vLLM keeps ``pp`` micro-batches in flight; the twin runs
``pp`` engines per replica, each with ``1/pp`` of the replica's KV blocks and the
full step time (one micro-batch passes through every stage per step).

KV blocks = ``kv_capacity_tokens // block_size`` per replica (``EngineConfig.block_size``,
16 by default), unless ``num_gpu_blocks_override`` is set; ``max_model_len`` = the option,
else the deployment's (both clamped to what one engine's blocks hold). The API server in
front of each replica: ``frontend_overhead_s`` (the option, else the performance model's
per-request overhead) and ``frontend_service_s`` (see ``EngineConfig``). ``router`` names the
gateway's policy across replicas (:mod:`infermeter.twin.router`). ``speculative``
(:mod:`infermeter.twin.speculative`) makes every engine a speculative-decoding one, engine ``i``
drawing acceptances from ``random.Random(seed + i)``; ``draft:MODEL`` times the draft on the
performance model's deployment of MODEL on the same hardware.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermeter.errors import ConfigError
from infermeter.twin.config import EngineConfig
from infermeter.twin.engine import Engine
from infermeter.twin.predictor import LinearStepTime, StepTimePredictor
from infermeter.twin.router import Router
from infermeter.twin.speculative import SpecDecode, parse_speculative


@dataclass(frozen=True)
class Twin:
    """A ready-to-run emulation: step times, engine knobs, blocks per engine, engine count."""

    model: str
    served_model_name: str
    hardware: str | None  # config label, e.g. "4xa100-80gb:tp4"
    predictor: StepTimePredictor
    config: EngineConfig
    num_blocks: int  # per engine
    lanes: int  # engines: replicas x pp
    request_overhead_s: float = 0.0  # the performance model's per-request overhead (the front end's default)
    details: dict[str, Any] = field(default_factory=dict)
    pp: int = 1  # engines per replica
    router: str = "round-robin"
    speculative: SpecDecode | None = None

    @property
    def replicas(self) -> int:
        return self.lanes // self.pp

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def frontend(self) -> tuple[float, float]:
        """(overhead, service) seconds of each replica's API server (see ``EngineConfig``)."""
        o = self.config.frontend_overhead_s
        return (self.request_overhead_s if o is None else o), self.config.frontend_service_s

    def engines(self, *, keep_token_times: bool = False, max_span_steps: int = 1 << 30,
                replicas: int | None = None) -> list[Engine]:
        """Engines for all replicas (or ``replicas`` of them), ``pp`` per replica."""
        n = self.lanes if replicas is None else replicas * self.pp
        from infermeter.perfmodel.api import Deployment

        # a Deployment hands over its bare arithmetic (perfmodel.steptime: compiled in the fast build)
        step: StepTimePredictor = self.predictor.step_cost if isinstance(self.predictor, Deployment) else self.predictor
        spec = self.speculative
        if spec is not None and isinstance(spec.draft_predictor, Deployment):
            spec = spec.with_draft(spec.draft_predictor.step_cost)
        return [
            Engine(step, self.config, self.num_blocks, keep_token_times=keep_token_times,
                   max_span_steps=max_span_steps, speculative=spec, seed=(spec.seed + i) if spec else 0)
            for i in range(n)
        ]

    def make_router(self, name: str | None = None) -> Router:
        return Router(name or self.router, self.replicas)

    def describe(self) -> dict[str, Any]:
        """JSON-able facts for run.json ``target.emulated`` and ``/v1/models``."""
        bs = self.block_size
        o, s = self.frontend
        return {
            "backend": "twin",
            "model": self.model,
            "hardware": self.hardware,
            "engine": "vllm",
            **self.config.model_dump(mode="json"),
            "num_gpu_blocks": self.num_blocks * self.lanes,
            "block_size": bs,
            "engines": self.lanes,
            "max_model_len": min(self.config.max_model_len or self.num_blocks * bs, self.num_blocks * bs),
            "frontend_overhead_s": o,
            "frontend_service_s": s,
            "router": self.router,
            **({"speculative": self.speculative.describe()} if self.speculative is not None else {}),
            **self.details,
        }


def build_twin(
    model: str,
    hardware: str = "h100-sxm",
    *,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    engine: EngineConfig | None = None,
    gpu_memory_utilization: float = 0.9,
    served_model_name: str | None = None,
    router: str = "round-robin",
    speculative: str | SpecDecode | None = None,
) -> Twin:
    """The performance model's deployment as a twin; ConfigError names a bad model/hardware/dtype."""
    from infermeter.perfmodel import build_deployment

    cfg = engine or engine_defaults(hardware)
    # the memory plan reserves what the scheduler's limits need (activations, logits), so both use the same limits
    d = build_deployment(model, hardware, dtype=dtype, kv_dtype=kv_dtype, engine="vllm",
                         gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=cfg.max_num_seqs,
                         max_batched_tokens=cfg.max_num_batched_tokens)
    if not d.fits:
        raise ConfigError(f"{model} on {d.config.label}: does not fit ({d.why_not})")
    pp = d.pipeline_depth
    bs = cfg.block_size
    if cfg.num_gpu_blocks_override is not None:
        blocks = cfg.num_gpu_blocks_override
    else:
        blocks = d.kv_capacity_tokens // bs
    per_lane = blocks // pp
    if per_lane < 1:
        raise ConfigError(f"{model} on {d.config.label}: no room for a single KV block")
    mml = cfg.max_model_len or d.max_model_len
    cfg = cfg.model_copy(update={"max_model_len": min(mml, per_lane * bs)})
    Router(router, d.config.replicas)  # a bad name is a ConfigError now
    spec = d.spec
    sd = parse_speculative(speculative) if isinstance(speculative, str) else speculative
    if sd is not None and sd.draft_model and sd.draft_cost is None:
        dd = build_deployment(sd.draft_model, d.config.label, dtype=dtype, engine="vllm",
                              gpu_memory_utilization=gpu_memory_utilization)
        sd = sd.with_draft(dd)
    return Twin(
        model=spec.name,
        served_model_name=served_model_name or spec.hf_id or spec.name,
        hardware=d.config.label,
        predictor=d,
        config=cfg,
        num_blocks=per_lane,
        lanes=d.config.replicas * pp,
        pp=pp,
        router=router,
        speculative=sd,
        request_overhead_s=float(getattr(d, "request_overhead_s", 0.0) or 0.0),
        details={
            "dtype": d.dtype,
            "kv_dtype": d.kv_dtype,
            "tp": d.config.tp,
            "pp": pp,
            "replicas": d.config.replicas,
            "gpu_memory_utilization": gpu_memory_utilization,
            "kv_capacity_tokens": d.kv_capacity_tokens,
        },
    )


def engine_defaults(hardware: str | None = None, **overrides: Any) -> EngineConfig:
    """EngineConfig with the performance model's vLLM defaults (on ``hardware``, a ``--gpu`` string, the limits vLLM V1
    picks for that device: ``perfmodel.api.engine_on``), then ``overrides`` (None = keep)."""
    from infermeter.perfmodel.api import engine_on
    from infermeter.perfmodel.calibration import load_calibration

    eng = engine_on(hardware) if hardware is not None else load_calibration().engine("vllm")
    base: dict[str, Any] = {"max_num_seqs": eng.max_num_seqs, "max_num_batched_tokens": eng.max_batched_tokens}
    given = {k: v for k, v in overrides.items() if v is not None}
    base.update(given)
    if base["max_num_batched_tokens"] < base["max_num_seqs"] and not {"max_num_seqs", "max_num_batched_tokens"} <= set(given):
        unset = "max_num_seqs" if "max_num_seqs" not in given else "max_num_batched_tokens"
        raise ConfigError(f"--max-num-batched-tokens ({base['max_num_batched_tokens']}) must be >= --max-num-seqs "
                          f"({base['max_num_seqs']}); --{unset.replace('_', '-')} {base[unset]} is vLLM's default"
                          + (f" on {hardware}" if hardware else "") + f": set --{unset.replace('_', '-')} too")
    try:
        return EngineConfig(**base)
    except ValueError as exc:  # pydantic's ValidationError: name the option(s)
        errs: list[dict[str, Any]] = getattr(exc, "errors", lambda: [])()
        msg = "; ".join(
            (f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in errs
        )
        raise ConfigError(msg or str(exc)) from None


def fake_twin(
    *,
    predictor: StepTimePredictor | None = None,
    num_blocks: int = 4096,
    engine: EngineConfig | None = None,
    lanes: int = 1,
    model: str = "fake-linear",
    router: str = "round-robin",
) -> Twin:
    """A twin on the in-package linear step-time fake (tests, demos without a hardware model);
    ``lanes`` replicas of one engine each."""
    cfg = engine or EngineConfig()
    cap = num_blocks * cfg.block_size
    cfg = cfg.model_copy(update={"max_model_len": min(cfg.max_model_len or cap, cap)})
    Router(router, lanes)
    return Twin(model=model, served_model_name=model, hardware=None, predictor=predictor or LinearStepTime(),
                config=cfg, num_blocks=num_blocks, lanes=lanes, router=router)


def hardware_config(gpu: str, tp: int | None = None, pp: int | None = None) -> str:
    """``--gpu`` with ``--tp``/``--pp`` applied: ``("a100-80gb", tp=4)`` -> ``"4xa100-80gb:tp4"``.

    A GPU count that ``tp * pp`` divides is kept (the rest are replicas:
    ``("8xh100-sxm", tp=2)`` -> 4 replicas); otherwise the count becomes ``tp * pp``.
    """
    from infermeter.perfmodel.configspec import parse_config

    cfg = parse_config(gpu)
    if tp is None and pp is None:
        return cfg.label
    t, p = tp or cfg.tp, pp or cfg.pp
    if t < 1 or p < 1:
        raise ConfigError(f"--tp {t} / --pp {p}: must be >= 1")
    count = cfg.count if cfg.count % (t * p) == 0 else t * p
    return parse_config(f"{count}x{cfg.hardware}:tp{t},pp{p}").label
