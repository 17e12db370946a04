"""``RunConfig``: everything one run needs, and how its flags turn into a shape or a plan.

One frozen model for ``infermeter run``, steps of sweeps, campaign cells and
resumed runs alike. The flags desugar once, before anything runs:
:func:`build_shape` into one load shape (conflicting flags are an error
naming both), :func:`build_plan` into a multi-step plan (``--load sweep``,
``--load find-max``), :func:`soak_settings` into soak storage for long runs::

    cfg = RunConfig(rate=20, arrival="constant", duration_s=60)
    build_shape(cfg).describe()        # 'open loop, 20 req/s (constant)'
    build_plan(RunConfig(load="sweep", requests=50)).describe()
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infermeter.analysis import catalog
from infermeter.analysis.results import PERCENTILES
from infermeter.errors import ConfigError, DataError, UserError
from infermeter.load.search import FindMaxPlan
from infermeter.load.shapes import (
    ARRIVALS,
    SHAPED,
    BaseShape,
    ConstantArrivalRate,
    ConstantConcurrency,
    RampingArrivalRate,
    Shape,
    TraceReplay,
    check_arrival,
)
from infermeter.load.sweep import SweepPlan
from infermeter.records import store
from infermeter.redact import redact_args, redact_obj, remember_secret

THROUGHPUT_CONCURRENCY = 256


class RunConfig(BaseModel):
    """Everything ``infermeter run`` needs; see ``infermeter run --help`` for each field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = Field(None, description="base URL of an OpenAI-compatible server (default: start the embedded emulator)")
    model: str | None = Field(None, description="model name (default: first id from /v1/models)")
    api: Literal["chat", "completions"] = Field("chat", description="chat | completions")
    api_key: str | None = Field(default=None, exclude=True, repr=False,
                                description="API key (or env OPENAI_API_KEY); never written anywhere")
    ignore_eos: bool = Field(False, description="send ignore_eos/min_tokens so outputs reach max_tokens (vLLM)")
    temperature: float | None = Field(None, description="sampling temperature")
    extra_body: dict[str, Any] = Field({}, description="JSON object merged into every request body")
    # load
    concurrency: int | None = Field(None, ge=1, description="closed loop with N streams (default 1 when no --rate)")
    rate: float | None = Field(None, gt=0, description="open loop: mean requests per second")
    arrival: str = Field("poisson", description=" | ".join(ARRIVALS) + " (default poisson; constant for sweep/find-max)")
    burstiness: float = Field(1.0, gt=0, description="shape k of --arrival gamma or weibull (k<1 burstier)")
    ramp_up_strategy: Literal["linear", "exponential"] | None = Field(None, description="linear | exponential rate ramp (vLLM's flag)")
    ramp_up_start_rps: float | None = Field(None, description="ramp start rate (req/s)")
    ramp_up_end_rps: float | None = Field(None, description="ramp end rate (req/s)")
    max_concurrency: int | None = Field(None, ge=1, description="cap on in-flight requests for open loops")
    load: Literal["replay", "sweep", "find-max"] | None = Field(
        None, description="replay (a trace's timestamps) | sweep (synchronous, max throughput, rates between) | "
                          "find-max (highest rate/concurrency meeting --slo)")
    shape: Shape | None = None  # a shape given whole (a plan's step): the load flags above are then unused
    time_scale: float = Field(1.0, gt=0, description="replay: multiply trace offsets by this")
    requests: int | None = Field(None, ge=1, description="measured requests to send (after warmup)")
    duration_s: float | None = Field(None, gt=0, description="how long to send for: seconds or 90s, 45m, 72h, 1h30m")
    warmup: int = Field(0, ge=0, description="requests sent first and not counted")
    grace_s: float = Field(30.0, ge=0, description="after --duration, wait this long for in-flight requests")
    seed: int = Field(0, description="seed for arrivals and the workload")
    # multi-step plans (docs/load.md)
    sweep_rates: int = Field(5, ge=0, description="sweep: open-loop rates between synchronous and max throughput")
    search: Literal["rate", "concurrency"] = Field("rate", description="find-max: search the 'rate' or the 'concurrency'")
    search_start: float | None = Field(None, gt=0, description="find-max: first value tried (default: the synchronous rate, or concurrency 1)")
    search_max: float | None = Field(None, gt=0, description="find-max: never try more than this")
    resolution: float = Field(0.05, gt=0, lt=1, description="find-max: stop when the bracket is this narrow (relative)")
    max_steps: int = Field(12, ge=2, description="find-max: at most this many steps")
    slo_percentile: float = Field(99.0, description="sweep/find-max: a step meets --slo when this percentile does (50, 90, 95, 99, 99.9)")
    max_error_rate: float = Field(0.01, ge=0, le=1, description="sweep/find-max: a step with more failed or unfinished requests than this share misses the SLO")
    # scale: processes, Ray, client calibration
    workers: int = Field(1, ge=1, description="client processes sharing one striped schedule (or Ray actors with --ray)")
    ray: str | None = Field(None, description="run the workers as Ray actors: ADDRESS, 'auto' or 'local' (extra 'distributed')")
    calibrate: bool = Field(True, description="measure this client's capacity first when the requested rate could exceed it")
    strict: bool = Field(False, description="refuse to run when the requested rate exceeds the calibrated client capacity")
    # soak storage
    window_s: float | None = Field(None, gt=0, description="soak: per-window series of this length (e.g. 1h); turns on soak storage")
    checkpoint_s: float | None = Field(None, gt=0, description="soak: checkpoint this often (default 60s); turns on soak storage")
    part_records: int = Field(5000, ge=100, description="soak: records per part file")
    # workload
    profile: str | None = Field(None, description="workload profile (see `infermeter profiles`)")
    dataset: str | None = Field(None, description="dataset file or Hub name")
    tokenizer: str | None = Field(None, description="tokenizer for lengths (tokenizer.json, HF folder, GGUF, Hub id)")
    input_tokens: str | None = Field(None, description="prompt length: mean[,stdev[,min,max]]")
    output_tokens: str | None = Field(None, description="max_tokens: mean[,stdev[,min,max]]")
    prefix_tokens: int | None = Field(None, description="shared prefix length (synthetic)")
    prefix_groups: int | None = Field(None, ge=1, description="number of distinct shared prefixes")
    profile_overrides: dict[str, Any] = Field({}, description="override a profile field or dataset option, KEY=VALUE "
                                                              "(repeatable; see `infermeter profiles`)")
    prompt_salt: int | None = Field(None, ge=0, description="vary the prompt text, not its lengths, with this number "
                                    "(default: a new one per run, recorded in run.json, so a server's prefix cache "
                                    "does not carry over from earlier runs; 0: the seed's own text, as before)")
    # timeouts (s)
    connect_timeout_s: float = Field(10.0, gt=0, description="connect timeout")
    first_token_timeout_s: float | None = Field(120.0, gt=0, description="first-token timeout, 0 = none")
    timeout_s: float | None = Field(600.0, gt=0, description="total per-request timeout, 0 = none")
    # analysis / output
    slo: dict[str, float] = Field({}, description="goodput SLO, e.g. ttft_ms=500,tpot_ms=50,e2e_ms=10000 or ttft_p95_ms=500 (sets --slo-percentile)")
    alerts: tuple[str, ...] = Field((), description="alert rule, e.g. 'ttft_p95_ms>500' (repeatable); exit 3 when one fires")
    out: str | None = Field(None, description="result directory (default results/<UTC time>-<label>/)")
    label: str | None = Field(None, description="a name for this run")
    scrape: bool = Field(True, description="scrape the server's /metrics during the run")
    scrape_interval_s: float = Field(1.0, gt=0, description="seconds between /metrics scrapes")
    scrape_max_mb: float = Field(8.0, gt=0, le=1e6, description="stop reading a /metrics body past this many MiB "
                                                        "(the scrape is kept, marked truncated)")
    emulator_args: tuple[str, ...] = Field((), description='arguments for the embedded emulator, e.g. "--ttft-ms 20"')
    hardware: str | None = Field(None, description="what the server runs on, e.g. 4xa100-80gb:tp4 (for cost)")
    gpu: bool = Field(True, description="sample local GPUs (NVML, extra 'gpu') or --dcgm-url during the run; "
                                        "without a GPU it says so")
    dcgm_url: str | None = Field(None, description="a DCGM exporter's /metrics URL to sample GPU telemetry from")
    history: bool = Field(True, description="index the run in the history database (see `infermeter history`)")

    @model_validator(mode="before")
    @classmethod
    def _slo_text(cls, data: Any) -> Any:
        """``--slo`` as text: its limits, and the percentile its names carry (``ttft_p95_ms=500``) as the
        ``slo_percentile`` unless that was given too (then the two must agree)."""
        if isinstance(data, dict) and isinstance(data.get("slo"), str):
            limits, pct = parse_slo_rules(data["slo"])
            data = {**data, "slo": limits}
            if pct is not None:
                given = data.get("slo_percentile")
                if given is not None and float(given) != pct:
                    raise ConfigError(f"--slo names p{pct:g} but --slo-percentile is {float(given):g}; give one")
                data["slo_percentile"] = pct
        return data

    @model_validator(mode="before")
    @classmethod
    def _plan_arrivals(cls, data: Any) -> Any:
        """Plans default to evenly spaced arrivals (their steps compare rates, not burstiness)."""
        if isinstance(data, dict) and data.get("load") in ("sweep", "find-max") and data.get("arrival") is None:
            data = {**data, "arrival": "constant"}
        elif isinstance(data, dict) and "arrival" in data and data["arrival"] is None:
            data = {k: v for k, v in data.items() if k != "arrival"}
        return data

    @field_validator("api_key")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        remember_secret(v)  # masked from every text this process redacts (errors, console, files)
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"--url {v!r}: expected http(s)://HOST[:PORT]")
        if v is not None and re.match(r"^https?://[^/\s]*@", v):
            raise ValueError("credentials in --url would be written to run.json; pass --api-key (or OPENAI_API_KEY)")
        return v.rstrip("/").removesuffix("/v1") if v else v

    @field_validator("arrival")
    @classmethod
    def _arrival(cls, v: str) -> str:
        return check_arrival(v)

    @field_validator("dcgm_url")
    @classmethod
    def _dcgm(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"--dcgm-url {v!r}: expected http(s)://HOST[:PORT]/metrics of a DCGM exporter")
        return v

    @field_validator("slo_percentile")
    @classmethod
    def _pct(cls, v: float) -> float:
        if float(v) not in (50.0, 90.0, 95.0, 99.0, 99.9):
            raise ValueError(f"{v:g}: use one of 50, 90, 95, 99, 99.9")
        return float(v)

    def public(self) -> dict[str, Any]:
        """The config as run.json records it: no secret (the API key, an emulator's --api-key, a key in
        --extra-body or a URL) is written (``infermeter.redact``)."""
        d = self.model_dump(mode="json")
        d["emulator_args"] = redact_args(d.get("emulator_args") or [])
        d = dict(redact_obj(d))
        d["api_key"] = "***" if self.api_key else None
        return d


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")  # what --slo limits (the catalog's distributions, by summary key)


def parse_slo_rules(text: str | None) -> tuple[dict[str, float], float | None]:
    """``ttft_ms=500,tpot_ms=50`` or, in the metric catalog's grammar, ``ttft_p95_ms=500,e2e_p95_ms=9000`` ->
    (limits by SLO key, the percentile the names carry or None); ConfigError naming --slo when malformed.
    The judge holds one percentile for every limit, so the names may not carry two different ones."""
    out: dict[str, float] = {}
    pcts: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        name, sep, v = part.partition("=")
        name = name.strip()
        key, stat = name, None
        ref = catalog.find(name)
        if ref is not None and ref.metric.key in SLO_KEYS and (ref.stat is None or ref.stat in PERCENTILES):
            key, stat = ref.metric.key, ref.stat
        if not sep or key not in SLO_KEYS:
            raise ConfigError(f"--slo: {part!r} is not one of ttft_ms=, tpot_ms=, e2e_ms= "
                              "(or a percentile of them: ttft_p95_ms=, tpot_p99_ms=, e2e_p90_ms=)")
        if stat is not None and name.lower() != key:
            pcts[name] = stat
        try:
            out[key] = float(v)
        except ValueError:
            raise ConfigError(f"--slo: {name} value {v!r} is not a number") from None
        if out[key] <= 0:
            raise ConfigError(f"--slo: {name} must be > 0")
    if len(set(pcts.values())) > 1:
        raise ConfigError(f"--slo: {', '.join(pcts)} name different percentiles; the SLO judges every limit at one "
                          "percentile (--slo-percentile)")
    return out, (PERCENTILES[next(iter(pcts.values()))] if pcts else None)


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_ms=500,tpot_ms=50,e2e_ms=10000`` -> dict (see :func:`parse_slo_rules` for the grammar)."""
    return parse_slo_rules(text)[0]


def build_shape(cfg: RunConfig) -> BaseShape:
    """Desugar the load flags into one shape; conflicting flags are an error naming both."""
    if cfg.shape is not None:
        return cfg.shape
    if cfg.load in ("sweep", "find-max"):
        raise ConfigError(f"--load {cfg.load} is a multi-step plan, not one shape (see build_plan)")
    strategy = cfg.ramp_up_strategy
    given = [n for n, v in (("--concurrency", cfg.concurrency), ("--rate", cfg.rate),
                            ("--ramp-up-strategy", cfg.ramp_up_strategy), ("--load replay", cfg.load)) if v is not None]
    if len(given) > 1:
        raise ConfigError(f"{given[0]} and {given[1]} both set a load shape; use one")
    if cfg.burstiness != 1.0 and cfg.arrival not in SHAPED:
        raise ConfigError(f"--burstiness {cfg.burstiness:g} needs --arrival {' or '.join(sorted(SHAPED))} "
                          "(poisson is gamma with k=1)")
    if cfg.requests is None and cfg.duration_s is None and cfg.load != "replay":
        raise ConfigError("give --requests N and/or --duration S so the run knows when to stop")
    if cfg.load == "replay":
        return TraceReplay(time_scale=cfg.time_scale)
    if strategy is not None:
        if cfg.ramp_up_start_rps is None or cfg.ramp_up_end_rps is None:
            raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        a, b = cfg.ramp_up_start_rps, cfg.ramp_up_end_rps
        if a < 0 or b <= 0:
            raise ConfigError("--ramp-up-start-rps must be >= 0 and --ramp-up-end-rps > 0")
        if cfg.duration_s is not None:
            ramp_s = cfg.duration_s
        else:
            ramp_s = RampingArrivalRate.ramp_for_requests(strategy, a, b, cfg.requests or 1)
        try:
            return RampingArrivalRate(strategy=strategy, start_rate_per_s=a, end_rate_per_s=b,
                                      ramp_s=ramp_s, arrival=cfg.arrival, burstiness=cfg.burstiness)
        except ValueError as exc:
            raise ConfigError(str(exc).splitlines()[-1]) from None
    if cfg.rate is not None:
        if cfg.rate <= 0:
            raise ConfigError(f"--rate must be > 0, got {cfg.rate:g}")
        return ConstantArrivalRate(rate_per_s=cfg.rate, arrival=cfg.arrival, burstiness=cfg.burstiness)
    n = cfg.concurrency if cfg.concurrency is not None else 1
    if n < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {n}")
    return ConstantConcurrency(concurrency=n)


def build_plan(cfg: RunConfig) -> SweepPlan | FindMaxPlan | None:
    """``--load sweep`` / ``--load find-max`` -> a plan (None for single-shape runs)."""
    if cfg.load not in ("sweep", "find-max"):
        return None
    for flag, value in (("--rate", cfg.rate), ("--ramp-up-strategy", cfg.ramp_up_strategy)):
        if value is not None:
            raise ConfigError(f"--load {cfg.load} and {flag} both set the load; the plan chooses the rates")
    if cfg.requests is None and cfg.duration_s is None:
        raise ConfigError(f"--load {cfg.load}: give --requests N and/or --duration S for each step")
    if cfg.arrival not in ("constant", "poisson"):
        raise ConfigError(f"--load {cfg.load} --arrival {cfg.arrival}: plans use constant or poisson arrivals")
    if cfg.load == "sweep":
        return SweepPlan(rates=cfg.sweep_rates, arrival=cfg.arrival,
                         throughput_concurrency=cfg.concurrency or THROUGHPUT_CONCURRENCY)
    if not cfg.slo:
        raise ConfigError("--load find-max needs --slo (e.g. --slo ttft_ms=500): the search stops where it breaks")
    if cfg.concurrency is not None:
        raise ConfigError("--load find-max and --concurrency: use --search concurrency --search-start N")
    return FindMaxPlan(dimension=cfg.search, start=cfg.search_start, max_value=cfg.search_max,
                       resolution=cfg.resolution, max_steps=cfg.max_steps, arrival=cfg.arrival)


def soak_settings(cfg: RunConfig) -> dict[str, Any] | None:
    """Soak storage (parts, checkpoints, windows) for long runs or when asked; None for ordinary runs."""
    long_run = (cfg.duration_s or 0) >= 3600 or (cfg.requests or 0) >= 200_000
    if not (long_run or cfg.window_s or cfg.checkpoint_s):
        return None
    dur = cfg.duration_s or 0
    window = cfg.window_s or (3600.0 if dur >= 6 * 3600 else 300.0 if dur >= 3600 else 60.0)
    return {"window_s": window, "checkpoint_s": cfg.checkpoint_s or 60.0, "part_records": cfg.part_records}


def requested_rate(shape: BaseShape) -> float | None:
    """The peak open-loop rate a shape asks for (None: closed loop or replay)."""
    return shape.peak_rate if shape.open_loop else None


def workload_args(cfg: RunConfig) -> dict[str, Any]:
    """``build_workload`` keyword arguments of a run (measured or simulated: the same traffic)."""
    return {"profile": cfg.profile, "dataset": cfg.dataset, "input_tokens": cfg.input_tokens,
            "output_tokens": cfg.output_tokens, "prefix_tokens": cfg.prefix_tokens, "prefix_groups": cfg.prefix_groups,
            "tokenizer": cfg.tokenizer, "seed": cfg.seed, "api": cfg.api,
            "overrides": dict(cfg.profile_overrides) or None, "prompt_salt": cfg.prompt_salt or 0}


def with_prompt_salt(cfg: RunConfig) -> RunConfig:
    """``cfg`` with a prompt salt: its own, or a new random one (a measured run's default)."""
    if cfg.prompt_salt is not None:
        return cfg
    return cfg.model_copy(update={"prompt_salt": secrets.randbelow(2**31 - 2) + 1})


def build_workload(cfg: RunConfig) -> Any:
    from infermeter.workload import build_workload as build

    return build(**workload_args(cfg))


def specs_for(cfg: RunConfig) -> Any:
    """The run's request specs (module level, so worker processes and Ray actors can rebuild them)."""
    return iter(build_workload(cfg).requests())


def resume_config(run_dir: Path, api_key: str | None) -> RunConfig:
    """The RunConfig of the run in ``run_dir`` (api key from the caller: it was never written)."""
    run = store.read_json(Path(run_dir) / store.RUN)
    if not run.get("soak"):
        raise UserError(f"--resume {run_dir}: only soak runs (with --window/--checkpoint, or >= 1 h) can be resumed; "
                        "`infermeter summarize` rebuilds the summary of any other killed run")
    if (Path(run_dir) / store.SUMMARY).exists() and not store.read_json(Path(run_dir) / store.SUMMARY).get("partial"):
        raise UserError(f"--resume {run_dir}: this run already finished")
    conf = dict(run.get("config") or {})
    conf["api_key"] = api_key
    conf["out"] = str(run_dir)
    try:
        return RunConfig(**conf)
    except ValidationError as exc:
        raise DataError(f"{run_dir}/run.json: config does not load ({exc.errors()[0]['msg']})") from None
