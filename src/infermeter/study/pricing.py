"""Prices, cost per cell, best value per profile and break-even bands, from the cost and capacity modules.

The contract: every configuration gets one dated :class:`~infermeter.analysis.prices.Price` (its own
``price_per_hour`` from the study file, else the catalog under the study's pricing options) or a
reason it has none; every cell is priced at its *basis* throughput — the highest load meeting the
SLO when the study has latency limits (only where a load of the workload met it:
:func:`infermeter.study.capstatus.capacity_status` ``ranked``; a cell failing the SLO at every
load is not priced, its reason says where it came closest), else saturation — and also at
saturation::

    priced = price_study(study, cells)
    priced.cost[("h100-sxm", "chat")].result.usd_per_1m_requests
    priced.picks["chat"].best.cell.config, priced.picks["chat"].margin_pct
    priced.break_even["chat"].bands[0].winner

Best value (:func:`infermeter.analysis.cost.best_by_group`): the lowest ``pricing.value_metric``
per profile among *comparable* priced cells (serving the study's model; meeting the SLO when
there is one). Break-even (:func:`infermeter.analysis.capacity.break_even`): replicas of each
configuration needed for a daily volume at its basis capacity, cheapest per band.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from infermeter.analysis.capacity import BreakEven, Candidate, break_even
from infermeter.analysis.cost import CostResult, Pick, Subject, Throughput, best_by_group, compute_cost
from infermeter.analysis.prices import Price, PriceOptions, load_catalog, resolve_price, staleness_warnings
from infermeter.errors import UserError
from infermeter.perfmodel.configspec import parse_config
from infermeter.study.capstatus import status_of
from infermeter.study.cells import CellResult
from infermeter.study.config import Configuration, StudyConfig


@dataclass(frozen=True)
class CellCost:
    cell: CellResult
    basis: str  # "SLO capacity" | "saturation"
    result: CostResult | None
    at_saturation: CostResult | None
    comparable: bool
    reason: str | None = None  # why there is no price, or why the cell is left out of best value

    def value(self, metric: str) -> float | None:
        return None if self.result is None else getattr(self.result, metric)


@dataclass
class StudyPrices:
    prices: dict[str, Price | str]  # configuration label -> price, or why none
    cost: dict[tuple[str, str], CellCost]
    picks: dict[str, Pick[CellCost]]
    break_even: dict[str, BreakEven]
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def same_model(served: str | None, study_model: str) -> bool:
    """Whether a measured endpoint's model id is the study's model (catalog names and aliases)."""
    if not served:
        return False
    from infermeter.perfmodel.models import get_model

    try:
        return get_model(served).name == get_model(study_model).name
    except UserError:
        return served.lower() == study_model.lower()


def options_of(study: StudyConfig, conf: Configuration | None = None) -> PriceOptions:
    p = study.pricing_for(conf) if conf is not None else study.pricing
    return PriceOptions(provider=p.provider, instance=p.instance, prices_file=p.prices_file, commitment=p.commitment,
                        discount=p.discount, whole_instances=p.whole_instances)


def own_price(conf: Configuration, today: dt.date) -> Price:
    """The study file's ``price_per_hour`` for ``conf`` as a dated price."""
    hw = parse_config(conf.config)
    assert conf.price_per_hour is not None
    return Price(config=hw.label, usd_per_hour=conf.price_per_hour, list_usd_per_hour=conf.price_per_hour,
                 usd_per_gpu_hour=conf.price_per_hour / hw.count, provider="study file", instance=conf.label,
                 billing="override", source=conf.price_source or "price_per_hour in the study file",
                 date=conf.price_date, date_note=None if conf.price_date else "no price_date in the study file")


def resolve_prices(study: StudyConfig, today: dt.date) -> dict[str, Price | str]:
    """Each configuration's price (its own ``price_per_hour``, else the catalog under its provider, instance and
    commitment over the study's pricing), or why it has none."""
    catalog = None
    out: dict[str, Price | str] = {}
    for conf in study.configurations:
        if conf.price_per_hour is not None:
            out[conf.label] = own_price(conf, today)
            continue
        options = options_of(study, conf)
        try:
            catalog = catalog or load_catalog(overrides=options.prices_file)
            out[conf.label] = resolve_price(parse_config(conf.config), options, catalog, today)
        except UserError as exc:
            out[conf.label] = (f"no price: {exc} (in a study: price_per_hour for this configuration, or "
                               f"--price {conf.label}=USD_PER_HOUR)")
    return out


def _throughput(block: dict[str, Any] | None) -> Throughput | None:
    if not block or not (block.get("requests_per_s") or 0) > 0 or not (block.get("output_tokens_per_s") or 0) > 0:
        return None
    return Throughput(output_tokens_per_s=block["output_tokens_per_s"],
                      input_tokens_per_s=block.get("input_tokens_per_s") or 0.0,
                      requests_per_s=block["requests_per_s"], total_tokens_per_s=block.get("total_tokens_per_s"))


def price_cell(cell: CellResult, price: Price | str, study: StudyConfig) -> CellCost:
    has_slo = bool(study.slo.limits)
    status = status_of(cell, study)
    basis, block = ("SLO capacity", cell.capacity if status.ranked else None) if has_slo \
        else ("saturation", cell.saturation)
    if cell.unavailable:
        return CellCost(cell, basis, None, None, False, cell.unavailable)
    comparable = same_model(cell.model, study.model)
    why_not = None if comparable else f"serves {cell.model}, not {study.model}"
    conf = next((c for c in study.configurations if c.label == cell.config), None)
    if cell.source == "emulated" and (conf is None or conf.price_per_hour is None):
        # infermeter's twin behind an endpoint: not that GPU, so not priced as one unless the study says so
        price = ("not priced: an emulated endpoint (infermeter's digital twin), not the GPU it models; "
                 f"give price_per_hour for {cell.config} to price it")
    if isinstance(price, str):
        return CellCost(cell, basis, None, None, comparable, price)

    def cost(b: dict[str, Any] | None, basis_text: str) -> CostResult | None:
        tp = _throughput(b)
        if tp is None:
            return None
        subject = Subject(label=f"{cell.config} · {cell.profile}", source=cell.source, throughput=tp,
                          hardware=cell.hardware, model=cell.model, profile=cell.profile, run_dir=cell.run_dir,
                          basis=basis_text)
        return compute_cost(price, tp, subject, overhead=study.pricing.overhead, utilization=study.pricing.utilization)

    if block is cell.saturation and not cell.saturation_valid:
        # a saturation figure from a run judged invalid is shown flagged, never ranked (study/tables.py): no price basis
        reasons = "; ".join((block or {}).get("invalid_reasons") or []) or "see its run"
        return CellCost(cell, basis, None, None, comparable,
                        why_not or f"its saturation run was judged invalid ({reasons})")
    result = cost(block, basis)
    if result is None and has_slo:
        why_not = why_not or (status.text() if status.status == "upper_bound" else "no tested load met the SLO")
    return CellCost(cell, basis, result, cost(cell.saturation, "saturation"), comparable, why_not)


def price_study(study: StudyConfig, cells: list[CellResult], today: dt.date | None = None) -> StudyPrices:
    """Prices, cell costs, best value per profile and break-even bands (see the module docstring)."""
    today = today or dt.date.today()
    prices = resolve_prices(study, today)
    costs = {c.key: price_cell(c, prices[c.config], study) for c in cells}
    metric = study.pricing.value_metric
    eligible = [cc for cc in costs.values() if cc.comparable and cc.value(metric) is not None]
    picks = best_by_group(eligible, lambda cc: float(cc.value(metric) or 0.0), lambda cc: cc.cell.profile)
    bands: dict[str, BreakEven] = {}
    by_profile: dict[str, list[Candidate]] = {}
    v = study.volume
    for profile in study.profiles:
        cands = [Candidate(cc.cell.config, cc.result, cc.result.subject.throughput.requests_per_s, cc.basis)
                 for cc in eligible if cc.cell.profile == profile and cc.result is not None]
        if cands:
            by_profile[profile] = cands
            bands[profile] = break_even(cands, v.low, v.high, v.peak_factor, v.headroom, group=profile)
    real = [p for p in prices.values() if isinstance(p, Price)]
    notes = staleness_warnings(real, today)
    return StudyPrices(prices, costs, picks, bands, by_profile, notes)


def price_terms(study: StudyConfig, label: str, price: Price) -> list[tuple[str, float | None, str]]:
    """``(term, $/h or None, where from)`` for one configuration: on demand (the catalog's list price), each
    commitment its provider offers in the catalog, and spot; a price from the study file is one term as given."""
    if price.billing == "override":
        return [("as given", price.usd_per_hour, price.source)]
    out: list[tuple[str, float | None, str]] = [("on demand", price.list_usd_per_hour, f"{price.provider} list price")]
    conf = study.configuration(label)
    options = options_of(study, conf)
    try:
        catalog = load_catalog(overrides=options.prices_file)
    except UserError:
        return out
    prov = catalog.providers.get(price.provider)
    for name, c in sorted((prov.commitments if prov else {}).items()):
        out.append((name, price.list_usd_per_hour * (1 - c.discount), f"-{c.discount:.0%}, {c.source}, "
                    f"{c.date or 'undated'}"))
    out.append(("spot", None, f"no {price.provider} spot price in the catalog"))
    return out


def unit_cost_per_usd_hour(cc: CellCost, metric: str, study: StudyConfig) -> float | None:
    """The cell's ``metric`` at $1/h (its cost basis throughput, the study's overhead and utilisation): a price
    P gives P x this; for an unpriced cell, the price at which it would cost ``v`` is ``v`` / this."""
    cell = cc.cell
    block = cell.capacity if (study.slo.limits and status_of(cell, study).ranked) else \
        (cell.saturation if not study.slo.limits else None)
    tp = _throughput(block)
    if tp is None:
        return None
    dummy = Price(config=cell.hardware, usd_per_hour=1.0, list_usd_per_hour=1.0, usd_per_gpu_hour=1.0,
                  provider="flip", instance="flip", billing="override", source="$1/h", date=None)
    r = compute_cost(dummy, tp, overhead=study.pricing.overhead, utilization=study.pricing.utilization)
    v = getattr(r, metric)
    return float(v) if v is not None else None
