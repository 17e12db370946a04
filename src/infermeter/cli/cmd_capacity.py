"""``infermeter capacity``: replicas and monthly cost for a daily volume, break-even bands, best value.

    infermeter capacity --requests-per-day 2M --peak-factor 1.5 --headroom 0.2 runs/chat-* runs/code-*
    infermeter capacity --requests-per-day 500K --plan 4xa100-80gb:tp4 --plan 2xh100-sxm:tp2 \\
        --model llama-3.1-70b --workload chat=512:256 --workload code=2000:600

Runs (measured or simulated) and plans (predicted) can be mixed; every row says which it is.
Prints the sizing table at the requested volume, then per workload profile the break-even
bands over ``--min-volume``..``--max-volume`` (default 100K..50M requests/day) and the best
value with its margin over the runner-up, then the prices used and their dates.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from infermeter.analysis.capacity import (
    BreakEven,
    Candidate,
    Sizing,
    break_even,
    candidates_from,
    check_volume_inputs,
    planned_costs,
    size,
)
from infermeter.analysis.cost import (
    Pick,
    best_by_group,
    check_override_scope,
    cost_runs,
)
from infermeter.analysis.prices import PriceOptions, staleness_warnings
from infermeter.cli.costview import (
    JsonOut,
    Overhead,
    count,
    dump,
    money,
    print_prices,
    print_run_warnings,
    source_tag,
    with_price_flags,
)
from infermeter.cli.fit import Fit, make_table
from infermeter.errors import ConfigError
from infermeter.perfmodel.configspec import parse_config
from infermeter.terminal import SafeConsole, escape, safe_text

_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9}


def parse_volume(text: str, flag: str) -> float:
    """``2M``, ``500K``, ``1.5e6`` or ``2,000,000`` requests/day."""
    m = re.fullmatch(r"\s*([0-9][0-9_,]*\.?[0-9]*(?:e[0-9]+)?)\s*([kmb]?)\s*", text.lower())
    if not m:
        raise ConfigError(f"{flag} {text!r}: expected a number like 2000000, 500K or 2M")
    return float(m.group(1).replace(",", "").replace("_", "")) * _SUFFIX[m.group(2)]


def parse_workload(text: str) -> tuple[str, int, int]:
    """``chat=512:256`` -> (profile, input tokens, output tokens)."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m:
        raise ConfigError(f"--workload {text!r}: expected PROFILE=INPUT:OUTPUT tokens, e.g. chat=512:256")
    return m.group(1), int(m.group(2)), int(m.group(3))


def sizing_table(sizings: Sequence[Sizing]) -> Fit:
    t = make_table("Fleet at the requested volume",
                   [(c, "name" if c in ("config", "source", "profile") else "text" if c == "basis" else "num") for c in
                    ("config", "source", "profile", "req/s per replica", "basis", "replicas", "GPUs",
                     "$/month", "$/1M req", "$/1M req at capacity")])
    for s in sizings:
        c = s.candidate
        t.add_row(safe_text(c.cost.hardware), source_tag(c.source), safe_text(c.profile), count(c.capacity_rps),
                  safe_text(c.capacity_basis),
                  str(s.replicas), str(s.gpus), money(s.usd_per_month), money(s.usd_per_1m_requests),
                  money(c.cost.usd_per_1m_requests))
    return Fit(t)


def print_break_even(console: Console, be: BreakEven, names: Sequence[str]) -> None:
    if len(names) < 2:
        console.print(f"[bold]Break-even, profile {escape(be.group)}[/]: only {escape(names[0])} to compare", highlight=False)
        return
    console.print(f"[bold]Break-even, profile {escape(be.group)}[/] (cheapest configuration by daily volume)")
    for b in be.bands[:30]:
        console.print(f"  {count(b.low):>12} – {count(b.high):>12} req/day: {b.winner} "
                      f"({b.replicas_at_high} replica(s), {money(b.usd_per_month_at_high)}/month at the top)",
                      highlight=False, markup=False)
    if len(be.bands) > 30:
        console.print(f"  ... {len(be.bands) - 30} more bands (see --json)")
    for v, lo, hi in be.crossings[:30]:
        console.print(f"  crossing at {count(v)} req/day: {lo} -> {hi}", highlight=False, markup=False)
    t = make_table(f"$/month by daily volume, profile {escape(be.group)} (* = cheapest)",
                   [("req/day", "num"), *((escape(n), "num") for n in names)])
    for v, costs, best in be.grid:
        t.add_row(count(v), *[money(costs[n]) + ("*" if n == best else "") for n in names])
    console.print(Fit(t))


def print_best_value(console: Console, picks: dict[str, Pick[Sizing]], requests_per_day: float) -> None:
    console.print(f"[bold]Best value per profile at {count(requests_per_day)} req/day[/]")
    for p in picks.values():
        b = p.best.candidate
        line = f"  {p.group}: {b.name} {money(p.best_value)}/month"
        if p.runner_up is not None and p.margin is not None and p.margin_pct is not None:
            line += f"; runner-up {p.runner_up.candidate.name} costs {money(p.margin)} ({p.margin_pct:.0%}) more"
        else:
            line += " (the only configuration for this profile)"
        console.print(line, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    @app.command("capacity")
    @with_price_flags
    def capacity(
        requests_per_day: Annotated[str, typer.Option("--requests-per-day", help="Daily volume, e.g. 2000000, 500K, 2M.")],
        run_dirs: Annotated[Optional[list[Path]], typer.Argument(help="Run directories to size (measured or simulated).")] = None,
        peak_factor: Annotated[float, typer.Option("--peak-factor", help="Peak rate / average rate (>= 1).")] = 1.0,
        headroom: Annotated[float, typer.Option("--headroom", help="Share of each replica's capacity kept free, applied once.")] = 0.2,
        min_volume: Annotated[str, typer.Option("--min-volume", help="Break-even table from this many requests/day.")] = "100K",
        max_volume: Annotated[str, typer.Option("--max-volume", help="Break-even table up to this many requests/day.")] = "50M",
        plan: Annotated[Optional[list[str]], typer.Option("--plan", help="A configuration to size from the performance model (repeatable).")] = None,
        model: Annotated[Optional[str], typer.Option("--model", help="Model for --plan.")] = None,
        workload: Annotated[Optional[list[str]], typer.Option("--workload", help="PROFILE=INPUT:OUTPUT tokens for --plan (repeatable).")] = None,
        input_tokens: Annotated[int, typer.Option("--input-tokens", help="Input tokens per request for --plan without --workload.")] = 512,
        output_tokens: Annotated[int, typer.Option("--output-tokens", help="Output tokens per request for --plan without --workload.")] = 256,
        dtype: Annotated[str, typer.Option("--dtype", help="Weight dtype for --plan.")] = "bf16",
        hardware: Annotated[Optional[str], typer.Option("--hardware", help="Configuration of the runs (default: each run's own 'hardware').")] = None,
        overhead: Overhead = 0.0,
        json_out: JsonOut = False,
        *,
        price_options: PriceOptions,
    ) -> None:
        """Replicas and monthly cost for a daily volume; break-even bands and best value per profile."""
        today = dt.date.today()
        volume = parse_volume(requests_per_day, "--requests-per-day")
        low, high = parse_volume(min_volume, "--min-volume"), parse_volume(max_volume, "--max-volume")
        check_volume_inputs(volume, peak_factor, headroom)
        if not run_dirs and not plan:
            raise ConfigError("capacity: give RUN_DIR... and/or --plan CONFIG")
        costs = cost_runs(run_dirs or [], hardware, price_options, overhead=overhead, today=today)
        shapes = [parse_workload(w) for w in workload or []] or [("plan", input_tokens, output_tokens)]
        costs += planned_costs(plan or [], model, shapes, dtype, price_options, overhead, today)
        check_override_scope([parse_config(c.hardware) for c in costs], price_options)
        cands = candidates_from(costs)
        sizings = [size(c, volume, peak_factor, headroom) for c in cands]
        groups: dict[str, list[Candidate]] = {}
        for c in cands:
            groups.setdefault(c.profile, []).append(c)
        bes = {g: break_even(cs, low, high, peak_factor, headroom, group=g) for g, cs in groups.items()}
        picks = best_by_group(sizings, lambda s: s.usd_per_month, lambda s: s.candidate.profile)
        if json_out:
            dump({"schema_version": 1, "requests_per_day": volume, "peak_factor": peak_factor, "headroom": headroom,
                  "overhead": overhead, "configs": [s.to_json() for s in sizings],
                  "break_even": {g: be.to_json() for g, be in bes.items()},
                  "best_value": {g: {"config": p.best.candidate.name, "usd_per_month": p.best_value,
                                     "runner_up": p.runner_up.candidate.name if p.runner_up else None,
                                     "margin_usd_per_month": p.margin, "margin_pct": p.margin_pct}
                                 for g, p in picks.items()},
                  "costs": [c.to_json() for c in costs],
                  "stale_price_warnings": staleness_warnings([c.price for c in costs], today)})
            return
        console = SafeConsole()
        avg = volume / 86400
        console.print(f"Serving {count(volume)} requests/day: {avg:,.2f} req/s average, peak x{peak_factor:g} = "
                      f"{avg * peak_factor:,.2f} req/s; headroom {headroom:.0%} of each replica's capacity",
                      highlight=False)
        console.print(sizing_table(sizings))
        for g, be in bes.items():
            print_break_even(console, be, [c.name for c in groups[g]])
        print_best_value(console, picks, volume)
        print_prices(console, [c.price for c in costs], overhead, today)
        print_run_warnings(console, costs)
