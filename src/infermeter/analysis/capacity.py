"""Capacity: replicas for a daily volume, fleet cost, break-even bands and the best value per profile.

    >>> # peak 23.15 req/s over 8 usable req/s per replica (10 x (1 - 0.2)), rounded up:
    >>> replicas_needed(1_000_000, capacity_rps=10.0, peak_factor=2.0, headroom=0.2)
    3
    >>> candidates = candidates_from([       # a replica's capacity: here each plan's predicted request rate
    ...     cost_for_throughput("4xa100-80gb:tp4", 1000.0, 2000.0, 4.0, options=PriceOptions(price_per_hour=16.0)),
    ...     cost_for_throughput("2xh100-sxm:tp2", 1600.0, 3200.0, 6.4, options=PriceOptions(price_per_hour=12.0))])
    >>> sizing = size(candidates[0], requests_per_day=2_000_000, peak_factor=1.5, headroom=0.2)
    >>> sizing.replicas, sizing.usd_per_month     # ceil(34.7 req/s peak / 3.2 usable) = 11 x $16/h x 720 h
    (11, 126720.0)
    >>> bands = break_even(candidates, low=100_000, high=50_000_000, peak_factor=1.5, headroom=0.2)
    >>> [(b.winner, b.low, b.high) for b in bands.bands]      # cheaper per request at every volume
    [('2xh100-sxm:tp2 [predicted]', 100000, 50000000)]

Rules:
- A replica is one deployment of the configuration that was measured or planned (e.g. all of
  ``4xa100-80gb:tp4``). Its capacity is the run's *sustained capacity*, the one definition in
  :mod:`infermeter.analysis.sustained` that ``study``, ``cost`` and ``find-max`` use too: a
  search's (study cell, find-max, sweep) capacity step's sustained rate; one run's sustained
  goodput with an SLO, else its sustained rate (the load, not the drain after it). A plan's is
  its predicted saturation throughput.
- ``replicas = max(1, ceil(peak / (capacity x (1 - headroom))))`` where
  ``peak = requests_per_day / 86400 x peak_factor``. Headroom is applied once, here, as the
  share of each replica's capacity kept free; ``--utilization`` is not applied on top.
- Fleet cost = replicas x the configuration's hourly price (with overhead); a month is 720 h, so
  ``usd_per_1m_requests = usd_per_month / (requests_per_day x 30) x 1e6`` (idle capacity included).
- Break-even: fleet cost is a step function of volume, constant between the volumes where some
  configuration needs one more replica (k x capacity x (1 - headroom) x 86400 / peak_factor).
  Evaluating the cheapest configuration on each such interval gives the bands exactly; bands
  are right-closed ("up to and including V req/day"); ties go to the configuration given first.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infermeter.analysis.cost import HOURS_PER_MONTH, CostResult, cost_for_throughput, profile_of
from infermeter.analysis.prices import PriceOptions
from infermeter.errors import ConfigError, DataError, UserError
from infermeter.perfmodel.configspec import parse_config

SECONDS_PER_DAY = 86400.0
DAYS_PER_MONTH = HOURS_PER_MONTH / 24
_EPS = 1e-9


def check_volume_inputs(requests_per_day: float, peak_factor: float, headroom: float) -> None:
    if not (math.isfinite(requests_per_day) and requests_per_day > 0):
        raise ConfigError(f"--requests-per-day {requests_per_day}: must be above zero")
    if not (math.isfinite(peak_factor) and peak_factor >= 1):
        raise ConfigError(f"--peak-factor {peak_factor}: must be >= 1 (peak rate / average rate)")
    if not (math.isfinite(headroom) and 0 <= headroom < 1):
        raise ConfigError(f"--headroom {headroom}: must be a fraction in [0, 1) of capacity kept free")


def replicas_needed(requests_per_day: float, capacity_rps: float, peak_factor: float = 1.0,
                    headroom: float = 0.2) -> int:
    """Replicas that serve ``requests_per_day`` at its peak rate, each loaded to ``1 - headroom``."""
    check_volume_inputs(requests_per_day, peak_factor, headroom)
    if not (math.isfinite(capacity_rps) and capacity_rps > 0):
        raise DataError(f"capacity {capacity_rps} req/s: a replica must serve more than zero requests/s")
    peak = requests_per_day / SECONDS_PER_DAY * peak_factor
    return max(1, math.ceil(peak / (capacity_rps * (1 - headroom)) - _EPS))


@dataclass(frozen=True)
class Candidate:
    """One configuration (a run or a plan) that could serve the volume."""

    name: str
    cost: CostResult
    capacity_rps: float
    capacity_basis: str

    @property
    def profile(self) -> str:
        return profile_of(self.cost.subject)

    @property
    def source(self) -> str:
        return self.cost.subject.source

    def requests_per_day_per_replica(self, peak_factor: float, headroom: float) -> float:
        return self.capacity_rps * (1 - headroom) * SECONDS_PER_DAY / peak_factor


def candidates_from(costs: Sequence[CostResult]) -> list[Candidate]:
    """Capacity per replica from each cost result; names are ``CONFIG [source]``, made unique."""
    out: list[Candidate] = []
    seen: dict[tuple[str, str], int] = {}
    for c in costs:
        t = c.subject.throughput
        if c.subject.source == "predicted":
            cap, basis = t.requests_per_s, "saturation (predicted)"
        elif c.subject.capacity_rps is not None:
            cap, basis = c.subject.capacity_rps, c.subject.capacity_basis or "sustained capacity"
        elif t.good_requests_per_s is not None:
            cap, basis = t.good_requests_per_s, "goodput (SLO)"
        else:
            cap, basis = t.requests_per_s, "throughput (no SLO)"
        if not cap > 0:
            raise DataError(f"{c.subject.run_dir or c.subject.label}: {basis} is {cap}; it cannot serve any volume")
        name = f"{c.hardware} [{c.subject.source}]"
        key = (profile_of(c.subject), name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            name = f"{name} ({c.subject.label})"
        out.append(Candidate(name, c, cap, basis))
    return out


@dataclass(frozen=True)
class Sizing:
    candidate: Candidate
    requests_per_day: float
    peak_rps: float
    replicas: int
    usd_per_hour: float
    usd_per_month: float
    usd_per_1m_requests: float

    @property
    def gpus(self) -> int:
        return self.replicas * parse_config(self.candidate.cost.hardware).count

    def to_json(self) -> dict[str, Any]:
        c = self.candidate
        return {"config": c.name, "hardware": c.cost.hardware, "source": c.source, "profile": c.profile,
                "label": c.cost.subject.label, "run_dir": c.cost.subject.run_dir,
                "capacity_rps_per_replica": c.capacity_rps, "capacity_basis": c.capacity_basis,
                "requests_per_day": self.requests_per_day, "peak_rps": self.peak_rps,
                "replicas": self.replicas, "gpus": self.gpus, "usd_per_hour": self.usd_per_hour,
                "usd_per_month": self.usd_per_month, "usd_per_1m_requests": self.usd_per_1m_requests,
                "usd_per_1m_requests_at_capacity": c.cost.usd_per_1m_requests,
                "price_source": c.cost.price.source,
                "price_date": c.cost.price.date.isoformat() if c.cost.price.date else None}


def size(candidate: Candidate, requests_per_day: float, peak_factor: float = 1.0, headroom: float = 0.2) -> Sizing:
    """Replicas and fleet cost for ``candidate`` at ``requests_per_day``."""
    n = replicas_needed(requests_per_day, candidate.capacity_rps, peak_factor, headroom)
    hourly = n * candidate.cost.usd_per_hour
    monthly = hourly * HOURS_PER_MONTH
    return Sizing(candidate, requests_per_day, requests_per_day / SECONDS_PER_DAY * peak_factor, n, hourly,
                  monthly, monthly / (requests_per_day * DAYS_PER_MONTH) * 1e6)


@dataclass(frozen=True)
class Band:
    """``winner`` is cheapest for every volume in (low, high] (the first band includes ``low``)."""

    low: float
    high: float
    winner: str
    replicas_at_high: int
    usd_per_month_at_high: float


@dataclass(frozen=True)
class BreakEven:
    group: str
    bands: tuple[Band, ...]
    grid: tuple[tuple[float, dict[str, float], str], ...]  # volume, monthly cost per name, cheapest

    @property
    def crossings(self) -> list[tuple[float, str, str]]:
        """(volume, cheaper up to it, cheaper above it) for each change of winner."""
        return [(a.high, a.winner, b.winner) for a, b in zip(self.bands, self.bands[1:])]

    def to_json(self) -> dict[str, Any]:
        return {"bands": [{"from_requests_per_day": b.low, "to_requests_per_day": b.high, "config": b.winner,
                           "replicas_at_top": b.replicas_at_high, "usd_per_month_at_top": b.usd_per_month_at_high}
                          for b in self.bands],
                "crossings": [{"requests_per_day": v, "below": lo, "above": hi} for v, lo, hi in self.crossings],
                "grid": [{"requests_per_day": v, "usd_per_month": costs, "cheapest": best}
                         for v, costs, best in self.grid]}


def volume_grid(low: float, high: float) -> list[float]:
    """1-2-5 steps from ``low`` to ``high`` (both included)."""
    out = {low, high}
    decade = 10.0 ** math.floor(math.log10(low))
    while decade <= high:
        out.update(m * decade for m in (1, 2, 5) if low <= m * decade <= high)
        decade *= 10
    return sorted(out)


def _cheapest(cands: Sequence[Candidate], volume: float, peak_factor: float, headroom: float) -> tuple[int, Sizing]:
    sized = [(size(c, volume, peak_factor, headroom), i) for i, c in enumerate(cands)]
    s, i = min(sized, key=lambda x: (x[0].usd_per_month, x[1]))
    return i, s


def break_even(cands: Sequence[Candidate], low: float = 1e5, high: float = 5e7, peak_factor: float = 1.0,
               headroom: float = 0.2, group: str = "") -> BreakEven:
    """Which candidate is cheapest across ``[low, high]`` requests/day, as exact bands."""
    if not (0 < low < high and math.isfinite(high)):
        raise ConfigError(f"volume range {low:g}..{high:g} requests/day: need 0 < low < high")
    if not cands:
        raise UserError("break-even needs at least one configuration")
    check_volume_inputs(low, peak_factor, headroom)
    points = {low, high}
    for c in cands:
        per = c.requests_per_day_per_replica(peak_factor, headroom)
        k0, k1 = math.floor(low / per) + 1, math.ceil(high / per)
        if k1 - k0 > 200_000:
            raise ConfigError(f"{c.name}: {k1 - k0} replica steps between {low:g} and {high:g} requests/day; "
                              f"narrow the volume range")
        points.update(k * per for k in range(k0, k1) if low < k * per < high)
    ordered = sorted(points)
    bands: list[Band] = []
    for lo, hi in zip(ordered, ordered[1:]):
        i, s = _cheapest(cands, hi, peak_factor, headroom)
        name = cands[i].name
        if bands and bands[-1].winner == name:
            bands[-1] = Band(bands[-1].low, hi, name, s.replicas, s.usd_per_month)
        else:
            bands.append(Band(lo, hi, name, s.replicas, s.usd_per_month))
    grid = []
    for v in volume_grid(low, high):
        costs = {c.name: size(c, v, peak_factor, headroom).usd_per_month for c in cands}
        grid.append((v, costs, cands[_cheapest(cands, v, peak_factor, headroom)[0]].name))
    return BreakEven(group, tuple(bands), tuple(grid))


def predicted_throughput(model: str, config: str, input_tokens: int, output_tokens: int,
                         dtype: str = "bf16") -> dict[str, float]:
    """Predicted saturation rates of one deployment of ``config`` serving ``model`` (``infermeter.perfmodel``).

    Returns ``output_tokens_per_s``, ``input_tokens_per_s``, ``requests_per_s`` and
    ``total_tokens_per_s`` for the whole configuration with every replica full
    (``perfmodel.serving.saturation``); the perfmodel is imported only when a plan is priced.
    """
    if input_tokens < 0 or output_tokens <= 0:
        raise ConfigError(f"workload {input_tokens}:{output_tokens} tokens: need input >= 0 and output > 0")
    try:
        from infermeter.perfmodel import build_deployment
        from infermeter.perfmodel.serving import saturation
    except ImportError as exc:
        raise UserError(f"--plan {config}: the performance model cannot predict saturation throughput ({exc})") from None
    d = build_deployment(model, config, dtype=dtype)
    if not d.fits:
        raise ConfigError(f"--plan {config}: {model} ({dtype}) does not fit: {d.why_not}")
    out = float(saturation(d, input_tokens, output_tokens)[0])
    if not (math.isfinite(out) and out > 0):
        raise DataError(f"--plan {config}: the performance model predicts {out} output tokens/s for {model}")
    rps = out / output_tokens
    return {"output_tokens_per_s": out, "input_tokens_per_s": rps * input_tokens, "requests_per_s": rps,
            "total_tokens_per_s": out + rps * input_tokens}


def planned_costs(plans: Sequence[str], model: str | None, workloads: Sequence[tuple[str, int, int]],
                  dtype: str, options: PriceOptions, overhead: float, today: dt.date) -> list[CostResult]:
    """Predicted costs of configurations nobody measured: each ``plan`` serving ``model`` at its predicted
    saturation rate for each ``(profile, input tokens, output tokens)`` workload (labelled *predicted*)."""
    if not plans:
        return []
    if not model:
        raise ConfigError("--plan needs --model (the model the configurations would serve)")
    out = []
    for config in plans:
        for profile, i, o in workloads:
            rates = predicted_throughput(model, config, i, o, dtype=dtype)
            out.append(cost_for_throughput(
                config, rates["output_tokens_per_s"], rates["input_tokens_per_s"], rates["requests_per_s"],
                options=options, overhead=overhead, source="predicted", label=f"plan {config} {profile}",
                model=model, profile=profile, today=today))
    return out
