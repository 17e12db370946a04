"""The ``infermeter`` command line: one typer app, one module per command.

Each ``infermeter.cli.cmd_*`` module defines ``register(app)`` and adds its
command(s); this module discovers them, so adding a command never edits a
shared file. ``main()`` turns :class:`infermeter.errors.UserError` into a
one-line message and exit code 2, and Ctrl-C into "interrupted" and exit code 130
(:mod:`infermeter.cli.interrupt`). Results that could not be written part-way
(:class:`infermeter.errors.ResultsWriteError`, or a file's ``OSError`` of a full or failing disk) are
one line and exit code 4; any other file's ``OSError`` (read-only, a file where a folder should be)
one line naming the path and exit code 2.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from infermeter import __version__
from infermeter.cli import interrupt
from infermeter.cli.help import App
from infermeter.errors import WRITE_FAILED_EXIT, ResultsWriteError, UserError
from infermeter.terminal import SafeConsole, escape

app = App(
    name="infermeter",
    help="Measure, model and price LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"infermeter {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Measure, model and price LLM serving."""


def _load_commands() -> None:
    import infermeter.cli as pkg

    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("cmd_"))
    for name in names:
        module = importlib.import_module(f"infermeter.cli.{name}")
        module.register(app)


_load_commands()


def main() -> None:
    """Run the command; a UserError is one line and exit 2, Ctrl-C says "interrupted" and exits 130."""
    err = SafeConsole(stderr=True)
    try:
        app(standalone_mode=True)  # typer turns a KeyboardInterrupt into exit code 130
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(exc)}", highlight=False, soft_wrap=True)  # redacted by the console
        sys.exit(2)
    except ResultsWriteError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(WRITE_FAILED_EXIT)
    except OSError as exc:  # a file that cannot be written (or read): one line naming it, never a traceback
        if exc.filename is None:
            raise
        from infermeter.records.outputs import DISK_ERRNOS, why

        disk = exc.errno in DISK_ERRNOS
        err.print(f"[bold red]error:[/] {escape(str(exc.filename))}: {escape(why(exc))}"
                  + ("; what was written before is kept" if disk else ""), highlight=False, soft_wrap=True)
        sys.exit(WRITE_FAILED_EXIT if disk else 2)
    except SystemExit as exc:
        if exc.code in (130, 143) and not interrupt.announced:
            err.print("[yellow]interrupted[/]: stopped before it finished", highlight=False)
        raise


if __name__ == "__main__":
    main()
