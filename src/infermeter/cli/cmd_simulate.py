"""``infermeter simulate``: run a workload through the digital twin in virtual time.

Same workload and load flags as ``infermeter run``; writes the same result files
(``summary.json``, ``requests.parquet``, ``run.json`` with ``source: simulated``). A fleet
(``--gpu 800xa100-80gb:tp4`` = 200 replicas of TP4) can be split over ``--workers N`` processes
or Ray actors (``--ray auto``), with the same summary for the same seed::

    infermeter simulate --model llama-3.1-70b --gpu 4xa100-80gb:tp4 --rate 48 --duration 3600 \\
        --input-tokens 128 --output-tokens 128 --out results/soak-1h
    infermeter simulate --model llama-3.1-70b --gpu 800xa100-80gb:tp4 --profile chat --rate 48 \\
        --duration 72h --router session --workers 2
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from infermeter.analysis.results import Summary
from infermeter.cli.flags import GRACE, LOAD, OUTPUT, SLO, TIMEOUTS, TWIN, WORKLOAD
from infermeter.cli.options import FlagSpec, model_flags, with_flags
from infermeter.durations import parse_duration
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig
from infermeter.measure.simplan import TOKEN_TIMES_AUTO_LIMIT, SimPlan
from infermeter.twin.spec import TwinSpec

API = model_flags(RunConfig, {"api": FlagSpec(help="chat | completions (what the prompt text looks like)")})
SIM_LOAD = [f for f in LOAD if f.field != "seed"] + [f for f in GRACE] + [
    f for f in TIMEOUTS if f.field != "connect_timeout_s"]
SIM_SCALE = model_flags(RunConfig, {
    "checkpoint_s": FlagSpec(flag="--checkpoint", annotation=Optional[str], convert=lambda v, f: parse_duration(v, f),
                             help="save the whole simulation this often (one process), so that --resume DIR can "
                                  "go on after a crash"),
    "workers": FlagSpec(help="worker processes the fleet's replicas are split over (with --ray: Ray actors; "
                             "1 = one per CPU of the cluster)"),
    "ray": FlagSpec(help="split the fleet over Ray actors: ADDRESS, 'auto' or 'local' (extra 'distributed')"),
})


def register(app: typer.Typer) -> None:
    @app.command("simulate", no_args_is_help=False)
    @with_flags(TWIN, API, SIM_LOAD, [f for f in LOAD if f.field == "seed"], WORKLOAD, SLO, SIM_SCALE, OUTPUT)
    def simulate_cmd(
        values: dict[str, Any],
        token_times: str = typer.Option("auto", help=f"Store per-token times: auto (runs up to {TOKEN_TIMES_AUTO_LIMIT:,} requests) | on | off."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
        reasoning_tokens: Optional[str] = typer.Option(None, "--reasoning-tokens", metavar="N|MEAN,STDEV,MIN,MAX",
                                                       help="Simulate a reasoning model: the first N output tokens "
                                                            "of each request are thinking (ttfo_ms, reasoning vs "
                                                            "answer tokens), as emulate --reasoning-tokens."),
        resume: Optional[Path] = typer.Option(None, "--resume", help="Go on with the interrupted run in DIR (simulated "
                                              "with --checkpoint) from its last checkpoint; other flags are ignored."),
        fleet_file: Optional[Path] = typer.Option(None, "--fleet", help="Simulate a multi-model fleet: a YAML file of pools "
                                             "(model, gpu, replicas or autoscale, share or rate, slo; docs/fleet.md); "
                                             "--model/--gpu and the engine flags are then unused."),
        disaggregate: Optional[str] = typer.Option(None, "--disaggregate", help="Disaggregated prefill/decode: "
                                                   "prefill=CONFIG,decode=CONFIG[,link=auto|node|NETWORK][,pipelining="
                                                   "none|layer][,route=least-loaded|kv-aware] (docs/disaggregation.md); "
                                                   "--gpu is then unused."),
    ) -> None:
        """Simulate a continuous-batching engine (vLLM-like) on the chosen hardware, in virtual time."""
        from pydantic import ValidationError

        from infermeter.terminal import SafeConsole, escape

        if token_times not in ("auto", "on", "off"):
            raise ConfigError(f"--token-times {token_times!r}: use auto, on or off")
        err = SafeConsole(stderr=True)
        if resume is not None:
            plan, state = SimPlan.resume(resume)
            err.print(f"[cyan]resuming[/] {escape(resume)} at {state['now'] / 3600:.2f} h simulated "
                      f"({state['seen']:,} requests done)", highlight=False)
            _show(plan.run(progress=plan.eta(lambda line: err.print(line, highlight=False, markup=False)), resume=state), as_json)
            return
        twin_fields = set(TwinSpec.model_fields)
        if disaggregate is not None and (fleet_file is not None or reasoning_tokens is not None):
            raise ConfigError("--disaggregate simulates one prefill/decode deployment: it does not combine with "
                              + ("--fleet" if fleet_file is not None else "--reasoning-tokens"))
        if fleet_file is not None and reasoning_tokens is not None:
            raise ConfigError("--reasoning-tokens is not simulated for a --fleet yet: drop one of them")
        if fleet_file is not None:
            _fleet(fleet_file, {k: v for k, v in values.items() if k not in twin_fields}, token_times, as_json, err)
            return
        try:
            spec = TwinSpec(**{k: v for k, v in values.items() if k in twin_fields})
            cfg = RunConfig(model=spec.model, **{k: v for k, v in values.items() if k not in twin_fields})
        except ValidationError as exc:
            raise ConfigError("; ".join(f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                                        for e in exc.errors())) from None
        if disaggregate is not None:
            from infermeter.cli.disagg import simulate_disaggregated

            simulate_disaggregated(cfg, spec, disaggregate, token_times, err, as_json)
            return
        plan = SimPlan(cfg, spec, token_times=token_times, reasoning_tokens=reasoning_tokens)
        twin = plan.twin
        fleet = (f"{twin.replicas} replicas, router {twin.router}, " if twin.replicas > 1 else "")
        where = (f"; on Ray ({cfg.ray})" if cfg.ray else f"; {cfg.workers} worker processes" if plan.fleet else "")
        err.print("[cyan]simulating[/] " + escape(f"{twin.model} on {twin.hardware} ({fleet}{twin.config.describe()}, "
                  f"{twin.num_blocks * twin.lanes} KV blocks); load: {plan.shape.describe()}{where}"
                  + (f"; thinking {plan.thinking.describe()} tokens per request" if plan.thinking else "")
                  + (f"; speculative {twin.speculative.label()}, prompts: {plan.speculative_prompts()}"
                     if twin.speculative is not None else "")),
                  highlight=False)
        _show(plan.run(progress=plan.eta(lambda line: err.print(line, highlight=False, markup=False))), as_json)


def _fleet(path: Path, values: dict[str, Any], token_times: str, as_json: bool, err: Any) -> None:
    """``simulate --fleet FILE`` (infermeter.measure.multifleet)."""
    from pydantic import ValidationError

    from infermeter.measure.multifleet import FleetPlan
    from infermeter.terminal import escape
    from infermeter.twin.fleetfile import load_fleet

    spec = load_fleet(path)
    try:
        cfg = RunConfig(model=spec.pools[0].model, **values)
    except ValidationError as exc:
        raise ConfigError("; ".join(f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                                    for e in exc.errors())) from None
    plan = FleetPlan(cfg, spec, where=f"fleet file {path}", token_times=token_times)
    err.print("[cyan]simulating fleet[/] " + escape(plan.describe()), highlight=False)
    res = plan.run(progress=plan.plan.eta(lambda line: err.print(line, highlight=False, markup=False)))
    _show(res, as_json)
    if not as_json:
        from infermeter.cli.fleetview import fleet_table
        from infermeter.terminal import SafeConsole

        SafeConsole().print(fleet_table(Summary.from_json(res.summary)))


def _show(res: Any, as_json: bool) -> None:
    from infermeter.cli.view import summary_table
    from infermeter.terminal import SafeConsole, escape

    s = res.summary
    if as_json:
        print(json.dumps(s, indent=2))
        return
    out_console = SafeConsole()
    out_console.print(summary_table(Summary.from_json(s), None))
    out_console.print(f"results: {escape(res.run_dir)}  (simulated {res.records} requests, "
                      f"{res.virtual_s:,.0f} s virtual, in {res.wall_s:.1f} s)")


