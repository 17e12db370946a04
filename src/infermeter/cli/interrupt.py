"""Ctrl-C and SIGTERM: a command stops cleanly, keeps its results, says "interrupted", exits 130 (143).

Commands that trap the signal to finish cleanly (``run``, ``campaign``) call :func:`interrupted`
after writing their results; :func:`infermeter.cli.main.main` turns a plain ``KeyboardInterrupt``
in any other command into the same line and exit code::

    if measurement.stopped:
        interrupted(console, f"summary covers the requests that finished; results in {run_dir}", signum)
"""

from __future__ import annotations

import signal
from typing import NoReturn

import typer
from rich.console import Console

from infermeter.terminal import escape

EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal number, as shells report it
announced = False  # a command said "interrupted" already (main does not say it twice)


def exit_code(signum: int | None) -> int:
    sig = int(signum or signal.SIGINT)
    return EXIT_CODES.get(sig, 128 + sig)


def interrupted(console: Console, what: str, signum: int | None = None) -> NoReturn:
    """Say the command was interrupted and what was kept, then exit 130 (SIGINT) or 143 (SIGTERM)."""
    global announced
    name = signal.Signals(signum).name if signum else "SIGINT"
    console.print(f"[yellow]interrupted ({name}):[/] {escape(what)}", highlight=False, soft_wrap=True)
    announced = True
    raise typer.Exit(exit_code(signum))
