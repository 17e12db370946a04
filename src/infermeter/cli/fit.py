"""Tables that never cut a figure: split into column groups, or stacked, when the console is narrow.

A rich table wider than the console shortens its cells with an ellipsis (``$46,…``).
:class:`Fit` wraps a table and decides at render time, for the width it gets: the table as it
is when it fits; else the same rows in several tables of fewer columns, each repeating the first
(key) column; else, when even the key and one column do not fit, one block per row with
``header: value`` lines. Text columns should be built with ``overflow="fold"`` (a long label
wraps, whole, never narrower than 10 characters) and figure columns with the default
``overflow="ellipsis"`` (so a squeezed figure is noticed, never shown cut); :func:`make_table`
does both::

    t = make_table("Cost", [("run", "text"), ("$/1M out", "num")])
    t.add_row("chat-a100", "$2.54")
    console.print(Fit(t))            # the same call at 80 or 200 columns

Whether a layout fits is decided by rendering it: a layout fits when rich had to shorten no
cell (no ellipsis in the output) and no line is wider than the console.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, JustifyMethod, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

ELLIPSIS = "…"


TEXT_MIN_WIDTH = 10  # a text column is not folded narrower than this (or its widest cell)


def fits(console: Console, options: ConsoleOptions, renderable: RenderableType) -> bool:
    """True when ``renderable`` renders within ``options.max_width`` without shortening anything."""
    for line in Segment.split_lines(console.render(renderable, options)):
        text = "".join(seg.text for seg in line)
        if ELLIPSIS in text or cell_len(text.rstrip()) > options.max_width:
            return False
    return True


def _plain(cell: object) -> str:
    if isinstance(cell, Text):
        return cell.plain
    try:
        return Text.from_markup(str(cell)).plain
    except Exception:  # noqa: BLE001 - text that is not markup counts as it is
        return str(cell)


def _copy_table(table: Table, columns: list[int], title: str | Text | None) -> Table:
    t = Table(title=title, title_justify=table.title_justify, show_edge=table.show_edge, box=table.box,
              show_header=table.show_header, caption=None, padding=table.padding, pad_edge=table.pad_edge)
    cols = table.columns
    for i in columns:
        c: Column = cols[i]
        min_width = c.min_width
        if c.overflow == "fold" and not c.no_wrap:  # folded text keeps a readable width
            widest = max((cell_len(w) for x in (c.header, *c.cells) for w in _plain(x).split()), default=1)
            min_width = max(min_width or 0, min(TEXT_MIN_WIDTH, widest))
        t.add_column(c.header, justify=c.justify, style=c.style, no_wrap=c.no_wrap, overflow=c.overflow,
                     header_style=c.header_style, min_width=min_width)
    cells = [list(cols[i].cells) for i in columns]
    for r in range(table.row_count):
        t.add_row(*(cells[k][r] if r < len(cells[k]) else "" for k in range(len(columns))))
    return t


def stacked(table: Table) -> Table:
    """One block per row: the key column's value, then ``header  value`` lines."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    cols = table.columns
    cells = [list(c.cells) for c in cols]
    if table.title:
        grid.add_row(Text(str(table.title), style="italic"), "")
    for r in range(table.row_count):
        if r:
            grid.add_row("", "")
        for k, c in enumerate(cols):
            grid.add_row(_plain(c.header), cells[k][r] if r < len(cells[k]) else "")
    return grid


class Fit:
    """A table laid out for the width it is rendered at; see the module docstring."""

    def __init__(self, table: Table, key_columns: int = 1) -> None:
        self.table = table
        self.key_columns = key_columns

    def layouts(self, console: Console, options: ConsoleOptions) -> list[Table]:
        table = self.table
        n = len(table.columns)
        whole = _copy_table(table, list(range(n)), table.title)
        if fits(console, options, whole):
            whole.caption = table.caption
            return [whole]
        keys = list(range(min(self.key_columns, n)))
        rest = list(range(len(keys), n))
        parts: list[list[int]] = []
        current: list[int] = []
        for i in rest:
            trial = _copy_table(table, keys + current + [i], table.title)
            if fits(console, options, trial):
                current.append(i)
                continue
            if not current:  # even the key column and this one alone do not fit
                return [stacked(table)]
            parts.append(current)
            current = [i]
            if not fits(console, options, _copy_table(table, keys + current, table.title)):
                return [stacked(table)]
        if current:
            parts.append(current)
        out = []
        for k, cols in enumerate(parts):
            title: str | Text | None = table.title if k == 0 else (f"{table.title} (continued)" if table.title else None)
            out.append(_copy_table(table, keys + cols, title))
        if table.caption and out:
            out[-1].caption = table.caption
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.layouts(console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table).clamp(max_width=options.max_width)


def make_table(title: str | None, columns: Iterable[tuple[str, str]], *, caption: str | None = None,
               title_justify: JustifyMethod = "center", show_edge: bool = False) -> Table:
    """A table whose ``("header", "text")`` columns wrap whole (fold), whose ``("header", "name")``
    columns (configurations, sources) and ``("header", "num")`` columns (right-aligned) are never
    broken: a value too wide for its column shows an ellipsis, which makes :class:`Fit` choose
    another layout. Print it as ``Fit(table)``."""
    t = Table(title=title, caption=caption, title_justify=title_justify, show_edge=show_edge)
    for header, kind in columns:
        if kind == "num":
            t.add_column(header, justify="right", overflow="ellipsis")
        elif kind == "name":
            t.add_column(header, overflow="ellipsis")
        else:
            t.add_column(header, overflow="fold")
    return t
