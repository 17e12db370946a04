"""YAML config files (study, campaign, hardware, prices): one way to read them, one way to fail.

    >>> yaml_mapping("model: llama-3.1-8b", "study file s.yaml", "model, configurations")
    {'model': 'llama-3.1-8b'}

A parse error names the file and the line and column as its author counts them;
a document that is not a mapping says what was expected. Both raise
:class:`~infermeter.errors.ConfigError`.
"""

from __future__ import annotations

from typing import Any

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
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({yaml_problem(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with {expected}")
    return data
