"""Outside text (model ids, server errors, labels) reaches the console, Markdown and HTML verbatim and inert."""

import io

import pytest
from rich.table import Table
from rich.text import Text

from infermeter import redact
from infermeter.analysis.results import Summary
from infermeter.cli.view import error_table, summary_table
from infermeter.report.markdown import md_escape
from infermeter.terminal import SafeConsole, clean, clean_line, escape, html_escape

HOSTILE = "m\x1b[2J\x1b]0;pwned\x07\x9b31m\u202eodel"


def _console() -> SafeConsole:
    return SafeConsole(file=io.StringIO(), width=120, force_terminal=False, color_system=None)


def _out(c: SafeConsole) -> str:
    f = c.file
    assert isinstance(f, io.StringIO)
    return f.getvalue()


def test_clean_drops_control_characters_but_newline_and_tab():
    assert clean(HOSTILE) == "m[2J]0;pwned31model"
    assert clean("a\tb\nc\rd\x00e\x7f") == "a\tb\ncde"
    assert clean_line("a\nb\tc\x1b") == "a b c"


def test_escape_keeps_labels_verbatim_in_markup():
    c = _console()
    for label in ("[baseline] llama", "gpu [/dev/nvidia0]", "[bold]x[/bold]"):
        c.print(f"[bold]run:[/] {escape(label)}")
    assert _out(c).splitlines() == ["run: [baseline] llama", "run: gpu [/dev/nvidia0]", "run: [bold]x[/bold]"]


def test_unescaped_bad_markup_prints_as_it_is_instead_of_crashing():
    c = _console()
    c.print("label: gpu [/dev/nvidia0]")
    assert _out(c).strip() == "label: gpu [/dev/nvidia0]"


@pytest.mark.parametrize("renderable", [HOSTILE, Text(HOSTILE)])
def test_the_console_never_writes_a_control_character(renderable):
    c = SafeConsole(file=io.StringIO(), width=120, force_terminal=True)  # colours on: rich's own codes stay
    t = Table()
    t.add_column("x")
    t.add_row(renderable)
    c.print(renderable)
    c.print(t)
    out = _out(c)
    assert "\x1b[2J" not in out and "\x1b]0;" not in out and "\x07" not in out and "\x9b" not in out
    assert "\u202e" not in out


def test_the_console_redacts_what_it_prints(monkeypatch):
    monkeypatch.setattr(redact, "_remembered", set())
    redact.remember_secret("Zq7v-console-key-000")
    c = _console()
    c.print("error: server said Zq7v-console-key-000 and Authorization: Bearer abcdef")
    c.print(Text("sk-proj-0123456789abcdef"))
    out = _out(c)
    assert "Zq7v-con" not in out and "abcdef" not in out and "sk-proj-0123" not in out


def test_summary_and_error_tables_show_labels_and_messages_verbatim():
    s = {"label": "[baseline] llama", "source": "measured", "load": "gpu [/dev/nvidia0]", "completed": 1,
         "failed": 1, "duration_s": 1.0, "request_throughput": 1.0, "input_token_throughput": 1.0,
         "output_token_throughput": 1.0, "errors": {"http_5xx": 1},
         "error_messages": {"http_5xx": "HTTP 500: [/oops] \x1b[2J"}, "valid": True}
    s = Summary.from_json(s)
    c = _console()
    c.print(summary_table(s))
    c.print(error_table(s))
    out = _out(c)
    assert "[baseline] llama" in out and "gpu [/dev/nvidia0]" in out and "HTTP 500: [/oops] [2J" in out
    assert "\x1b" not in out


def test_markdown_and_html_text_carry_no_control_characters():
    assert md_escape(HOSTILE) == "m[2J]0;pwned31model"
    assert html_escape("<b>" + HOSTILE) == "&lt;b&gt;m[2J]0;pwned31model"


def test_safe_text_redacts_a_key_before_the_console_splits_it_into_segments():
    from infermeter.terminal import safe_text

    key = "sk-" + "Zq9" * 12
    assert key[:8] not in safe_text(f"server said: bad key {key}").plain
