"""CLI options generated from the models that declare them: one declaration, every command.

A :class:`Flag` binds a model field to a typer option (its flag, the type typer parses, a
converter from text to the field's value, and the help from the field's description).
:func:`with_flags` adds groups of flags to a command and hands the command one dict of field
values, those the user gave (converted), plus its own parameters::

    @app.command("simulate")
    @with_flags(LOAD, WORKLOAD)
    def simulate(values: dict, *, as_json: bool = typer.Option(False, "--json")) -> None:
        cfg = RunConfig(**values)

A converter raises :class:`~infermeter.errors.ConfigError` naming the flag; an option left at
``None`` is not passed, so the model's default holds.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import typer
from pydantic import BaseModel


@dataclass(frozen=True)
class Flag:
    field: str  # the model field it sets (its name is also the python parameter)
    decls: tuple[str, ...]
    annotation: Any
    default: Any
    help: str
    convert: Callable[[Any, str], Any] | None = None  # (value, flag) -> field value
    envvar: str | None = None
    show_default: bool | str = True
    hidden: bool = False
    panel: str | None = None  # the heading it is listed under in --help
    metavar: str | None = None  # what --help shows for the value (default: from the type)

    @property
    def flag(self) -> str:
        return self.decls[0].split("/")[0]


@dataclass(frozen=True)
class FlagSpec:
    """How one field appears on the command line (everything optional: derived from the field)."""

    flag: str | None = None  # e.g. "--duration"; for booleans "--scrape/--no-scrape"
    annotation: Any = None  # what typer parses (default: the field's type, Optional when it may be None)
    convert: Callable[[Any, str], Any] | None = None
    help: str | None = None
    envvar: str | None = None
    show_default: bool | str | None = None
    aliases: tuple[str, ...] = field(default=())
    metavar: str | None = None


def model_flags(model: type[BaseModel], specs: dict[str, FlagSpec | None], panel: str | None = None) -> list[Flag]:
    """Flags for ``specs``' fields of ``model`` (a ``None`` spec: everything derived), listed under
    the ``panel`` heading in ``--help``."""
    out = []
    for name, spec in specs.items():
        spec = spec or FlagSpec()
        f = model.model_fields[name]
        text = (spec.help or f.description or "").strip()
        text = (text[:1].upper() + text[1:]) if text else ""
        if text and not text.endswith((".", ")")):
            text += "."
        annotation = spec.annotation if spec.annotation is not None else f.annotation
        is_bool = annotation is bool
        flag = spec.flag or "--" + name.replace("_", "-")
        if is_bool and "/" not in flag:
            flag = f"{flag}/--no-{flag.removeprefix('--')}"
        default = f.default if (is_bool or spec.convert is None) else None
        show: bool | str = spec.show_default if spec.show_default is not None else True
        if spec.convert is not None and not is_bool and f.default is not None and spec.show_default is None:
            show = str(f.default)
        if not is_bool and default is None and annotation is not None and "None" not in str(annotation):
            annotation = annotation | None
        out.append(Flag(field=name, decls=(flag, *spec.aliases), annotation=annotation, default=default, help=text,
                        convert=spec.convert, envvar=spec.envvar, show_default=show, panel=panel,
                        metavar=spec.metavar))
    return out


def with_flags(*groups: Sequence[Flag]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the flags of ``groups`` to a command; see the module docstring."""
    flags = [f for g in groups for f in g]

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(fn).parameters.values())[1:]
        names = {p.name for p in own}
        clash = [f.field for f in flags if f.field in names]
        if clash:
            raise TypeError(f"{fn.__name__}: flags {clash} clash with the command's own parameters")

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            values: dict[str, Any] = {}
            for f in flags:
                v = kwargs.pop(f.field)
                if v is None:
                    continue
                values[f.field] = f.convert(v, f.flag) if f.convert is not None else v
            return fn(values, **kwargs)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        for f in flags:
            opt = typer.Option(f.default, *f.decls, help=f.help, envvar=f.envvar, show_default=f.show_default,
                               hidden=f.hidden, rich_help_panel=f.panel, metavar=f.metavar)
            params.append(inspect.Parameter(f.field, inspect.Parameter.KEYWORD_ONLY, default=opt,
                                            annotation=f.annotation))
        hints = {p.name: p.annotation for p in params}
        own_hints = inspect.get_annotations(fn, eval_str=True)
        hints.update({k: v for k, v in own_hints.items() if k in names})
        wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # typeshed: functions have no __signature__
            [p.replace(annotation=hints[p.name]) for p in params], return_annotation=None)
        wrapper.__annotations__ = {**hints, "return": None}
        del wrapper.__wrapped__  # typer must read this signature, not the wrapped function's
        return wrapper

    return deco
