"""Help is readable at 80 and 120 columns: every flag whole, no line past the width, nothing cut."""

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from infermeter.cli.main import app


def _commands():
    root = typer.main.get_command(app)
    out = [((), root)]
    for name, cmd in root.commands.items():
        out.append(((name,), cmd))
        if isinstance(cmd, TyperGroup):
            out += [((name, sub), c) for sub, c in cmd.commands.items()]
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "infermeter" for p, _ in COMMANDS])
def test_help_shows_every_flag_whole_within_the_width(path, cmd, width):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "…" not in text
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, too_long
    words = set(text.replace(",", " ").replace("/", " ").split())
    for param in cmd.params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert opt in words, f"{opt} missing or cut in `{' '.join(path)} --help` at {width} columns"
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            assert name in words
            # the whole first paragraph of each command's help is there, wrapped but not cut
            first = " ".join((sub.help or "").strip().split("\n\n")[0].split())
            assert first.split()[-1] in words, (name, first)


def test_run_help_groups_flags_under_headings_and_lists_durations_as_such():
    text = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "80"}).output
    heads = [line.rstrip(":") for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert heads[:4] == ["Options", "Target", "Load", "Sweeps and find-max (--load sweep|find-max)"]
    assert "--first-token-timeout DURATION" in text and "--set KEY=VALUE" in text
    assert "mean[,stdev[,min,max]]" in text


def test_version_short_flag(cli):
    for flag in ("-V", "--version"):  # the installed script itself (the other CLI tests run main() in-process)
        p = cli(flag, process=True)
        assert p.returncode == 0 and p.stdout.startswith("infermeter ")
