"""What infermeter prints and writes as text shows a server's or a user's words verbatim and harmlessly.

Promise: text that came from outside (a model id from ``/v1/models``, a server's error body, a
``--label``, a dataset name, a path) can neither drive the terminal nor be read as markup:

- :func:`clean` removes control characters (C0 but newline and tab, DEL, C1, and the bidirectional
  overrides), so ``ESC[2J`` (clear screen) or ``ESC]0;...BEL`` (set the window title) arrive as
  inert text (``[2J``);
- :func:`escape` is :func:`clean` plus rich's markup escape: ``--label "[baseline] llama"``
  prints as ``[baseline] llama`` and ``gpu [/dev/nvidia0]`` cannot raise ``MarkupError``. Put it
  around every outside value interpolated into a string that rich reads as markup;
- :class:`SafeConsole` (:func:`console` makes one) is the only console infermeter prints with: it
  cleans and redacts (:mod:`infermeter.redact`) every string before rich parses it and every
  segment before it reaches the terminal, so a value that reached it without :func:`escape`
  still cannot move the cursor, retitle the window, or show a key.

::

    >>> escape("gpu [/dev/nvidia0]\\x1b[2J")
    'gpu \\\\[/dev/nvidia0][2J'
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.errors import MarkupError
from rich.markup import escape as _markup_escape
from rich.segment import Segment
from rich.text import Text

from infermeter.redact import redact_text

# C0 but \t and \n, DEL, C1, and the bidi embeddings/overrides/isolates (text that reads differently than it is)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """``text`` without control characters (newline and tab are kept)."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


def clean_line(text: str) -> str:
    """``text`` on one line: control characters removed, newlines and tabs made spaces."""
    return _LINE.sub("", text.replace("\r\n", " ").replace("\n", " ").replace("\t", " "))


def escape(text: Any) -> str:
    """``str(text)`` cleaned and with rich markup escaped: safe inside a markup string."""
    return _markup_escape(clean(str(text)))


def html_escape(text: Any, quote: bool = True) -> str:
    """``html.escape`` of ``str(text)`` cleaned: for text a server or user supplied in an HTML page."""
    return html.escape(clean(str(text)), quote)


def safe_text(text: Any, style: str = "") -> Text:
    """A rich :class:`Text` of outside ``text``: never read as markup, redacted and cleaned (a key split
    across a wrapped cell's segments would escape the console's per-segment pass)."""
    return Text(clean(redact_text(str(text))), style=style)


class SafeConsole(Console):
    """A rich console that cleans and redacts everything it prints (see the module's docstring)."""

    def render_str(self, text: str, **kw: Any) -> Text:
        text = clean(redact_text(text))
        try:
            return super().render_str(text, **kw)
        except MarkupError:  # an outside value that reached markup unescaped: shown as it is, never a crash
            return super().render_str(text, **{**kw, "markup": False})

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and len(seg.text) > 3:
                text = clean(redact_text(seg.text))
                if text != seg.text:
                    seg = Segment(text, seg.style)
            yield seg


def console(*, stderr: bool = False, **kw: Any) -> SafeConsole:
    """The console every command prints with (``stderr=True`` for progress and errors)."""
    return SafeConsole(stderr=stderr, **kw)
