"""``infermeter campaign FILE``: run a matrix of targets x profiles x loads x repeats, resumably."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from infermeter.cli.fit import Fit, make_table
from infermeter.cli.interrupt import interrupted
from infermeter.errors import UserError
from infermeter.terminal import SafeConsole, clean, escape, safe_text


def register(app: typer.Typer) -> None:
    @app.command("campaign")
    def campaign(
        file: Path = typer.Argument(..., help="Campaign YAML (targets, profiles, loads, repeats)."),
        out: Optional[Path] = typer.Option(None, help="Campaign directory (default: the file's out:, else results/campaign-<name>)."),
        restart: bool = typer.Option(False, help="Discard the state of an earlier attempt in --out and start over."),
        dry_run: bool = typer.Option(False, "--dry-run", help="List the runs (in order) and exit."),
        as_json: bool = typer.Option(False, "--json", help="Print campaign.json instead of the table."),
    ) -> None:
        """Run every target x profile x load x repeat; rerun the same command to resume after an interruption."""
        from infermeter.campaign import CampaignRunner, load_campaign
        from infermeter.records import store

        camp = load_campaign(file)
        out_dir = out or Path(camp.out or f"results/campaign-{camp.name}")
        err = SafeConsole(stderr=True)
        if dry_run:
            done: dict[str, Any] = {}  # campaign-state.json cells (JSON)
            if (out_dir / "campaign-state.json").exists() and not restart:
                done = store.read_json(out_dir / "campaign-state.json").get("cells") or {}
            for c in camp.cells():
                status = (done.get(c.key) or {}).get("status", "todo")
                print(clean(f"{c.key:50s} {status:12s} {c.config.load or 'single'}"))
            return
        from infermeter.records.outputs import output_dir

        output_dir(out_dir)
        runner = CampaignRunner(camp, out_dir, notify=lambda s: err.print(s, highlight=False, markup=False), restart=restart)
        report = runner.run()
        if as_json:
            print(json.dumps(report, indent=2))
        else:
            SafeConsole().print(report_table(report))
            SafeConsole().print(f"campaign: {escape(out_dir)} (campaign.json, campaign.md, runs/)")
        if report.get("interrupted"):
            interrupted(err, f"campaign stopped after {report['done']} of {report['cells']} runs (the current run's "
                             f"records kept); run the same command again to resume ({out_dir})", runner.signal)
        if report["failed"]:
            raise UserError(f"{report['failed']} of {report['cells']} runs failed; see {out_dir}/campaign-state.json "
                            "(rerun the same command to retry them)")


def report_table(report: dict[str, Any]) -> Fit:
    from infermeter.campaign.spread import FIGURES, fmt_spread

    keep = [f for f in FIGURES if any(g["figures"][f[0]]["n"] for g in report["groups"])]
    t = make_table(f"Campaign {escape(report['campaign'])}: mean ± stdev (cv) over {report['repeats']} repeats",
                   [("target", "name"), ("profile", "name"), ("load", "name"), ("runs", "num"),
                    *((label, "num") for _, label, _ in keep)], title_justify="left")
    for g in report["groups"]:
        t.add_row(safe_text(g["target"]), safe_text(g["profile"]), safe_text(g["load"]), f"{g['done']}/{g['runs']}",
                  *(fmt_spread(g["figures"][name], fmt) for name, _, fmt in keep))
    return Fit(t, key_columns=3)
