"""Help for every command: texts from the models that declare the options, laid out so nothing is cut.

:func:`field_help` gives an option its help from the model field's description (one
declaration, one wording). :class:`App` is the ``typer.Typer`` every command hangs on: its
commands and groups print plain help (click's formatter) that wraps at the terminal's width,
puts a long flag's help on the next line instead of shortening the flag, groups options under
headings (an option's ``rich_help_panel``), and lists commands with their whole first paragraph,
so ``COLUMNS=80 infermeter run --help`` shows every flag and every word::

    >>> from infermeter.engines.emulator.config import EmulatorConfig
    >>> field_help(EmulatorConfig)["speedup"]
    'Run K times faster than real time.'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from pydantic import BaseModel
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandFunctionType

Ctx = Any  # typer's click Context and HelpFormatter (click is vendored inside recent typer)

MAX_HELP_WIDTH = 100  # help wraps at the terminal width, up to this many columns


def field_help(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> its description as a help sentence (capitalised, ending in a full stop)."""
    out: dict[str, str] = {}
    for name, f in model.model_fields.items():
        text = (f.description or "").strip()
        if text:
            text = text[0].upper() + text[1:]
            out[name] = text if text.endswith((".", ")")) else text + "."
        else:
            out[name] = ""
    return out


def first_paragraph(text: str | None) -> str:
    """The first paragraph of a docstring, whole, on one line."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


class Command(TyperCommand):
    """A command whose options are grouped by panel and never shortened (click's wrapping formatter)."""

    def format_options(self, ctx: Ctx, formatter: Ctx) -> None:
        args: list[tuple[str, str]] = []
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            rv = param.get_help_record(ctx)
            if rv is None:
                continue
            if param.param_type_name == "argument":
                args.append(rv)
            else:
                sections.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(rv)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for name, rows in sections.items():
            if rows:
                with formatter.section(name):
                    formatter.write_dl(rows)


class Group(TyperGroup):
    """A command group that lists its commands with their whole first paragraph (wrapped, not cut)."""

    def format_commands(self, ctx: Ctx, formatter: Ctx) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.short_help or first_paragraph(cmd.help)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class App(typer.Typer):
    """``typer.Typer`` whose commands and sub-groups use :class:`Command` and :class:`Group`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        kwargs.setdefault("rich_markup_mode", None)
        kwargs.setdefault("context_settings", {"max_content_width": MAX_HELP_WIDTH})
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)
