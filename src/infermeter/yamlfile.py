"""YAML files users write (study, campaign, hardware, prices, calibration): one way to read them, one way to fail.

    >>> yaml_mapping("model: llama-3.1-8b", "study file s.yaml", "model, configurations")
    {'model': 'llama-3.1-8b'}
    >>> line_of("a: 1\\nb:\\n  - x: 2\\n", ("b", 0, "x"))
    3

A parse error names the file and the line and column as its author counts them; a document that
is not a mapping says what was expected; :func:`field_error` turns a pydantic validation error
into one line naming the file, the line of the field and the field (``s.yaml, line 3:
configurations[0].config: ...``). All raise :class:`~infermeter.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from infermeter.errors import ConfigError


def yaml_problem(exc: Exception) -> str:
    """One line for a YAML parse error: ``line L, column C: what``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)


def yaml_mapping(text: str, where: str, expected: str) -> dict[str, Any]:
    """Parse ``text`` as a YAML mapping; ConfigError naming ``where`` otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({yaml_problem(exc)})") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp that is not a date
        raise ConfigError(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with {expected}")
    return data


def line_of(text: str, loc: Sequence[Any]) -> int | None:
    """The 1-based line of the value at ``loc`` (keys and list indices) in ``text``, or of its deepest
    ancestor that exists; None when the text does not parse."""
    try:
        node = yaml.compose(text)
    except (yaml.YAMLError, ValueError, TypeError):
        return None
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            nxt = node.value[part]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
        line = node.start_mark.line + 1
    return line


def loc_text(loc: Sequence[Any]) -> str:
    """``("configurations", 0, "config")`` -> ``configurations[0].config``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "file"


def field_error(where: str, text: str | None, exc: ValidationError, prefix: Sequence[Any] = ()) -> ConfigError:
    """One line for the first problem of a validation error: file, line, field, what is wrong."""
    e = exc.errors()[0]
    loc = [*prefix, *[p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))]]
    line = line_of(text, loc) if text is not None else None
    at = f", line {line}" if line else ""
    msg = str(e["msg"]).removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    return ConfigError(f"{where}{at}: {loc_text(loc)}: {msg}" + (f" (and {more} more)" if more else ""))
