"""Cost views shared by ``cost``, ``capacity``, ``plan`` and ``report``: the price flags and the tables.

:func:`with_price_flags` gives a command the shared price flags (it receives them as one
``price_options: PriceOptions``); ``money``/``count`` format figures; the tables and
``print_prices`` show every figure with the price behind it, its source and date.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from infermeter.analysis.cost import HOURS_PER_MONTH, CostResult, best_by_group, profile_of
from infermeter.analysis.prices import Price, PriceOptions, staleness_warnings
from infermeter.cli.fit import Fit, make_table
from infermeter.numbers import usd
from infermeter.terminal import escape, safe_text

Provider = Annotated[Optional[str], typer.Option("--provider", help="Price at this provider (aws, azure, gcp, lambda, runpod, vastai, vultr, coreweave, ...).")]
Instance = Annotated[Optional[str], typer.Option("--instance", help="Price this catalog offer (instance name).")]
Prices = Annotated[Optional[Path], typer.Option("--prices", help="YAML price file merged over the catalog (same schema as data/prices.yaml).")]
PerHour = Annotated[Optional[float], typer.Option("--price-per-hour", help="USD per hour for the whole configuration (skips the catalog).")]
PerGpuHour = Annotated[Optional[float], typer.Option("--price-per-gpu-hour", help="USD per GPU-hour (skips the catalog).")]
Commitment = Annotated[Optional[str], typer.Option("--commitment", help="Reserved/committed discount from the catalog, e.g. 1yr-no-upfront (aws), 3yr-savings-plan (azure).")]
Discount = Annotated[Optional[float], typer.Option("--discount", help="Your own discount off the price, as a fraction (0.3 = 30% off).")]
Whole = Annotated[bool, typer.Option("--whole-instances", help="Bill whole multi-GPU instances instead of per GPU.")]
Overhead = Annotated[float, typer.Option("--overhead", help="Hidden costs (network, storage, load balancers) as a fraction of the hourly price, e.g. 0.2.")]
Hardware = Annotated[Optional[str], typer.Option("--hardware", help="Configuration of the runs, e.g. 4xa100-80gb:tp4 (default: the run's own 'hardware').")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


PRICE_FLAGS: dict[str, tuple[Any, Any]] = {  # PriceOptions field -> (annotated type, default)
    "provider": (Provider, None), "instance": (Instance, None), "prices_file": (Prices, None),
    "price_per_hour": (PerHour, None), "price_per_gpu_hour": (PerGpuHour, None),
    "commitment": (Commitment, None), "discount": (Discount, None), "whole_instances": (Whole, False),
}


def with_price_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Give a typer command the shared price flags; it receives them as ``price_options: PriceOptions``."""
    sig = inspect.signature(command, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "price_options"]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
             for name, (ann, default) in PRICE_FLAGS.items()]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        options = PriceOptions(**{name: kwargs.pop(name) for name in PRICE_FLAGS})
        command(price_options=options, **kwargs)

    setattr(wrapper, "__signature__", sig.replace(parameters=[*own, *extra]))  # read by typer via inspect
    return wrapper


def money(v: float | None) -> str:
    return usd(v)  # the one money format (infermeter.numbers)


def count(v: float | None) -> str:
    return "–" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:,.2f}")


def print_prices(console: Console, prices: Sequence[Price], overhead: float, today: dt.date,
                 utilization: float | None = None) -> None:
    """The price behind every figure, with its date, and the explicit inputs."""
    console.print("[bold]Prices used[/]")
    for p in dict.fromkeys(prices):
        console.print(f"  {p.describe()}", highlight=False, markup=False)
        for note in p.notes:
            console.print(f"    note: {note}", highlight=False, markup=False)
    refs = dict(kv for p in prices for kv in p.references)
    for key, citation in refs.items():
        console.print(f"  {key} = {citation}", highlight=False, markup=False)
    inputs = f"overhead +{overhead:.0%} (network, storage, load balancers)"
    if utilization is not None:
        inputs += f"; average utilization {utilization:.0%} of the measured throughput"
    console.print(f"Inputs: {inputs}; month = {HOURS_PER_MONTH:g} h; $/hour and all figures include the overhead",
                  highlight=False)
    for w in staleness_warnings(list(prices), today):
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)


def source_tag(source: str) -> str:
    colour = {"measured": "green", "simulated": "magenta", "predicted": "cyan"}.get(source, "white")
    return f"[{colour}]{source}[/]"


def cost_table(results: Sequence[CostResult]) -> Fit:
    t = make_table("Cost per unit (each figure charges the whole hour to that unit)",
                   [(c, "num" if c.startswith("$") else "text" if c == "run" else "name") for c in
                    ("run", "source", "config", "profile", "$/1K out", "$/1M out", "$/1M in", "$/1M total", "$/1M req")])
    for r in results:
        s = r.subject
        t.add_row(safe_text(s.label), source_tag(s.source), safe_text(r.hardware), safe_text(s.profile or "–"), money(r.usd_per_1k_output_tokens),
                  money(r.usd_per_1m_output_tokens), money(r.usd_per_1m_input_tokens),
                  money(r.usd_per_1m_total_tokens), money(r.usd_per_1m_requests))
    return Fit(t)


def rate_table(results: Sequence[CostResult]) -> Fit:
    t = make_table("Throughput and spend", [(c, "text" if c in ("run", "basis") else "num") for c in
                                            ("run", "out tok/s", "req/s", "$/hour", "$/month", "out tok/$",
                                             "total tok/$", "basis")])
    for r in results:
        tp = r.subject.throughput
        t.add_row(safe_text(r.subject.label), count(tp.output_tokens_per_s), count(tp.requests_per_s), money(r.usd_per_hour),
                  money(r.usd_per_month), count(r.output_tokens_per_usd), count(r.total_tokens_per_usd), safe_text(r.subject.basis))
    return Fit(t)


def print_best(console: Console, results: Sequence[CostResult]) -> None:
    picks = best_by_group(results, lambda r: r.usd_per_1m_output_tokens, lambda r: profile_of(r.subject))
    rows = [p for p in picks.values() if p.runner_up is not None]
    if not rows:
        return
    console.print("[bold]Best value per profile[/] (lowest $/1M output tokens)")
    for p in rows:
        assert p.runner_up is not None and p.margin is not None and p.margin_pct is not None
        console.print(f"  {p.group}: {p.best.hardware} [{p.best.subject.source}] {money(p.best_value)}/1M out; "
                      f"runner-up {p.runner_up.hardware} [{p.runner_up.subject.source}] costs {money(p.margin)} "
                      f"({p.margin_pct:.0%}) more", highlight=False, markup=False)


def print_run_warnings(console: Console, results: Sequence[CostResult]) -> None:
    for r in results:
        if not r.subject.valid:
            reasons = "; ".join(r.subject.invalid_reasons) or "no reason given"
            console.print(f"[yellow]warning:[/] {escape(r.subject.label)} is marked invalid ({escape(reasons)})", highlight=False)


def dump(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))
