"""The top of the study report: one decision card per profile, and the claims table.

The contract: :func:`decision_cards` writes each :class:`~infermeter.study.decision.Decision` as a
:class:`~infermeter.report.content.Card` whose figures are the matrix tables' own text (3
significant figures for simulated values, the same source tags), so the card cannot disagree
with the tables below it; :func:`claims_table` shows each checked claim with the physical
ceiling, the calibrated prediction, the study's own figure and the verdict (impossible ones
flagged)::

    cards = decision_cards(study, decisions, prices)
    cards[0].headline      # 'chat: rent h200 — $374 per 1M requests (simulated); a100-80gb costs 2.6% more ...'
"""

from __future__ import annotations

from infermeter.report.content import Card
from infermeter.report.table import Cell, Table, fmt_usd
from infermeter.study.claims import ClaimCheck
from infermeter.study.config import StudyConfig
from infermeter.study.decision import UNIT, Decision, Option, decision_line, same_shown, times_text
from infermeter.study.matrix import METRIC, VALUE_METRIC, display, fmt_sig, fmt_sig_usd
from infermeter.study.pricing import StudyPrices


def _interval_text(o: Option) -> str:
    parts = []
    if o.search is not None and o.search.lo == 0.0:
        parts.append(f"at most {fmt_sig_usd(o.search.hi)} ({o.search.basis})")
    elif o.search is not None:
        parts.append(f"{fmt_sig_usd(o.search.lo)}–{fmt_sig_usd(o.search.hi)} ({o.search.basis})")
    if o.model is not None:
        parts.append(f"{fmt_sig_usd(o.model.lo)}–{fmt_sig_usd(o.model.hi)} ({o.model.basis})")
    else:
        parts.append("model " + (o.model_note or "interval: not available").removeprefix("measured: ").replace(
            "interval: not available", "interval: not available", 1))
    return "; ".join(parts)


def _option_text(o: Option, study: StudyConfig, prices: StudyPrices) -> str:
    vkey = VALUE_METRIC[study.pricing.value_metric]
    c = o.cell
    shown = display(METRIC[vkey], c, prices.cost.get(c.key))[1]
    r = o.cost.result
    bits = [f"{shown} {UNIT[study.pricing.value_metric]}"]
    if o.cost.basis == "SLO capacity" and c.capacity:
        bits.append(f"SLO capacity {display(METRIC['cap_rps'], c, prices.cost.get(c.key))[1]} req/s")
    if r is not None:
        p = r.price
        bits.append(f"{fmt_usd(p.usd_per_hour)}/h, {p.provider} {p.instance}, {p.date_text}")
    return f"{c.config} — " + "; ".join(bits)


def _terms_text(d: Decision, unit: str) -> str:
    parts = []
    for config, terms in d.terms.items():
        if len(terms) < 2:
            continue
        parts.append(f"{config}: " + ", ".join(f"{t} {fmt_sig_usd(v) if v is not None else '– (' + why + ')'}"
                                               for t, v, why in terms))
    return ("; ".join(parts) + f" ({unit})") if parts else ""


def decision_cards(study: StudyConfig, decisions: dict[str, Decision], prices: StudyPrices) -> list[Card]:
    out = []
    unit = UNIT[study.pricing.value_metric]
    for profile in study.profiles:
        d = decisions.get(profile)
        if d is None:
            continue
        tail: list[tuple[str, str]] = []
        if d.request_text:
            tail.append(("a request", d.request_text))
        if d.failing:
            tail.append(("fails the SLO", "; ".join(d.failing)))
        if d.starved:
            tail.append(("starved", "; ".join(d.starved)))
        if d.best is None:
            out.append(Card(f"{profile}", decision_line(d).split(": ", 1)[1],
                            tail + [("left out", "; ".join(d.excluded) or "–")], d.caveats, tone="warning"))
            continue
        rows = [("recommended", _option_text(d.best, study, prices)), ("its interval", _interval_text(d.best))]
        if d.soak is not None:
            rows.append(("its soak", d.soak.text))
        if d.runner_up is not None:
            m = d.margin or 0.0
            rows += [("runner-up", _option_text(d.runner_up, study, prices)),
                     ("its interval", _interval_text(d.runner_up)),
                     ("margin", (times_text(1 + m) if m >= 0.0005 else "none") + (
                         (": a tie" if same_shown(d.best.value, d.runner_up.value) else
                          f": too close to call ({d.call_text})") if d.too_close
                         else f": clear ({d.call_text})"))]
        for v in d.other_soaks:
            rows.append((f"soak of {v.config}", v.text))
        if d.workload_text:
            rows.append(("workload", d.workload_text))
        if d.at_volume_text:
            rows.append(("at your volume", d.at_volume_text))
        if d.holds_text:
            rows.append(("holds", d.holds_text))
        terms = _terms_text(d, unit)
        if terms:
            rows.append(("price terms", terms))
        rows += tail[1:] if tail and tail[0][0] == "a request" else tail
        if tail and tail[0][0] == "a request":
            rows.insert(2, tail[0])
        if d.flips:
            rows.append(("unpriced", "; ".join(d.flips)))
        if d.excluded:
            rows.append(("left out", "; ".join(d.excluded)))
        rows.append(("assumes", d.assumptions))
        out.append(Card(profile, decision_line(d).split(": ", 1)[1], rows, d.caveats,
                        tone="warning" if d.too_close or d.demoted else "decision"))
    return out


def decision_table(study: StudyConfig, decisions: dict[str, Decision]) -> Table:
    """The decisions as one table (the Markdown/CSV-friendly form of the cards)."""
    rows = []
    for profile in study.profiles:
        d = decisions.get(profile)
        if d is None:
            continue
        b, r = d.best, d.runner_up
        rows.append([Cell.text(profile), Cell.text(b.cell.config if b else None),
                     Cell(fmt_sig_usd(b.value), b.value) if b else Cell.text(None),
                     Cell.text(r.cell.config if r else None), Cell(fmt_sig_usd(r.value), r.value) if r else Cell.text(None),
                     Cell(times_text(1 + d.margin), d.margin) if d.margin is not None else Cell.text(None),
                     Cell.text("not confirmed: its soak failed" if d.demoted else
                                                   "too close to call" if d.too_close else ("clear" if r else None)),
                     Cell.text(d.holds_text or None)])
    return Table("decision", "Decision per profile", ["profile", "recommended", UNIT[study.pricing.value_metric],
                                                      "runner-up", "runner-up cost", "margin", "call", "holds"],
                 rows, section="decision",
                 note="Margin = runner-up / recommended - 1. Too close to call: the 80% interval of that cost ratio "
                      "includes 1 (two simulated figures: the model's paired errors, which are small within one "
                      "hardware family; otherwise: the two figures' intervals overlap).")


VERDICT_TEXT = {"impossible": "IMPOSSIBLE (beyond the ceiling)", "implausible": "implausible (above 90% of it)",
                "possible": "possible", "not checked": "not checked"}


def claims_table(checks: list[ClaimCheck]) -> Table:
    rows = []
    for c in checks:
        flag = "bad" if c.verdict == "impossible" else None
        rows.append([Cell.text(c.claim.text), Cell.text(VERDICT_TEXT.get(c.verdict, c.verdict), flag=flag),
                     Cell.text(f"{c.model} ({c.dtype}) on {c.hardware}"),
                     Cell.text(c.claim.canonical_metric), Cell(fmt_sig(c.claim.value) + " " + c.unit, c.claim.value),
                     Cell((fmt_sig(c.ceiling) + " " + c.unit) if c.ceiling else "–", c.ceiling),
                     Cell(f"{c.ratio_to_ceiling:.2f}x" if c.ratio_to_ceiling else "–", c.ratio_to_ceiling),
                     Cell((fmt_sig(c.predicted) + " " + c.unit) if c.predicted else "–", c.predicted),
                     Cell((fmt_sig(c.study_value) + " " + c.unit) if c.study_value else "–", c.study_value),
                     Cell.text(c.study_source or c.claim.source)])
    return Table("claims", "Published claims against the physical ceiling", [
        "claim", "verdict", "where", "metric", "claimed", "physical ceiling", "claim / ceiling", "calibrated model",
        "this study", "source"], rows, section="decision",
        note="Ceiling: the same model on ideal hardware (100% of datasheet bandwidth and compute, no overheads), as "
             "`infermeter plan --check`; a claim above it cannot be true as stated. 'This study' is its own figure "
             "for that configuration one request at a time (simulated unless measured).")
