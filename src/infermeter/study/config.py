"""The study file: what to compare (configurations x profiles), how to load each cell, SLO, prices, soak.

One frozen pydantic model, read from YAML (``infermeter study FILE``) or built from flags, then
completed with flags on top::

    >>> cfg = load_study_text('''
    ... model: llama-3.1-8b
    ... configurations: [h100-sxm, {config: a100-40gb, name: a100-40gb}]
    ... slo: {ttft_ms: 2000}
    ... ''', "study.yaml")
    >>> [c.label for c in cfg.configurations], cfg.profiles
    (['h100-sxm', 'a100-40gb'], ('chat', 'classification', 'code'))
    >>> cfg.load.kind, cfg.slo.percentile
    ('sweep', 'p95')

Rules checked here, each error naming the field (``configurations[2].target`` ...):
a configuration is a hardware configuration string (``8xa10g:tp4,pp2``; see
:mod:`infermeter.perfmodel.configspec`) or a mapping with ``config`` and optionally a display
``name``, a measured ``target`` URL or an ``engine`` to launch (not both) -- or a ``target`` of runs that
already exist, ``{runs: {PROFILE: [PATH, ...]}}`` (run directories or other tools' result files, one list
for each of its profiles, each path present; see :mod:`infermeter.study.imported`) -- the ``model`` the
target serves, a subset of ``profiles``, ``load`` fields that replace the study's for it, and a
dated ``price_per_hour``. Names are unique. Durations take ``90s``, ``30m``, ``72h``, ``2d`` or
seconds.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infermeter.durations import parse_duration
from infermeter.engines.target import Launchable
from infermeter.errors import ConfigError
from infermeter.perfmodel.configspec import parse_config
from infermeter.study.claims import Claim
from infermeter.twin.spec import TwinSpec
from infermeter.yamlfile import line_of, loc_text, yaml_mapping

DEFAULT_PROFILES = ("chat", "classification", "code")
FIXED_RATE_REQUESTS = 240  # kind=rate without requests: one step of this many


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoadPlan(_Frozen):
    """How each cell is loaded. ``sweep``: one request at a time, then a closed loop at
    ``concurrency`` (saturation), then open-loop Poisson rates at ``rate_fractions`` of the
    saturation request rate, then up to ``refine`` bisection steps until the SLO edge is
    bracketed to within ``precision`` (relative). Open-loop steps realize their target rate
    (``exact_rate``: the schedule of each step is scaled to its exact mean).

    Steady state (``study.sweep``): without ``requests`` each open-loop step is sized by duration,
    ``step_e2e`` E2E times of the workload at its rate and at least enough completions for the SLO
    percentile (``20 / (1 - p)``), at most ``max_step_requests``; then the capacity is checked by
    doubling the step length (``converge``, on unless false; fixed ``requests`` are doubled too): when it moves
    by more than ``tolerance`` the search is repeated with the longer steps, at most
    ``max_doublings`` times."""

    kind: Literal["sweep", "concurrency", "rate"] = "sweep"
    sync_requests: int = Field(20, ge=1, description="requests of the one-at-a-time step (20 give a p95)")
    concurrency: int | None = Field(None, ge=1, description="closed-loop streams of the saturation step "
                                    "(default: max_num_seqs x engines when simulated, 16 when measured)")
    saturation_requests: int | None = Field(None, ge=1, description="requests of the saturation step "
                                            "(default: 3 x concurrency)")
    rate_fractions: tuple[float, ...] = Field((0.3, 0.6, 0.9), description="open-loop rates as fractions "
                                              "of the saturation request rate")
    requests: int | None = Field(None, ge=1, description="requests per open-loop step (default: sized by "
                                 "duration, step_e2e E2E times at the step's rate and enough completions for "
                                 "the SLO percentile)")
    step_e2e: float = Field(40.0, gt=0, description="duration-sized open-loop steps last this many E2E times of the "
                            "workload (the longest mean E2E of the steps meeting the SLO so far)")
    max_step_requests: int = Field(20_000, ge=2, description="never size an open-loop step above this many requests")
    converge: bool | None = Field(None, description="check the SLO capacity by doubling the step length, and "
                                  "lengthen and re-search when it moves beyond tolerance (default: on; false "
                                  "keeps the steps as planned)")
    tolerance: float = Field(0.05, gt=0, lt=1, description="the capacity may move at most this share when the "
                             "step length doubles")
    max_doublings: int = Field(3, ge=0, le=6, description="at most this many step-length doublings")
    refine: int = Field(6, ge=0, le=12, description="at most this many bisection steps between the last rate "
                        "meeting the SLO and the first missing it")
    precision: float = Field(0.05, gt=0, lt=1, description="stop refining when the SLO edge is bracketed to within "
                             "this share of the rate meeting the SLO")
    exact_rate: bool = Field(True, description="scale each open-loop step's arrivals to its exact target mean "
                             "rate (else a short Poisson schedule misses it by about 1/sqrt(requests))")
    rate: float | None = Field(None, gt=0, description="kind=rate: the one open-loop rate (req/s)")
    warmup: int = Field(0, ge=0, description="requests per step sent first and not counted")
    arrival: Literal["poisson", "constant"] = "poisson"

    @field_validator("rate_fractions")
    @classmethod
    def _fractions(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < f < 1.5 for f in v):
            raise ValueError(f"each fraction must be in (0, 1.5), got {list(v)}")
        return tuple(sorted(set(v)))

    @model_validator(mode="after")
    def _check(self) -> LoadPlan:
        if self.kind == "rate" and self.rate is None:
            raise ValueError("kind 'rate' needs rate (req/s)")
        if self.kind == "concurrency" and self.concurrency is None:
            raise ValueError("kind 'concurrency' needs concurrency")
        return self

    def describe(self) -> str:
        if self.kind == "rate":
            return f"open loop at {self.rate:g} req/s ({self.arrival}), {self.requests or FIXED_RATE_REQUESTS} requests"
        if self.kind == "concurrency":
            return f"closed loop at concurrency {self.concurrency}, {self.saturation_requests or 3 * (self.concurrency or 1)} requests"
        conc = self.concurrency if self.concurrency is not None else "max_num_seqs x engines"
        fr = ", ".join(f"{f:g}" for f in self.rate_fractions)
        return (f"sweep: {self.sync_requests} requests one at a time; closed loop at concurrency {conc} "
                f"(saturation); open-loop {self.arrival} rates at {fr} x the saturation rate, "
                f"{self.step_size_text()} each{' at their exact target mean' if self.exact_rate else ''}; "
                f"bisection (at most {self.refine} steps) until the SLO edge is bracketed within {self.precision:.0%}"
                + (f"; capacity checked by doubling the step length (tolerance {self.tolerance:.0%}, at most "
                   f"{self.max_doublings} doublings)" if self.converges else ""))

    @property
    def converges(self) -> bool:
        """Whether the SLO capacity is checked by doubling the step length."""
        return self.converge is not False

    def step_size_text(self) -> str:
        if self.requests is not None:
            return f"{self.requests} requests"
        return (f"steps of {self.step_e2e:g} E2E times (at least the completions the SLO percentile needs, "
                f"at most {self.max_step_requests:,} requests)")


class Slo(_Frozen):
    """Latency limits at ``percentile`` (ms) and the highest error rate a step may have."""

    ttft_ms: float | None = Field(None, gt=0, description="time to first token, from the intended send")
    tpot_ms: float | None = Field(None, gt=0, description="time per output token")
    e2e_ms: float | None = Field(None, gt=0, description="request latency, from the intended send")
    percentile: Literal["p50", "p90", "p95", "p99"] = "p95"
    max_error_rate: float = Field(0.01, ge=0, le=1)

    @property
    def limits(self) -> dict[str, float]:
        return {k: v for k, v in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms), ("e2e_ms", self.e2e_ms))
                if v is not None}

    def describe(self) -> str:
        if not self.limits:
            return "none"
        parts = [f"{k.removesuffix('_ms').upper()} {self.percentile} ≤ {v:g} ms" for k, v in self.limits.items()]
        return ", ".join(parts) + f", error rate ≤ {self.max_error_rate:.2%}"


class Pricing(_Frozen):
    """Which prices to use (see ``infermeter cost``) and which cost picks the best value."""

    provider: str | None = None
    instance: str | None = None
    prices_file: Path | None = None
    commitment: str | None = None
    discount: float | None = Field(None, ge=0, lt=1)
    whole_instances: bool = False
    overhead: float = Field(0.0, ge=0)
    utilization: float = Field(1.0, gt=0, le=1)
    value_metric: Literal["usd_per_1m_requests", "usd_per_1m_output_tokens", "usd_per_1m_total_tokens"] = \
        "usd_per_1m_requests"


class Volume(_Frozen):
    """The daily volume the decision answers at (``daily``, whole replicas), the break-even table's range, and how
    replicas are sized. ``volume: 2000000`` (or ``{low: 2e6, high: 2e6}``) is a point volume: ``daily`` = 2e6 and
    the break-even range a decade either side of it."""

    low: float = Field(100_000, gt=0, description="requests/day")
    high: float = Field(50_000_000, gt=0, description="requests/day")
    daily: float | None = Field(None, gt=0, description="requests/day the decision is answered at (whole replicas)")
    peak_factor: float = Field(1.0, ge=1)
    headroom: float = Field(0.2, ge=0, lt=1)

    @model_validator(mode="before")
    @classmethod
    def _point(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = {"daily": v}
        if not isinstance(v, dict):
            return v
        v = dict(v)
        low, high = v.get("low"), v.get("high")
        if low is not None and high is not None and low == high and v.get("daily") is None:
            v["daily"] = low  # a point given as a range of one value
            v.pop("low")
            v.pop("high")
        daily = v.get("daily")
        if isinstance(daily, (int, float)) and daily > 0:
            v.setdefault("low", daily / 10)
            v.setdefault("high", daily * 10)
        return v

    @model_validator(mode="after")
    def _check(self) -> Volume:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high:g}) must be above low ({self.low:g})")
        return self


class Soak(_Frozen):
    """A simulated production run per configuration: ``rate_per_s`` for ``duration_s``."""

    duration_s: float = Field(gt=0)
    rate_per_s: float = Field(gt=0)
    window_s: float = Field(3600.0, gt=0)
    profile: str | None = None
    objective: float = Field(0.999, gt=0, lt=1, description="share of requests that must succeed within the SLO")
    alerts: tuple[str, ...] = ()
    replicas: int | Literal["auto"] = "auto"
    timeout_s: float | None = Field(None, gt=0, description="a request slower than this counts as a client timeout")
    configurations: tuple[str, ...] | None = None
    router: Literal["round-robin", "session"] = Field(
        "round-robin", description="the gateway's policy across the fleet's replicas (decided from the arrivals)")
    workers: int | Literal["auto"] = Field("auto", description="processes the fleet is split over (auto: every core)")
    ray: str | None = Field(None, description="split the fleet over Ray actors instead: ADDRESS, auto or local")
    probes: int = Field(4, ge=0, le=8, description="when a soak fails its objective: at most this many probe runs "
                        "(a few replicas, same router) bisecting the per-replica rate at which it holds")

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: Any) -> Any:
        if v != "auto" and int(v) < 1:
            raise ValueError(f"{v}: at least 1 worker")
        return v

    @field_validator("duration_s", "window_s", "timeout_s", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v, "soak duration")


class SimOptions(_Frozen):
    """Twin settings for simulated cells (vLLM's option names)."""

    dtype: str = "bf16"
    kv_dtype: str | None = None
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool = True
    speculative: str | None = Field(None, description="speculative decoding METHOD:k=K,acceptance=A (vLLM's "
                                    "acceptance rate; perfmodel.speculative), e.g. "
                                    "draft:llama-3.1-8b,k=4,acceptance=0.7")

    @field_validator("speculative")
    @classmethod
    def _speculative(cls, v: str | None) -> str | None:
        if v is not None:
            from infermeter.perfmodel.speculative import parse_spec

            try:
                parse_spec(v, "speculative")
            except ConfigError as exc:  # reported by pydantic with the field's place in the file
                raise ValueError(str(exc)) from None
        return v

    def spec(self, model: str, gpu: str) -> TwinSpec:
        """The twin's deployment of ``model`` on ``gpu`` with these settings."""
        return TwinSpec(model=model, gpu=gpu, **self.model_dump())


class ImportedRuns(_Frozen):
    """A configuration's cells from existing results instead of a measurement: per profile, infermeter run
    directories (its own runs, or ``infermeter import``'s) and other tools' result files (imported when the
    study runs: vllm bench serve, GuideLLM, AIPerf, inference-benchmarker); each becomes one load step."""

    runs: dict[str, tuple[Path, ...]]

    @field_validator("runs", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return {k: [x] if isinstance(x, (str, Path)) else x for k, x in v.items()} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _check(self) -> ImportedRuns:
        if not self.runs:
            raise ValueError("runs: give {PROFILE: [run directory or result file, ...]}")
        for profile, paths in self.runs.items():
            if not paths:
                raise ValueError(f"runs.{profile}: give at least one run directory or result file")
            for i, p in enumerate(paths):
                if not Path(p).exists():
                    raise ValueError(f"runs.{profile}[{i}] {str(p)!r}: no such file or directory")
                if Path(p).is_dir() and not (Path(p) / "summary.json").is_file():
                    raise ValueError(f"runs.{profile}[{i}] {str(p)!r}: not a run directory (no summary.json)")
        return self


class Configuration(_Frozen):
    """One hardware configuration of the study; measured when ``target`` or ``engine`` is set.

    ``model`` is the model this configuration serves (a catalog name for a simulated one, the
    endpoint's model id for a measured one; default: the study's), ``dtype`` its weight dtype
    (shorthand for ``sim.dtype``: the quantization axis, e.g. ``awq``, ``gptq``, ``fp8``), ``speculative``
    its speculative decoding (shorthand for ``sim.speculative``, ``METHOD:k=K,acceptance=A``), ``provider`` /
    ``instance`` / ``commitment`` where its price
    comes from (over the study's ``pricing``), ``calibration`` a per-deployment calibration file
    (``infermeter calibrate``'s output) for its twin."""

    config: str
    name: str | None = None
    target: str | ImportedRuns | None = None
    engine: Launchable | None = None
    engine_args: dict[str, Any] = {}
    model: str | None = None
    dtype: str | None = None
    speculative: str | None = None
    profiles: tuple[str, ...] | None = None
    load: dict[str, Any] = {}
    sim: dict[str, Any] = {}
    provider: str | None = None
    instance: str | None = None
    commitment: str | None = None
    calibration: Path | None = None
    disaggregate: str | None = Field(None, description="simulate disaggregated prefill/decode on this configuration's "
                                                       "GPUs: prefill=CONFIG,decode=CONFIG[,...] (docs/disaggregation.md)")
    price_per_hour: float | None = Field(None, gt=0)
    price_source: str | None = None
    price_date: dt.date | None = None
    note: str | None = Field(None, description="shown with the configuration in the report")

    @field_validator("config")
    @classmethod
    def _config(cls, v: str) -> str:
        try:
            return parse_config(v).label
        except ConfigError as exc:  # reported by pydantic with the field's place in the file
            raise ValueError(str(exc)) from None

    @field_validator("target", mode="before")
    @classmethod
    def _runs(cls, v: Any) -> Any:
        """A mapping is existing runs; its problems are named under ``target`` (not once per union member)."""
        if v is None or isinstance(v, (str, ImportedRuns)):
            return v
        if not isinstance(v, dict):
            raise ValueError(f"{v!r}: expected http(s)://HOST[:PORT], or {{runs: {{PROFILE: [PATH, ...]}}}}")
        try:
            return ImportedRuns.model_validate(v)
        except ValidationError as exc:
            raise ValueError("; ".join((f"{loc_text(e['loc'])}: " if e["loc"] else "")
                                       + str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None

    @field_validator("target")
    @classmethod
    def _target(cls, v: str | ImportedRuns | None) -> str | ImportedRuns | None:
        if not isinstance(v, str):
            return v
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"{v!r}: expected http(s)://HOST[:PORT], or {{runs: {{PROFILE: [PATH, ...]}}}}")
        return v.rstrip("/").removesuffix("/v1")

    @model_validator(mode="after")
    def _check(self) -> Configuration:
        if self.target and self.engine:
            raise ValueError("give target (a URL) or engine (to launch), not both")
        if self.engine_args and not self.engine:
            raise ValueError("engine_args needs engine")
        if self.dtype and "dtype" in self.sim:
            raise ValueError("give dtype or sim.dtype, not both")
        if self.speculative and "speculative" in self.sim:
            raise ValueError("give speculative or sim.speculative, not both")
        if self.speculative and self.measured:
            raise ValueError("speculative is the twin's (a simulated configuration); a measured one is what its "
                             "server runs")
        if self.calibration is not None and not Path(self.calibration).is_file():
            raise ValueError(f"calibration {str(self.calibration)!r}: no such file")
        if self.price_per_hour is not None and (self.provider or self.instance or self.commitment):
            raise ValueError("price_per_hour is its own price: drop provider/instance/commitment, or drop it")
        return self

    @property
    def label(self) -> str:
        return self.name or self.config

    @property
    def measured(self) -> bool:
        return bool(self.target or self.engine)

    @property
    def imported(self) -> ImportedRuns | None:
        """The existing runs this configuration's cells are made of (``target: {runs: ...}``), else None."""
        return self.target if isinstance(self.target, ImportedRuns) else None


def _configuration(value: Any) -> Any:
    return {"config": value} if isinstance(value, str) else value


class StudyConfig(_Frozen):
    title: str | None = None
    model: str = "llama-3.1-8b"
    configurations: tuple[Configuration, ...]
    profiles: tuple[str, ...] = DEFAULT_PROFILES
    profile_overrides: dict[str, dict[str, Any]] = {}
    load: LoadPlan = LoadPlan()
    slo: Slo = Slo()
    pricing: Pricing = Pricing()
    volume: Volume = Volume()
    soak: Soak | None = None
    sim: SimOptions = SimOptions()
    claims: tuple[Claim, ...] = ()
    seed: int = Field(0, ge=0)

    @field_validator("configurations", mode="before")
    @classmethod
    def _configs(cls, v: Any) -> Any:
        return [_configuration(x) for x in v] if isinstance(v, (list, tuple)) else v

    @model_validator(mode="after")
    def _check(self) -> StudyConfig:
        if not self.configurations:
            raise ValueError("configurations: give at least one hardware configuration")
        if not self.profiles:
            raise ValueError("profiles: give at least one workload profile")
        labels = [c.label for c in self.configurations]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"configurations: {', '.join(dup)} appear more than once; give each a distinct name")
        for c in self.configurations:
            extra = sorted(set(c.profiles or ()) - set(self.profiles))
            if extra:
                raise ValueError(f"configuration {c.label}: profiles {extra} are not among the study's {list(self.profiles)}")
            if c.imported is not None:
                given, wanted = set(c.imported.runs), set(self.profiles_for(c))
                if given - wanted:
                    raise ValueError(f"configuration {c.label}: target.runs for {sorted(given - wanted)}, which are "
                                     f"not among its profiles {sorted(wanted)}")
                if wanted - given:
                    raise ValueError(f"configuration {c.label}: target.runs has no runs for {sorted(wanted - given)}; "
                                     f"give them, or set its profiles to {sorted(given)}")
        unknown = sorted(set(self.profile_overrides) - set(self.profiles))
        if unknown:
            raise ValueError(f"profile_overrides: {unknown} are not among the study's profiles")
        if self.soak and self.soak.profile and self.soak.profile not in self.profiles:
            raise ValueError(f"soak.profile {self.soak.profile!r} is not among the study's profiles")
        if self.soak and self.soak.configurations:
            missing = sorted(set(self.soak.configurations) - set(labels))
            if missing:
                raise ValueError(f"soak.configurations: {missing} are not configurations of this study")
        for i, claim in enumerate(self.claims):
            if claim.configuration is not None and claim.configuration not in labels:
                raise ValueError(f"claims[{i}].configuration {claim.configuration!r} is not a configuration of "
                                 f"this study ({', '.join(labels)})")
        return self

    def model_for(self, c: Configuration) -> str:
        """The model a configuration serves: its own ``model`` when simulated, else the study's (a measured
        configuration's ``model`` is the id its endpoint serves, checked against the study's after the run)."""
        return c.model if c.model and not c.measured else self.model

    def pricing_for(self, c: Configuration) -> Pricing:
        """The study's pricing with the configuration's provider, instance and commitment on top."""
        over = {k: getattr(c, k) for k in ("provider", "instance", "commitment") if getattr(c, k) is not None}
        return self.pricing.model_copy(update=over) if over else self.pricing

    def configuration(self, label: str) -> Configuration:
        return next(c for c in self.configurations if c.label == label)

    def load_for(self, c: Configuration) -> LoadPlan:
        """The study's load plan with the configuration's own ``load`` fields on top."""
        return LoadPlan(**{**self.load.model_dump(), **c.load})

    def sim_for(self, c: Configuration) -> SimOptions:
        return SimOptions(**{**self.sim.model_dump(), **({"dtype": c.dtype} if c.dtype else {}),
                             **({"speculative": c.speculative} if c.speculative else {}), **c.sim})

    def profiles_for(self, c: Configuration) -> tuple[str, ...]:
        return tuple(p for p in self.profiles if c.profiles is None or p in c.profiles)

    def describe_title(self) -> str:
        return self.title or (f"{self.model}: {', '.join(c.label for c in self.configurations)} "
                              f"over {', '.join(self.profiles)}")


def _errors(exc: ValidationError, where: str, text: str | None = None, prefix: tuple[Any, ...] = ()) -> str:
    """Every problem, each with its field and (from the file's text) its line."""
    parts = []
    for e in exc.errors():
        loc = (*prefix, *e["loc"])
        line = line_of(text, loc) if text is not None else None
        parts.append((f"line {line}: " if line else "") + f"{loc_text(loc)}: {str(e['msg']).removeprefix('Value error, ')}")
    return f"{where}: " + "; ".join(parts)


def build_study(data: dict[str, Any], where: str = "study", text: str | None = None) -> StudyConfig:
    """Validate a mapping (a parsed study file, with flags merged in); ConfigError names each field, and
    its line when the file's ``text`` is given."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with model, configurations, profiles ...")
    try:
        cfg = StudyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_errors(exc, where, text)) from None
    for c in cfg.configurations:
        try:
            cfg.load_for(c)
            cfg.sim_for(c)
        except ValidationError as exc:
            raise ConfigError(_errors(exc, f"{where}: configuration {c.label}")) from None
        if c.model and not c.measured:
            _check_model(c.model, f"{where}: configuration {c.label}: model")
    for i, claim in enumerate(cfg.claims):
        if claim.model:
            _check_model(claim.model, f"{where}: claims[{i}].model")
    return cfg


def _check_model(name: str, where: str) -> None:
    from infermeter.errors import UserError
    from infermeter.perfmodel.models import get_model

    try:
        get_model(name)
    except UserError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_study_text(text: str, where: str) -> StudyConfig:
    return build_study(read_study_mapping(text, where), where, text)


def read_study_mapping(text: str, where: str) -> dict[str, Any]:
    return yaml_mapping(text, where, "model, configurations, profiles ...")


def read_study_file(path: Path) -> dict[str, Any]:
    """A study file as a mapping; relative ``calibration`` and ``target.runs`` paths are taken from the file's folder."""
    return read_study_source(path)[0]


def read_study_source(path: Path) -> tuple[dict[str, Any], str]:
    """(the mapping, the file's text -- for line numbers in errors); see :func:`read_study_file`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"study file {path}: cannot read ({exc.strerror})") from None
    data = read_study_mapping(text, f"study file {path}")
    confs = data.get("configurations")
    if isinstance(confs, list):
        for c in confs:
            if isinstance(c, dict) and isinstance(c.get("calibration"), str) and not Path(c["calibration"]).is_absolute():
                c["calibration"] = str(Path(path).parent / c["calibration"])
            runs = c.get("target", {}).get("runs") if isinstance(c, dict) and isinstance(c.get("target"), dict) else None
            if isinstance(runs, dict):  # relative run paths, like calibration, from the file's folder
                for k, v in runs.items():
                    runs[k] = [str(Path(path).parent / x) if isinstance(x, str) and not Path(x).is_absolute() else x
                               for x in (v if isinstance(v, list) else [v])]
    return data, text


EXAMPLES = {"default": "study-example.yaml", "seed-000": "study-seed-000.yaml", "seed-002": "study-seed-002.yaml",
            "seed-003": "study-seed-003.yaml", "seed-002-speculative": "study-seed-002-speculative.yaml",
            "seed-002-quant": "study-seed-002-quant.yaml"}


def example_text(name: str = "default") -> str:
    """A built-in example study: ``default`` (``data/study-example.yaml``) or a published study written
    down (``seed-000``, ``seed-002``, ``seed-003``: ``data/study-seed-*.yaml``)."""
    from importlib import resources

    if name not in EXAMPLES:
        raise ConfigError(f"--example {name}: no such example; use one of {', '.join(EXAMPLES)}")
    return resources.files("infermeter").joinpath("data", EXAMPLES[name]).read_text(encoding="utf-8")


def dump_study(cfg: StudyConfig) -> str:
    """YAML of the resolved study (what ran), for ``study.yaml`` in the output folder."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True), sort_keys=False)
