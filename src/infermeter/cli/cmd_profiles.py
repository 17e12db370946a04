"""``infermeter profiles``: the workload profiles, their parameters and defaults.

::

    $ infermeter profiles                 # every profile, a table of fields
    $ infermeter profiles classification  # one profile
    $ infermeter profiles --json          # the same, machine-readable

The rows come from :func:`infermeter.workload.profile_table`, i.e. from the
profile models themselves, so this listing cannot drift from the code.
"""

from __future__ import annotations

import json

import typer

from infermeter.cli.fit import Fit, make_table
from infermeter.errors import ConfigError
from infermeter.terminal import SafeConsole


def register(app: typer.Typer) -> None:
    @app.command("profiles")
    def profiles(
        name: str = typer.Argument(None, help="Show only this profile."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    ) -> None:
        """List workload profiles (--profile NAME) with their parameters and defaults."""
        from infermeter.workload.profiles import FLAG_FIELDS, profile_table

        rows = profile_table()
        if name is not None:
            rows = [r for r in rows if r["profile"] == name]
            if not rows:
                known = ", ".join(r["profile"] for r in profile_table())
                raise ConfigError(f"profile {name!r}: unknown; choose one of {known}")
        if as_json:
            print(json.dumps(rows, indent=2))
            return
        console = SafeConsole()
        for row in rows:
            flags = {v: k for k, v in FLAG_FIELDS[row["profile"]].items()}
            table = make_table(f"{row['profile']}: {row['summary']}",
                               [("field", "name"), ("default", "name"), ("flag", "name"), ("meaning", "text")],
                               title_justify="left")
            for f in row["fields"]:
                flag = "--" + flags[f["field"]].replace("_", "-") if f["field"] in flags else ""
                default = "" if f["default"] is None else str(f["default"])
                table.add_row(f["field"], default, flag, f["description"])
            console.print(Fit(table))
        console.print(
            "Lengths are 'mean[,stdev[,min,max]]' tokens (normal, rounded, clamped). Override any field with "
            "--set FIELD=VALUE (repeatable), e.g. --set questions_per_document=8; see docs/workloads.md.",
            highlight=False,
        )
