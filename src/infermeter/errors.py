"""User-facing errors: bad flags, files, datasets or server responses; results that cannot be written.

Raise :class:`UserError` with a message that names the input at fault; the CLI
prints it on one line and exits with code 2. An output that cannot be written
before anything was measured (a read-only folder, a file where a folder is
expected) is an :class:`OutputError`, a UserError too. A write that fails
*during* a run (disk full, I/O error) is a :class:`ResultsWriteError`: the run
stopped sending, what was written is kept and summarised, and the CLI prints the
message on one line and exits with :data:`WRITE_FAILED_EXIT` (4). Library code
never prints.
"""

from __future__ import annotations

from typing import Any

WRITE_FAILED_EXIT = 4


class UserError(Exception):
    """A problem with what the user gave us; the message names the input."""


class ConfigError(UserError):
    """A flag or config file value is invalid."""


class DataError(UserError):
    """A dataset, results directory or data file is malformed."""


class OutputError(UserError):
    """An output path cannot be written (checked before the work starts); the message names it."""


class ResultsWriteError(Exception):
    """Results could not be written part-way (ENOSPC, EIO, EROFS): the work stopped, what was written is kept.

    ``summary``: the summary of what was written (summary.json's content), for the console."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary
