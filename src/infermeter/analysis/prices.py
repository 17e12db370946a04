"""Price catalog: dated hourly prices per provider and instance, overrides, and the price of a configuration.

    >>> from infermeter.perfmodel.configspec import parse_config
    >>> catalog = load_catalog()                       # packaged data/prices.yaml
    >>> price = resolve_price(parse_config("4xa100-80gb:tp4"), PriceOptions(provider="azure"), catalog)
    >>> price.instance, price.billing, price.usd_per_hour    # 4 of an 8-GPU instance's GPUs, per GPU-hour
    ('Standard_ND96amsr_A100_v4', 'per-gpu', 16.385)
    >>> price.date_text                                # a date, or a note saying why there is none
    'undated (SkyPilot legacy v6 catalog, commit 098741e7)'
    >>> resolve_price(parse_config("4xa100-80gb"), PriceOptions(price_per_hour=16.28)).usd_per_hour
    16.28

Promises:
- Every :class:`Price` carries the offer it came from, its source and its date (or a note saying
  it is undated); nothing is priced without one.
- Choosing an offer: offers for the configuration's GPU (and ``provider``/``instance`` when
  given) whose node holds a tensor-parallel group (``gpus`` or ``max_gpus_per_node`` >= tp);
  without a provider or instance, only ``tier: list`` offers compete when any exist (community and
  marketplace prices are used only when asked for by provider or instance). The cheapest cost for
  the whole configuration wins; ties go to the first offer in the file.
- Billing: ``per-gpu`` (default) charges count x the offer's $/GPU-h, as published studies do;
  ``whole-instance`` rounds up to whole instances of multi-GPU offers. A note says when per-GPU
  billing takes part of an instance that is only sold whole.
- Overrides: ``--prices FILE`` (same schema) replaces offers with the same (provider, instance)
  and adds the rest; ``--price-per-hour`` (whole configuration) or ``--price-per-gpu-hour`` skip
  the catalog and are dated today. Commitments (``--commitment NAME``) and ``--discount F``
  lower the price and are named in the output.
- Errors name the input: unknown hardware, unknown provider, negative prices, bad files.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infermeter.errors import ConfigError, DataError
from infermeter.perfmodel.configspec import HardwareConfig
from infermeter.yamlfile import line_of, safe_load, yaml_problem

STALE_AFTER_DAYS = 180


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Offer(_Frozen):
    """One priced unit: an instance type (``gpus`` GPUs) or a per-GPU offer (``gpus: 1``)."""

    provider: str
    instance: str
    gpu: str
    gpus: int = Field(ge=1, description="GPUs in the priced unit")
    max_gpus_per_node: int | None = Field(None, ge=1, description="for per-GPU offers: the largest node")
    usd_per_hour: float | None = Field(None, description="price of the unit, USD per hour")
    usd_per_gpu_hour: float | None = Field(None, description="price per GPU, USD per hour")
    region: str | None = None
    tier: Literal["list", "community", "marketplace"] = "list"
    source: str
    date: dt.date | None
    date_note: str | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Offer:
        if self.usd_per_hour is None and self.usd_per_gpu_hour is None:
            raise ValueError("give usd_per_hour or usd_per_gpu_hour")
        for name in ("usd_per_hour", "usd_per_gpu_hour"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive price, got {value}")
        if self.usd_per_hour and self.usd_per_gpu_hour and abs(self.usd_per_hour - self.usd_per_gpu_hour * self.gpus) > 0.01 * self.usd_per_hour:
            raise ValueError(f"usd_per_hour {self.usd_per_hour} != usd_per_gpu_hour x gpus ({self.usd_per_gpu_hour} x {self.gpus})")
        if self.date is None and not self.date_note:
            raise ValueError("date is null: add a date_note saying why and what dates it")
        return self

    @property
    def unit_usd_per_hour(self) -> float:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        assert self.usd_per_gpu_hour is not None  # the validator guarantees one of the two
        return self.usd_per_gpu_hour * self.gpus

    @property
    def gpu_usd_per_hour(self) -> float:
        return self.usd_per_gpu_hour if self.usd_per_gpu_hour is not None else self.unit_usd_per_hour / self.gpus

    @property
    def node_gpus(self) -> int:
        return max(self.gpus, self.max_gpus_per_node or 0)


class Commitment(_Frozen):
    discount: float = Field(ge=0, lt=1, description="fraction off the on-demand price")
    source: str
    date: dt.date | None
    note: str | None = None


class Provider(_Frozen):
    name: str
    commitments: dict[str, Commitment] = {}
    note: str | None = None


class Gap(_Frozen):
    provider: str
    instance: str
    gpu: str
    note: str


class CatalogFile(_Frozen):
    schema_version: Literal[1]
    references: dict[str, str] = {}
    providers: dict[str, Provider] = {}
    offers: list[Offer] = []
    gaps: list[Gap] = []


@dataclass(frozen=True)
class Price:
    """The hourly price of one configuration, with where it came from."""

    config: str
    usd_per_hour: float  # whole configuration, after any discount, before overhead
    list_usd_per_hour: float
    usd_per_gpu_hour: float  # list price per GPU of the chosen offer
    provider: str
    instance: str
    billing: str  # per-gpu | whole-instance | override
    source: str
    date: dt.date | None
    date_note: str | None = None
    discount: float = 0.0
    discount_name: str | None = None
    notes: tuple[str, ...] = ()
    references: tuple[tuple[str, str], ...] = ()  # (key, full citation) for keys named in ``source``

    @property
    def date_text(self) -> str:
        if self.date:
            return self.date.isoformat()
        return "undated" + (f" ({self.date_note})" if self.date_note else "")

    def age_days(self, today: dt.date) -> int | None:
        return (today - self.date).days if self.date else None

    def describe(self) -> str:
        disc = f", {self.discount_name} -{self.discount:.0%}" if self.discount else ""
        return (f"{self.config}: ${self.usd_per_hour:,.2f}/h ({self.provider} {self.instance}, "
                f"${self.usd_per_gpu_hour:,.4g}/GPU-h, {self.billing}{disc}); "
                f"source: {self.source}; date: {self.date_text}")

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "usd_per_hour": self.usd_per_hour,
                "list_usd_per_hour": self.list_usd_per_hour, "usd_per_gpu_hour": self.usd_per_gpu_hour,
                "provider": self.provider, "instance": self.instance, "billing": self.billing,
                "source": self.source, "date": self.date.isoformat() if self.date else None,
                "date_note": self.date_note, "discount": self.discount,
                "discount_name": self.discount_name, "notes": list(self.notes),
                "references": dict(self.references)}


@dataclass(frozen=True)
class PriceCatalog:
    providers: dict[str, Provider]
    offers: tuple[Offer, ...]
    gaps: tuple[Gap, ...] = ()
    references: tuple[tuple[str, str], ...] = ()

    def hardware_ids(self) -> list[str]:
        return sorted({o.gpu for o in self.offers})

    def merged(self, other: PriceCatalog) -> PriceCatalog:
        """``other`` wins: same (provider, instance) offers are replaced, new ones added."""
        keys = {(o.provider, o.instance) for o in other.offers}
        offers = tuple(o for o in self.offers if (o.provider, o.instance) not in keys) + other.offers
        providers = dict(self.providers)
        for pid, prov in other.providers.items():
            old = providers.get(pid)
            commits = {**(old.commitments if old else {}), **prov.commitments}
            providers[pid] = prov.model_copy(update={"commitments": commits})
        priced = {(o.provider, o.gpu) for o in other.offers}
        gaps = tuple(g for g in self.gaps if (g.provider, g.gpu) not in priced) + other.gaps
        return PriceCatalog(providers, offers, gaps, tuple({**dict(self.references), **dict(other.references)}.items()))

    def choose(self, config: HardwareConfig, provider: str | None = None, instance: str | None = None,
               whole_instances: bool = False) -> Price:
        """The cheapest fitting offer for ``config`` (see the module docstring for the rules)."""
        what = config.label
        hw = config.hardware
        if hw not in self.hardware_ids():
            raise ConfigError(f"hardware {hw!r} (in {what!r}) has no price in the catalog; known: "
                              f"{', '.join(self.hardware_ids())}; or pass --price-per-hour / --price-per-gpu-hour")
        cands = [o for o in self.offers if o.gpu == hw]
        if provider is not None:
            if provider not in self.providers and all(o.provider != provider for o in self.offers):
                raise ConfigError(f"--provider {provider!r}: unknown; known: {', '.join(sorted(self.providers))}")
            cands = [o for o in cands if o.provider == provider]
            if not cands:
                gap = [g.note for g in self.gaps if g.provider == provider and g.gpu == hw]
                have = sorted({o.provider for o in self.offers if o.gpu == hw})
                raise ConfigError(f"--provider {provider!r} has no price for {hw!r}"
                                  + (f" ({gap[0]})" if gap else "")
                                  + f"; providers with {hw}: {', '.join(have)}; or pass --price-per-gpu-hour")
        if instance is not None:
            cands = [o for o in cands if o.instance.lower() == instance.lower()]
            if not cands:
                raise ConfigError(f"--instance {instance!r}: no {hw} offer of that name"
                                  + (f" at {provider}" if provider else ""))
        fits = [o for o in cands if o.node_gpus >= config.tp]
        if not fits:
            raise ConfigError(f"{what!r} needs {config.tp} GPUs in one node for tp{config.tp}; the largest "
                              f"{hw} offer here holds {max(o.node_gpus for o in cands)}")
        if provider is None and instance is None and any(o.tier == "list" for o in fits):
            fits = [o for o in fits if o.tier == "list"]
        priced = [(_config_cost(o, config, whole_instances), i, o) for i, o in enumerate(fits)]
        cost, _, offer = min(priced)
        refs = tuple((k, v) for k, v in self.references if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", offer.source))
        return replace(_price_from(offer, config, cost, whole_instances), references=refs)


def _whole_instances(offer: Offer, config: HardwareConfig) -> int:
    """Instances of ``offer`` that hold ``config``: whole tp groups per instance where they fit."""
    if offer.gpus < config.tp:
        return math.ceil(config.count / offer.gpus)
    return math.ceil((config.count // config.tp) / (offer.gpus // config.tp))


def _config_cost(offer: Offer, config: HardwareConfig, whole_instances: bool) -> float:
    if whole_instances and offer.gpus > 1:
        return _whole_instances(offer, config) * offer.unit_usd_per_hour
    return config.count * offer.gpu_usd_per_hour


def _price_from(offer: Offer, config: HardwareConfig, cost: float, whole_instances: bool) -> Price:
    notes = [n for n in (offer.note,) if n]
    billing = "per-gpu"
    if offer.gpus > 1:
        if whole_instances:
            billing = "whole-instance"
            n = _whole_instances(offer, config)
            notes.append(f"{n} x {offer.instance} ({offer.gpus} GPUs each) for {config.count} GPUs")
        elif config.count % offer.gpus:
            whole = _whole_instances(offer, config) * offer.unit_usd_per_hour
            notes.append(f"{offer.instance} is sold as {offer.gpus}-GPU instances; billed per GPU here "
                         f"(whole instances: ${whole:,.2f}/h with --whole-instances)")
    if offer.tier != "list":
        notes.append(f"{offer.tier} price")
    return Price(config=config.label, usd_per_hour=cost, list_usd_per_hour=cost,
                 usd_per_gpu_hour=offer.gpu_usd_per_hour, provider=offer.provider, instance=offer.instance,
                 billing=billing, source=offer.source, date=offer.date, date_note=offer.date_note,
                 notes=tuple(notes))


def _format_errors(exc: ValidationError, where: str, raw: Any, text: str | None = None) -> str:
    parts = []
    for err in exc.errors():
        loc = list(err["loc"])
        if len(loc) >= 2 and loc[0] == "offers" and isinstance(loc[1], int):
            try:
                o = raw["offers"][loc[1]]
                loc[1] = f"{loc[1]} ({o.get('provider')} {o.get('instance')})"
            except (KeyError, IndexError, TypeError, AttributeError):
                pass
        line = line_of(text, err["loc"]) if text is not None else None
        parts.append((f"line {line}: " if line else "") + f"{'.'.join(str(x) for x in loc) or 'file'}: {err['msg']}")
    return f"price file {where}: " + "; ".join(parts)


def parse_catalog(raw: Any, where: str, text: str | None = None) -> PriceCatalog:
    """Validate a catalog mapping (the YAML's content); ``where`` names it in errors."""
    if not isinstance(raw, dict):
        raise DataError(f"price file {where}: expected a mapping with schema_version, providers, offers")
    if isinstance(raw.get("offers"), list):  # an override file's source defaults to the file
        raw = {**raw, "offers": [({"source": where, **o} if isinstance(o, dict) else o) for o in raw["offers"]]}
    try:
        doc = CatalogFile.model_validate(raw)
    except ValidationError as exc:
        raise DataError(_format_errors(exc, where, raw, text)) from None
    return PriceCatalog(dict(doc.providers), tuple(doc.offers), tuple(doc.gaps), tuple(doc.references.items()))


def load_catalog(path: Path | None = None, overrides: Path | None = None) -> PriceCatalog:
    """The packaged catalog (or ``path``), with ``overrides`` (``--prices FILE``) merged on top."""
    if path is None:
        text = resources.files("infermeter").joinpath("data/prices.yaml").read_text(encoding="utf-8")
        catalog = parse_catalog(safe_load(text), "data/prices.yaml")
    else:
        catalog = _read(path)
    return catalog.merged(_read(overrides)) if overrides is not None else catalog


def _read(path: Path) -> PriceCatalog:
    try:
        text = Path(path).read_text(encoding="utf-8")
        raw = safe_load(text)
    except OSError as exc:
        raise DataError(f"--prices {path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise DataError(f"--prices {path}: not valid YAML ({yaml_problem(exc)})") from None
    return parse_catalog(raw, str(path), text)


class PriceOptions(_Frozen):
    """How the user chose to price configurations (the shared CLI flags)."""

    provider: str | None = None
    instance: str | None = None
    prices_file: Path | None = None
    price_per_hour: float | None = None
    price_per_gpu_hour: float | None = None
    commitment: str | None = None
    discount: float | None = None
    whole_instances: bool = False

    @model_validator(mode="after")
    def _check(self) -> PriceOptions:
        for flag, value in (("--price-per-hour", self.price_per_hour), ("--price-per-gpu-hour", self.price_per_gpu_hour)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{flag} {value}: a price must be positive")
        if self.price_per_hour is not None and self.price_per_gpu_hour is not None:
            raise ConfigError("--price-per-hour and --price-per-gpu-hour: give one, not both")
        if self.discount is not None and not 0 <= self.discount < 1:
            raise ConfigError(f"--discount {self.discount}: must be a fraction in [0, 1)")
        if self.discount is not None and self.commitment is not None:
            raise ConfigError("--discount and --commitment: give one, not both")
        return self

    @property
    def overrides_catalog(self) -> bool:
        return self.price_per_hour is not None or self.price_per_gpu_hour is not None


def resolve_price(config: HardwareConfig, options: PriceOptions, catalog: PriceCatalog | None = None,
                  today: dt.date | None = None) -> Price:
    """The price of ``config`` under ``options`` (catalog loaded lazily when needed)."""
    today = today or dt.date.today()
    if options.overrides_catalog:
        if options.price_per_hour is not None:
            flag, total = "--price-per-hour", options.price_per_hour
        else:
            flag, total = "--price-per-gpu-hour", (options.price_per_gpu_hour or 0.0) * config.count
        per_gpu = total / config.count
        price = Price(config=config.label, usd_per_hour=total, list_usd_per_hour=total, usd_per_gpu_hour=per_gpu,
                      provider=options.provider or "user", instance=flag, billing="override",
                      source=f"{flag} on the command line", date=today)
    else:
        catalog = catalog or load_catalog(overrides=options.prices_file)
        price = catalog.choose(config, options.provider, options.instance, options.whole_instances)
    return _discounted(price, options, catalog)


def _discounted(price: Price, options: PriceOptions, catalog: PriceCatalog | None) -> Price:
    if options.discount:
        name, frac = f"--discount {options.discount:g}", options.discount
    elif options.commitment:
        catalog = catalog or load_catalog(overrides=options.prices_file)
        prov = catalog.providers.get(price.provider)
        avail = prov.commitments if prov else {}
        if options.commitment not in avail:
            raise ConfigError(f"--commitment {options.commitment!r}: {price.provider} offers "
                              f"{', '.join(sorted(avail)) or 'none in the catalog (use --discount)'}")
        c = avail[options.commitment]
        name, frac = f"{options.commitment} ({c.source}, {c.date or 'undated'})", c.discount
    else:
        return price
    return replace(price, usd_per_hour=price.list_usd_per_hour * (1 - frac), discount=frac, discount_name=name)


def staleness_warnings(prices: list[Price], today: dt.date, stale_after_days: int = STALE_AFTER_DAYS) -> list[str]:
    """One line per price that is undated or older than ``stale_after_days``."""
    out: list[str] = []
    for p in prices:
        age = p.age_days(today)
        if age is None:
            out.append(f"price for {p.config} is {p.date_text}: check it before relying on it")
        elif age > stale_after_days:
            out.append(f"price for {p.config} is dated {p.date_text}, {age} days ago: it may be stale")
    return list(dict.fromkeys(out))
