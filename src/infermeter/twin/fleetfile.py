"""Multi-model fleets: a YAML file of pools that differ (model, hardware, replicas or autoscaling, traffic, SLO).

``simulate --fleet FILE`` reads it with :func:`load_fleet`; a bad file is one
:class:`~infermeter.errors.ConfigError` line naming the file, the line and the field::

    pools:
      - {name: small, model: llama-3.1-8b, gpu: h100-sxm, share: 0.8, slo: {ttft_ms: 500, tpot_ms: 50}}
      - {name: large, model: llama-3.1-70b, gpu: 2xh100-sxm:tp2, share: 0.2, replicas: 2,
         slo: {ttft_ms: 2000, tpot_ms: 100}}
    routing: by-model                   # by-model | least-loaded | cascade
    traffic: {rate: 6}                  # the fleet's arrivals, split by share (or --rate)

A pool's traffic is either a ``share`` of the fleet's arrivals (each arrival goes to pool ``i``
with probability ``share_i / sum(shares)``, drawn from the run's seed) or its own arrival process
(``rate``: Poisson, or ``profile``: a piecewise-linear rate ``[[t_s, req_per_s], ...]``, held at its
last rate after the last point). ``gpu`` is one replica's configuration (``2xh100-sxm:tp2``);
``replicas`` copies of it (a configuration holding several replicas, ``8xh100-sxm:tp2``, counts
them all). ``autoscale`` (:class:`Autoscale`) replaces the fixed count by bounds and a rule.

Routing (:mod:`infermeter.twin.fleetroute`): ``by-model`` sends each pool's requests to that pool
(the least-outstanding of its replicas); ``least-loaded`` pools the traffic of every pool serving
one model and sends each request to the least-outstanding replica among them; ``cascade`` (with
``cascade: {from: POOL, to: POOL, escalation: 0.2}``) sends a finished request of ``from`` on to
``to`` with probability ``escalation`` (the small model's answer was not good enough: the large
one answers again, from that moment; a ``to`` pool with no share or rate of its own takes only
escalations).

Shared GPUs: ``gpu_memory_utilization`` per pool splits a GPU's memory between two pools (0.45 +
0.45); the twin then gives each its share of KV cache but does not slow one model's steps by the
other's (it does not model compute contention on a shared GPU).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infermeter.errors import ConfigError
from infermeter.yamlfile import field_error, yaml_mapping

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Autoscale(_Strict):
    """Scale a pool on its queue depth (seed 002: "scale on queue depth, keep 20 % headroom", 60-90 s model load).

    Every ``interval_s`` the pool's queue depth ``q`` (requests sent to it and not finished: in its
    API servers, waiting or running) gives ``desired = clamp(ceil(q * (1 + headroom) / target), min,
    max)``. More than ready + loading: that many replicas start loading, each ready after a delay
    drawn uniformly from ``load_s`` (the model load; a loading replica is paid for and serves
    nothing). Fewer than ready for ``cooldown_s`` in a row: one replica drains (gets no new requests,
    stops when its last one ends)."""

    min: int = Field(1, ge=1, description="fewest ready replicas")
    max: int = Field(ge=1, description="most replicas (ready + loading)")
    headroom: float = Field(0.2, ge=0, le=4, description="capacity kept above the queue depth (0.2 = 20 %)")
    target: float = Field(32.0, gt=0, description="requests in the system per replica the rule aims at")
    load_s: tuple[float, float] = Field((60.0, 90.0), description="model-load delay range, seconds [low, high]")
    interval_s: float = Field(15.0, gt=0, description="seconds between scaling decisions")
    cooldown_s: float = Field(300.0, ge=0, description="seconds the pool must want fewer replicas before one drains")

    @field_validator("load_s", mode="before")
    @classmethod
    def _load(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (float(v), float(v))
        return v

    @model_validator(mode="after")
    def _check(self) -> Autoscale:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        lo, hi = self.load_s
        if not (0 <= lo <= hi):
            raise ValueError(f"load_s [{lo}, {hi}]: need 0 <= low <= high")
        return self


class Pool(_Strict):
    """One pool: a model on one replica's hardware, its replicas, its traffic and its SLO."""

    name: str | None = Field(None, description="pool name (default: the model id)")
    model: str = Field(description="catalog model id")
    gpu: str = Field(description="one replica's hardware configuration, e.g. 2xh100-sxm:tp2")
    replicas: int | None = Field(None, ge=1, description="replicas (default 1; with autoscale: its min)")
    autoscale: Autoscale | None = None
    share: float | None = Field(None, gt=0, description="share of the fleet's arrivals")
    rate: float | None = Field(None, gt=0, description="own Poisson arrivals, requests per second")
    profile: tuple[tuple[float, float], ...] | None = Field(
        None, description="own arrivals: piecewise-linear rate [[t_s, req_per_s], ...]")
    slo: dict[str, float] = Field({}, description="per-request SLO: ttft_ms, tpot_ms, e2e_ms")
    slo_attainment: float = Field(0.95, gt=0, le=1, description="share of requests that must meet slo (plan --fleet)")
    dtype: str = "bf16"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="share of each GPU's memory this pool uses")
    max_num_seqs: int | None = Field(None, ge=1)
    price_per_gpu_hour: float | None = Field(None, ge=0, description="USD per GPU-hour (default: the price catalog)")

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(SLO_KEYS))
        if bad:
            raise ValueError(f"unknown SLO key {bad[0]!r}: use {', '.join(SLO_KEYS)}")
        if any(not (x > 0) for x in v.values()):
            raise ValueError("SLO bounds must be > 0 (milliseconds)")
        return v

    @model_validator(mode="after")
    def _check(self) -> Pool:
        given = [k for k in ("share", "rate", "profile") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of share, rate or profile (got {' and '.join(given)})")
        if self.profile is not None:
            check_profile(self.profile)
        if self.autoscale is not None and self.replicas is not None and not (
                self.autoscale.min <= self.replicas <= self.autoscale.max):
            raise ValueError(f"replicas {self.replicas} outside autoscale [{self.autoscale.min}, {self.autoscale.max}]")
        return self

    @property
    def label(self) -> str:
        return self.name or self.model

    @property
    def own_arrivals(self) -> bool:
        return self.rate is not None or self.profile is not None

    @property
    def initial_replicas(self) -> int:
        if self.replicas is not None:
            return self.replicas
        return self.autoscale.min if self.autoscale is not None else 1

    @property
    def max_replicas(self) -> int:
        return self.autoscale.max if self.autoscale is not None else self.initial_replicas


class Cascade(_Strict):
    source: str = Field(alias="from", description="pool whose finished requests may escalate")
    to: str = Field(description="pool that answers an escalated request again")
    escalation: float = Field(ge=0, le=1, description="share of finished requests escalated")


class Traffic(_Strict):
    rate: float | None = Field(None, gt=0, description="the fleet's Poisson arrivals, requests per second")
    profile: tuple[tuple[float, float], ...] | None = Field(
        None, description="the fleet's piecewise-linear rate [[t_s, req_per_s], ...]")

    @model_validator(mode="after")
    def _check(self) -> Traffic:
        if self.rate is not None and self.profile is not None:
            raise ValueError("give rate or profile, not both")
        if self.profile is not None:
            check_profile(self.profile)
        return self


class FleetFile(_Strict):
    """A fleet file (module docstring)."""

    pools: tuple[Pool, ...] = Field(min_length=1)
    routing: Literal["by-model", "least-loaded", "cascade"] = "by-model"
    cascade: Cascade | None = None
    traffic: Traffic | None = None

    @model_validator(mode="after")
    def _check(self) -> FleetFile:
        names = [p.label for p in self.pools]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pool name {dup[0]!r} is used twice (give each pool a distinct name)")
        if self.routing == "cascade":
            if self.cascade is None:
                raise ValueError("routing: cascade needs cascade: {from: POOL, to: POOL, escalation: RATE}")
            for end in (self.cascade.source, self.cascade.to):
                if end not in names:
                    raise ValueError(f"cascade names pool {end!r}, which is not one of {', '.join(names)}")
            if self.cascade.source == self.cascade.to:
                raise ValueError("cascade: from and to must be different pools")
        elif self.cascade is not None:
            raise ValueError(f"cascade: given with routing {self.routing}; use routing: cascade")
        return self

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.label == name)

    def shares(self) -> list[float]:
        """Each pool's share of the fleet's arrivals (0 for pools with their own; they sum to 1 or all are 0)."""
        raw = [0.0 if p.own_arrivals else (p.share if p.share is not None else 0.0) for p in self.pools]
        to = self.cascade.to if self.cascade is not None else None  # a cascade's target may take only escalations
        open_ = [i for i, p in enumerate(self.pools) if not p.own_arrivals and p.share is None and p.label != to]
        if open_:  # pools with neither split what the others leave (an equal part each)
            left = max(0.0, 1.0 - sum(raw))
            for i in open_:
                raw[i] = left / len(open_) if left > 0 else 1.0 / len(open_)
        total = sum(raw)
        return [x / total for x in raw] if total > 0 else raw


def check_profile(profile: tuple[tuple[float, float], ...]) -> None:
    if not profile:
        raise ValueError("profile needs at least one [t_s, req_per_s] point")
    last = -math.inf
    for t, r in profile:
        if t < 0 or r < 0 or not math.isfinite(t) or not math.isfinite(r):
            raise ValueError(f"profile point [{t}, {r}]: times and rates must be finite and >= 0")
        if t <= last:
            raise ValueError(f"profile times must increase (got {t} after {last})")
        last = t
    if profile[-1][1] <= 0 and all(r <= 0 for _, r in profile):
        raise ValueError("profile: every rate is 0 (nothing would be sent)")


def load_fleet(path: Path | str) -> FleetFile:
    """Read and validate a fleet file; ConfigError naming the file, the line and the field."""
    path = Path(path)
    where = f"fleet file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read ({exc})") from None
    data = yaml_mapping(text, where, "pools: [{model, gpu, share, slo}, ...]")
    try:
        return FleetFile.model_validate(data)
    except ValidationError as exc:
        raise field_error(where, text, exc) from None
