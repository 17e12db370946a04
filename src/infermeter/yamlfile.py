"""YAML files users write (study, campaign, hardware, prices, calibration): one way to read them, one way to fail.

    >>> yaml_mapping("model: llama-3.1-8b", "study file s.yaml", "model, configurations")
    {'model': 'llama-3.1-8b'}
    >>> line_of("a: 1\\nb:\\n  - x: 2\\n", ("b", 0, "x"))
    3

A parse error names the file and the line and column as its author counts them; a document that
is not a mapping says what was expected; :func:`field_error` turns a pydantic validation error
into one line naming the file, the line of the field and the field (``s.yaml, line 3:
configurations[0].config: ...``). All raise :class:`~infermeter.errors.ConfigError`.

Every YAML file infermeter reads goes through :func:`safe_load` (``yaml.safe_load`` with a bound):
aliases may add at most ``MAX_ALIAS_NODES`` nodes to what the file spells out, and none may refer
to itself, so a few hundred bytes of nested ``&a``/``*a`` (a "billion laughs") is refused with
:class:`AliasBomb`, a ``yaml.YAMLError`` that every reader reports as one line naming the file,
before anything walks the expanded tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from infermeter.errors import ConfigError

MAX_ALIAS_NODES = 10_000  # nodes aliases may add to a file's own (a shared block reused a few hundred times)


class AliasBomb(yaml.YAMLError):
    """A YAML document whose aliases expand beyond ``MAX_ALIAS_NODES`` or refer to themselves."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    return []


def check_aliases(root: yaml.Node, limit: int = MAX_ALIAS_NODES) -> None:
    """Raise :class:`AliasBomb` when expanding ``root``'s aliases adds more than ``limit`` nodes.

    Counts without expanding (each distinct node once, its expanded size from its children's) and
    without recursion (a deeply nested file cannot overflow the stack)."""
    size: dict[int, int] = {}
    started: set[int] = set()  # nodes whose subtree is being counted: an alias to one is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            started.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        started.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in started:
                raise AliasBomb("an alias refers to the node that contains it (a recursive alias); refused")
            if id(child) not in size:
                stack.append((child, False))
    added = size[id(root)] - len(size)
    if added > limit:
        raise AliasBomb(f"its aliases expand to {added:,} more nodes than the file holds (at most {limit:,}: an "
                        "alias bomb?); refused")


class _BoundedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    def construct_document(self, node: yaml.Node) -> Any:
        check_aliases(node)
        return super().construct_document(node)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` that refuses alias bombs (:class:`AliasBomb`, a ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader



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
        data = safe_load(text)
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
