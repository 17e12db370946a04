"""The table model every report format renders: HTML, Markdown and CSV show the same cells.

The contract: a :class:`Table` is a title, column names and rows of
:class:`Cell` (display text plus the raw value, and flags for "best in its
column group" and "invalid"). Builders make tables once; renderers never
recompute a number, so ``report.md`` and the HTML page cannot disagree::

    >>> t = Table("throughput", "Throughput", ["run", "req/s"], [[Cell.text("a"), Cell.num(12.345)]])
    >>> t.rows[0][1].display
    '12.35'

Number format (:func:`fmt_num`): ``–`` for missing, thousands separators from
1,000, one decimal from 100, two decimals from 1, else three significant
digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MISSING = "–"


def fmt_num(v: float | int | None, unit: str = "") -> str:
    """Format a number for a table cell (see the module docstring)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    a = abs(v)
    if isinstance(v, int) or (a >= 1000):
        text = f"{v:,.0f}"
    elif a >= 100:
        text = f"{v:.1f}"
    elif a >= 1:
        text = f"{v:.2f}"
    elif a == 0:
        text = "0"
    else:
        text = f"{v:.3g}"
    return text + unit


def fmt_usd(v: float | None) -> str:
    if v is None:
        return MISSING
    return f"${v:,.2f}" if abs(v) >= 0.1 else f"${v:.4f}"


def fmt_pct(v: float | None) -> str:
    """A fraction as a percentage (0.0123 -> '1.23%')."""
    return MISSING if v is None else f"{v * 100:.2f}%"


@dataclass(frozen=True, slots=True)
class Cell:
    display: str
    value: Any = None
    best: bool = False
    flag: str | None = None  # "invalid", "simulated", "bad", "good": styling hints only

    @classmethod
    def text(cls, s: Any, flag: str | None = None) -> Cell:
        return cls(MISSING if s is None or s == "" else str(s), s, flag=flag)

    @classmethod
    def num(cls, v: float | int | None, unit: str = "", flag: str | None = None) -> Cell:
        return cls(fmt_num(v, unit), v, flag=flag)

    @classmethod
    def usd(cls, v: float | None, flag: str | None = None) -> Cell:
        return cls(fmt_usd(v), v, flag=flag)

    @classmethod
    def pct(cls, v: float | None, flag: str | None = None) -> Cell:
        return cls(fmt_pct(v), v, flag=flag)


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    note: str | None = None
    section: str = "results"
    legend: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.key!r} row {i}: {len(row)} cells for {len(self.columns)} columns")


def mark_best(rows: list[list[Cell]], col: int, higher_is_better: bool, eligible: list[bool] | None = None) -> None:
    """Flag the best numeric value in column ``col`` among eligible rows. Ties are judged as printed: every value
    that shows the same as the best is flagged too, and none when all show the same (a lead the reader cannot
    see is not a win)."""
    vals = [
        (i, r[col].value) for i, r in enumerate(rows)
        if isinstance(r[col].value, (int, float)) and not isinstance(r[col].value, bool)
        and math.isfinite(r[col].value) and (eligible is None or eligible[i])
    ]
    shown = {i: rows[i][col].display.split(" (")[0] for i, _ in vals}
    if len(vals) < 2 or len(set(shown.values())) == 1:  # nothing to beat, or all show the same
        return
    best = max(vals, key=lambda x: x[1]) if higher_is_better else min(vals, key=lambda x: x[1])
    for i, v in vals:
        if shown[i] == shown[best[0]]:
            c = rows[i][col]
            rows[i][col] = Cell(c.display, c.value, True, c.flag)
