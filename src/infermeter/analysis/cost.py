"""Serving cost from throughput: $ per 1K/1M tokens and per 1M requests, $ per hour and month, tokens per $.

    >>> price = resolve_price(parse_config("4xa100-80gb"), PriceOptions(price_per_hour=16.28))
    >>> r = compute_cost(price, Throughput(output_tokens_per_s=1000, input_tokens_per_s=0, requests_per_s=4))
    >>> round(r.usd_per_1m_output_tokens, 2)                     # 16.28 / (1000 * 3600) * 1e6
    4.52
    >>> r = cost_for_throughput("2xh100-sxm", 2400.0, 4800.0, 9.5, provider="lambda")
    >>> r.price.provider, round(r.usd_per_1m_requests, 2)        # 2 x $3.99 / (9.5 * 3600) * 1e6
    ('lambda', 233.33)

Formulas, with H = hourly price x (1 + overhead) and every rate multiplied by the average
utilization U (the share of measured capacity production traffic really uses):

- ``usd_per_hour = H``; ``usd_per_month = H x 720`` (30-day month, as the published studies use)
- ``usd_per_1m_X = H / (rate_X x U x 3600) x 1e6`` for output, input, total tokens and requests;
  each charges the whole hour to that one unit, so they are alternative views, not parts of a sum
- ``usd_per_1k_output_tokens = usd_per_1m_output_tokens / 1000``;
  ``X_tokens_per_usd = rate_X x U x 3600 / H``

Runs (:func:`load_subject`): the throughput comes from ``summary.json``; for a sweep (a
``steps`` list), from its capacity step (the step the search names, else the one meeting the SLO
with the highest sustained rate: :mod:`infermeter.analysis.sustained`; the step's own entry, or
``steps/<k>/summary.json`` when the entry lacks the throughputs). Rates are the *sustained* ones
(the load, not the drain after it: ``analysis.sustained``), the same figures ``study`` and
``capacity`` use. Every result says whether it was measured, simulated or predicted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from infermeter.analysis.prices import Price, PriceCatalog, PriceOptions, resolve_price
from infermeter.analysis.results import Summary
from infermeter.analysis.sustained import capacity_of, capacity_step, sustained_throughput
from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel.configspec import HardwareConfig, parse_config

HOURS_PER_MONTH = 720.0
T = TypeVar("T")


@dataclass(frozen=True)
class Throughput:
    """Rates a deployment sustains: tokens/s and requests/s (goodput: requests/s meeting the SLO)."""

    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float
    total_tokens_per_s: float | None = None
    good_requests_per_s: float | None = None

    @property
    def total(self) -> float:
        if self.total_tokens_per_s is not None:
            return self.total_tokens_per_s
        return self.input_tokens_per_s + self.output_tokens_per_s

    def to_json(self) -> dict[str, float | None]:
        return {"output_tokens_per_s": self.output_tokens_per_s, "input_tokens_per_s": self.input_tokens_per_s,
                "total_tokens_per_s": self.total, "requests_per_s": self.requests_per_s,
                "good_requests_per_s": self.good_requests_per_s}


@dataclass(frozen=True)
class Subject:
    """What is priced: a measured or simulated run, or a prediction, with its throughput."""

    label: str
    source: str  # measured | simulated | predicted
    throughput: Throughput
    hardware: str | None = None
    model: str | None = None
    profile: str | None = None
    run_dir: str | None = None
    basis: str = ""  # e.g. which sweep step was used
    valid: bool = True
    invalid_reasons: tuple[str, ...] = ()
    # the sustained capacity (analysis.sustained.capacity_of) a replica is sized by; None: use the throughput
    capacity_rps: float | None = None
    capacity_basis: str | None = None


@dataclass(frozen=True)
class CostResult:
    subject: Subject
    hardware: str
    price: Price
    overhead: float
    utilization: float
    usd_per_hour: float
    usd_per_month: float
    usd_per_1k_output_tokens: float
    usd_per_1m_output_tokens: float
    usd_per_1m_input_tokens: float | None
    usd_per_1m_total_tokens: float
    usd_per_1m_requests: float
    usd_per_1m_good_requests: float | None
    output_tokens_per_usd: float
    total_tokens_per_usd: float
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        s = self.subject
        return {
            "label": s.label, "run_dir": s.run_dir, "source": s.source, "model": s.model,
            "hardware": self.hardware, "profile": s.profile, "basis": s.basis,
            "valid": s.valid, "invalid_reasons": list(s.invalid_reasons),
            "usd_per_hour": self.usd_per_hour, "usd_per_month": self.usd_per_month,
            "usd_per_1k_output_tokens": self.usd_per_1k_output_tokens,
            "usd_per_1m_output_tokens": self.usd_per_1m_output_tokens,
            "usd_per_1m_input_tokens": self.usd_per_1m_input_tokens,
            "usd_per_1m_total_tokens": self.usd_per_1m_total_tokens,
            "usd_per_1m_requests": self.usd_per_1m_requests,
            "usd_per_1m_good_requests": self.usd_per_1m_good_requests,
            "output_tokens_per_usd": self.output_tokens_per_usd, "total_tokens_per_usd": self.total_tokens_per_usd,
            "price_usd_per_hour": self.price.usd_per_hour,
            "price_source": self.price.source, "price_date": self.price.date.isoformat() if self.price.date else None,
            "price": self.price.to_json(),
            "overhead": self.overhead, "utilization": self.utilization, "hours_per_month": HOURS_PER_MONTH,
            "throughput": s.throughput.to_json(), "notes": list(self.notes),
        }


def check_inputs(overhead: float, utilization: float) -> None:
    if not (math.isfinite(overhead) and overhead >= 0):
        raise ConfigError(f"--overhead {overhead}: must be a fraction >= 0 (0.2 adds 20% to the hourly price)")
    if not (math.isfinite(utilization) and 0 < utilization <= 1):
        raise ConfigError(f"--utilization {utilization}: must be in (0, 1] (1 = the measured throughput is used in full)")


def compute_cost(price: Price, throughput: Throughput, subject: Subject | None = None, *,
                 overhead: float = 0.0, utilization: float = 1.0) -> CostResult:
    """Every cost figure for one deployment priced at ``price`` sustaining ``throughput``."""
    check_inputs(overhead, utilization)
    subject = subject or Subject(label=price.config, source="predicted", throughput=throughput)
    who = subject.run_dir or subject.label
    t = throughput
    for name, value in (("output_token_throughput", t.output_tokens_per_s), ("request_throughput", t.requests_per_s)):
        if not (math.isfinite(value) and value > 0):
            raise DataError(f"{who}: {name} is {value}; cost per unit needs a throughput above zero")
    for name, maybe in (("input_token_throughput", t.input_tokens_per_s), ("total_token_throughput", t.total),
                        ("goodput", t.good_requests_per_s)):
        if maybe is not None and not (math.isfinite(maybe) and maybe >= 0):
            raise DataError(f"{who}: {name} is {maybe}; it must be >= 0")
    hourly = price.usd_per_hour * (1 + overhead)

    def per_million(rate: float | None) -> float | None:
        return hourly / (rate * utilization * 3600) * 1e6 if rate else None

    out = hourly / (t.output_tokens_per_s * utilization * 3600) * 1e6
    total = per_million(t.total)
    req = per_million(t.requests_per_s)
    assert total is not None and req is not None  # both rates are > 0 here
    return CostResult(
        subject=subject, hardware=price.config, price=price, overhead=overhead, utilization=utilization,
        usd_per_hour=hourly, usd_per_month=hourly * HOURS_PER_MONTH,
        usd_per_1k_output_tokens=out / 1000, usd_per_1m_output_tokens=out,
        usd_per_1m_input_tokens=per_million(t.input_tokens_per_s), usd_per_1m_total_tokens=total,
        usd_per_1m_requests=req, usd_per_1m_good_requests=per_million(t.good_requests_per_s),
        output_tokens_per_usd=1e6 / out, total_tokens_per_usd=1e6 / total, notes=price.notes)


def cost_for_throughput(hardware_config: str, output_tokens_per_s: float, input_tokens_per_s: float,
                        requests_per_s: float, provider: str | None = None, *, options: PriceOptions | None = None,
                        catalog: PriceCatalog | None = None, overhead: float = 0.0, utilization: float = 1.0,
                        source: str = "predicted", label: str | None = None, model: str | None = None,
                        profile: str | None = None, today: dt.date | None = None) -> CostResult:
    """Price a configuration at given rates (used by ``plan --cost``); ``provider`` overrides ``options``."""
    config = parse_config(hardware_config)
    options = options or PriceOptions()
    if provider is not None:
        options = options.model_copy(update={"provider": provider})
    tp = Throughput(output_tokens_per_s=output_tokens_per_s, input_tokens_per_s=input_tokens_per_s,
                    requests_per_s=requests_per_s)
    subject = Subject(label=label or config.label, source=source, throughput=tp, hardware=config.label,
                      model=model, profile=profile)
    price = resolve_price(config, options, catalog, today)
    return compute_cost(price, tp, subject, overhead=overhead, utilization=utilization)


# ---- run directories ---------------------------------------------------------------------

def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path.parent}: no {what} (is it a run directory?)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object")
    return data


def _rate(d: dict[str, Any], key: str, where: str, required: bool = True) -> float | None:
    value = d.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: field {key!r} is {value!r}; expected a number")
    return float(value)


def throughput_of(row: dict[str, Any], where: str) -> Throughput:
    """The rates in one summary.json object or sweep step row (``analysis.sustained.Row``), as JSON: a rate
    missing or not a number is a DataError naming ``where`` and the field."""
    return Throughput(
        output_tokens_per_s=_rate(row, "output_token_throughput", where) or 0.0,
        input_tokens_per_s=_rate(row, "input_token_throughput", where) or 0.0,
        requests_per_s=_rate(row, "request_throughput", where) or 0.0,
        total_tokens_per_s=_rate(row, "total_token_throughput", where, required=False),
        good_requests_per_s=_rate(row, "goodput", where, required=False))


def pick_sweep_step(run_dir: Path, steps: Sequence[Any], summary: Summary | None = None
                    ) -> tuple[dict[str, Any], str, int]:
    """The sweep's capacity step (``analysis.sustained.capacity_step``: the step the search names, else the
    step meeting the SLO with the highest sustained rate), its summary and the basis text."""
    k = capacity_step(summary or Summary(), steps)
    passing = sum(1 for e in steps if isinstance(e, dict) and e.get("meets_slo") is True)
    if k is None:
        raise DataError(f"{run_dir}: none of the sweep's {len(steps)} steps met the SLO; nothing to price")
    step = dict(steps[k])
    if "output_token_throughput" not in step:
        sub = run_dir / str(step.get("dir", f"steps/{k}")) / "summary.json"
        step = {**_read_json(sub, "step summary.json"), **step}
    _rate(step, "output_token_throughput", f"{run_dir} step {k}")
    offered = step.get("offered_rate")
    at = f", offered {offered:g} req/s" if isinstance(offered, (int, float)) else ""
    cap = summary.get("capacity") if summary is not None else None  # a search's own section
    named = isinstance(cap, dict) and cap.get("step") == k
    why = "the search's capacity step" if named else f"highest sustained rate among {passing} steps meeting the SLO"
    return step, f"sweep step {k}{at}: {why}", k


def load_subject(run_dir: Path | str) -> Subject:
    """A run directory's throughput, sustained capacity and labels (see the module docstring for sweeps)."""
    run_dir = Path(run_dir)
    raw = _read_json(run_dir / "summary.json", "summary.json")
    run = _read_json(run_dir / "run.json", "run.json") if (run_dir / "run.json").exists() else {}
    steps = raw.get("steps")
    basis, measured = "run", raw
    summary = None
    if isinstance(steps, list) and steps:
        summary = Summary.from_json(raw, f"{run_dir}/summary.json")
        measured, basis, k = pick_sweep_step(run_dir, steps, summary)
    where = f"{run_dir}/summary.json" + (" (chosen step)" if measured is not raw else "")
    tp = throughput_of(measured, where)  # the rates first: a malformed one is named as such
    summary = summary or Summary.from_json(raw, f"{run_dir}/summary.json")
    cap = capacity_of(summary, measured, k) if measured is not raw else capacity_of(summary)

    def meta(key: str) -> Any:
        return raw.get(key) if raw.get(key) is not None else run.get(key)

    rates = sustained_throughput(measured)
    if rates["requests_per_s"] and rates["output_tokens_per_s"]:  # the sustained rates, not the drain's
        tp = Throughput(output_tokens_per_s=rates["output_tokens_per_s"],
                        input_tokens_per_s=rates["input_tokens_per_s"] or 0.0, requests_per_s=rates["requests_per_s"],
                        total_tokens_per_s=rates["total_tokens_per_s"], good_requests_per_s=tp.good_requests_per_s)
    return Subject(
        label=str(meta("label") or run_dir.name), source=str(meta("source") or "measured"),
        throughput=tp, hardware=meta("hardware"), model=meta("model"),
        profile=meta("profile"), run_dir=str(run_dir), basis=basis,
        valid=bool(measured.get("valid", summary.valid)),
        invalid_reasons=tuple(str(r) for r in measured.get("invalid_reasons") or summary.invalid_reasons),
        capacity_rps=cap.requests_per_s, capacity_basis=cap.basis)


def hardware_for(subject: Subject, flag: str | None) -> HardwareConfig:
    """``--hardware`` when given, else the run's own ``hardware`` field; an error names the run."""
    text = flag or subject.hardware
    if not flag and subject.source == "emulated":
        raise DataError(f"{subject.run_dir or subject.label}: an emulated run (infermeter's digital twin of "
                        f"{subject.hardware or 'a GPU'} on this machine), not a measurement of that hardware; "
                        f"pass --hardware CONFIG to price it as if it were")
    if not text:
        raise DataError(f"{subject.run_dir or subject.label}: no hardware in run.json or summary.json; "
                        f"pass --hardware CONFIG (e.g. 4xa100-80gb:tp4)")
    return parse_config(text)


def check_override_scope(configs: Sequence[HardwareConfig], options: PriceOptions) -> None:
    """A command-line price fits one configuration (or one GPU type); more is an error naming them."""
    labels = sorted({c.label for c in configs})
    if options.price_per_hour is not None and len(labels) > 1:
        raise ConfigError(f"--price-per-hour prices one configuration, but there are {len(labels)}: "
                          f"{', '.join(labels)}; use --price-per-gpu-hour or --prices FILE")
    gpus = sorted({c.hardware for c in configs})
    if options.price_per_gpu_hour is not None and len(gpus) > 1:
        raise ConfigError(f"--price-per-gpu-hour prices one GPU type, but there are {len(gpus)}: {', '.join(gpus)}; "
                          f"use --prices FILE")


def price_subjects(subjects: Sequence[Subject], hardware: str | None, options: PriceOptions,
                   catalog: PriceCatalog | None = None, today: dt.date | None = None) -> list[tuple[Subject, Price]]:
    """Resolve each subject's configuration and its price (one lookup per configuration)."""
    configs = [hardware_for(s, hardware) for s in subjects]
    check_override_scope(configs, options)
    cache: dict[str, Price] = {}
    out = []
    for s, c in zip(subjects, configs):
        if c.label not in cache:
            cache[c.label] = resolve_price(c, options, catalog, today)
        out.append((s, cache[c.label]))
    return out


def cost_runs(run_dirs: Iterable[Path | str], hardware: str | None = None, options: PriceOptions | None = None, *,
              overhead: float = 0.0, utilization: float = 1.0, catalog: PriceCatalog | None = None,
              today: dt.date | None = None) -> list[CostResult]:
    """``infermeter cost`` as a function: one :class:`CostResult` per run directory."""
    check_inputs(overhead, utilization)
    subjects = [load_subject(d) for d in run_dirs]
    priced = price_subjects(subjects, hardware, options or PriceOptions(), catalog, today)
    return [compute_cost(p, s.throughput, s, overhead=overhead, utilization=utilization) for s, p in priced]


# ---- best value --------------------------------------------------------------------------

@dataclass(frozen=True)
class Pick(Generic[T]):
    """The best item of a group by some cost, and how far ahead of the runner-up it is."""

    group: str
    best: T
    best_value: float
    runner_up: T | None = None
    runner_up_value: float | None = None

    @property
    def margin(self) -> float | None:
        return None if self.runner_up_value is None else self.runner_up_value - self.best_value

    @property
    def margin_pct(self) -> float | None:
        m = self.margin
        return None if m is None or self.best_value == 0 else m / self.best_value


def best_by_group(items: Iterable[T], value: Callable[[T], float], group: Callable[[T], str]) -> dict[str, Pick[T]]:
    """Lowest ``value`` per group (ties: first given), with the runner-up."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(group(item), []).append(item)
    picks: dict[str, Pick[T]] = {}
    for name, members in groups.items():
        ranked = sorted(members, key=value)
        second = ranked[1] if len(ranked) > 1 else None
        picks[name] = Pick(name, ranked[0], value(ranked[0]), second, value(second) if second is not None else None)
    return picks


def profile_of(subject: Subject) -> str:
    return subject.profile or "(no profile)"
