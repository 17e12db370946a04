"""``infermeter simulate``: run a workload through the digital twin in virtual time.

Same workload and load flags as ``infermeter run``; writes the same result files
(``summary.json``, ``requests.parquet``, ``run.json`` with ``source: simulated``)::

    infermeter simulate --model llama-3.1-70b --gpu 4xa100-80gb:tp4 --rate 48 --duration 3600 \\
        --input-tokens 128 --output-tokens 128 --out results/soak-1h
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from infermeter.cli.flags import GRACE, LOAD, OUTPUT, SLO, TWIN, WORKLOAD
from infermeter.cli.options import FlagSpec, model_flags, with_flags
from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig
from infermeter.measure.simplan import TOKEN_TIMES_AUTO_LIMIT, SimPlan
from infermeter.twin.spec import TwinSpec

API = model_flags(RunConfig, {"api": FlagSpec(help="chat | completions (what the prompt text looks like)")})
SIM_LOAD = [f for f in LOAD if f.field != "seed"] + [f for f in GRACE]


def register(app: typer.Typer) -> None:
    @app.command("simulate", no_args_is_help=False)
    @with_flags(TWIN, API, SIM_LOAD, [f for f in LOAD if f.field == "seed"], WORKLOAD, SLO, OUTPUT)
    def simulate_cmd(
        values: dict[str, Any],
        token_times: str = typer.Option("auto", help=f"Store per-token times: auto (runs up to {TOKEN_TIMES_AUTO_LIMIT:,} requests) | on | off."),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json instead of the table."),
    ) -> None:
        """Simulate a continuous-batching engine (vLLM-like) on the chosen hardware, in virtual time."""
        from pydantic import ValidationError
        from rich.console import Console

        from infermeter.cli.view import summary_table

        if token_times not in ("auto", "on", "off"):
            raise ConfigError(f"--token-times {token_times!r}: use auto, on or off")
        twin_fields = set(TwinSpec.model_fields)
        try:
            spec = TwinSpec(**{k: v for k, v in values.items() if k in twin_fields})
            cfg = RunConfig(model=spec.model, **{k: v for k, v in values.items() if k not in twin_fields})
        except ValidationError as exc:
            raise ConfigError("; ".join(f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}"
                                        for e in exc.errors())) from None
        plan = SimPlan(cfg, spec, token_times=token_times)
        err = Console(stderr=True)
        err.print(f"[cyan]simulating[/] {plan.twin.model} on {plan.twin.hardware} "
                  f"({plan.twin.config.describe()}, {plan.twin.num_blocks * plan.twin.lanes} KV blocks); "
                  f"load: {plan.shape.describe()}", highlight=False)
        res = plan.run(progress=_progress(err))
        s = res.summary
        if as_json:
            print(json.dumps(s, indent=2))
        else:
            out_console = Console()
            out_console.print(summary_table(s, None))
            out_console.print(f"results: {res.run_dir}  (simulated {res.records} requests, "
                              f"{res.virtual_s:,.0f} s virtual, in {res.wall_s:.1f} s)")


def _progress(err: Any) -> Any:
    last = [time.monotonic()]

    def cb(t_virtual: float, n: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0:
            last[0] = now
            err.print(f"  {n:,} requests done, virtual time {t_virtual / 3600:.2f} h", highlight=False)

    return cb
