"""What a report says, independent of its format: sections of tables and charts.

The contract: :class:`ReportContent` is everything the HTML and Markdown
renderers print, in order; they only format it. Each :class:`Section` has a
stable ``key`` (its HTML anchor and chart host id), a title, an intro line,
cards (boxed summaries, e.g. a study's decision), tables, whether charts are
drawn in it, and whether it starts folded::

    >>> content.sections[0].key, content.sections[0].title
    ('overview', 'Overview')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infermeter.report.table import Table


@dataclass(frozen=True)
class Card:
    """A boxed summary: a headline, label/text rows and bullet points (a study's decision per profile)."""

    title: str
    headline: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    tone: str = "decision"  # decision | warning (styling only)


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    intro: str | None = None
    tables: list[Table] = field(default_factory=list)
    has_charts: bool = False
    notes: list[str] = field(default_factory=list)
    collapsed: bool = False  # shown folded (click to open) in HTML
    cards: list[Card] = field(default_factory=list)  # drawn before the charts and tables


@dataclass(frozen=True)
class ReportContent:
    title: str
    generated_at: str
    version: str
    headline: list[str]
    sections: list[Section]
    charts: list[dict[str, Any]] = field(default_factory=list)

