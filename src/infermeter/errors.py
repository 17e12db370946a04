"""User-facing errors: bad flags, files, datasets or server responses.

Raise :class:`UserError` with a message that names the input at fault; the CLI
prints it on one line and exits with code 2. Library code never prints.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with what the user gave us; the message names the input."""


class ConfigError(UserError):
    """A flag or config file value is invalid."""


class DataError(UserError):
    """A dataset, results directory or data file is malformed."""


def yaml_problem(exc: Exception) -> str:
    """One line for a YAML parse error: ``line L, column C: what``, as the file's author counts lines."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)
