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

