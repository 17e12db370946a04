"""The one duration grammar, for every flag and config file: ``90``, ``90s``, ``15m``, ``1h30m``, ``72h``, ``2d``.

    >>> parse_duration("72h"), parse_duration("1h30m"), parse_duration("90"), parse_duration(45)
    (259200.0, 5400.0, 90.0, 45.0)
    >>> parse_duration(None) is None
    True

A plain number is seconds; units are ``s``, ``m``, ``h`` and ``d`` and may be combined
(``1h30m``, ``1.5h``). Anything else, zero or a negative length raises
:class:`~infermeter.errors.ConfigError` naming ``what`` (the flag or the file field).
"""

from __future__ import annotations

import re
from typing import Any

from infermeter.errors import ConfigError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = r"(\d+(?:\.\d+)?)\s*([smhd])"


def parse_duration(value: Any, what: str = "--duration") -> float | None:
    """Seconds from a duration (None stays None); see the module docstring."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{what} {value!r}: expected a duration like 90s, 15m, 72h or 1h30m")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        s = str(value).strip().lower()
        try:
            seconds = float(s)
        except ValueError:
            parts = re.findall(_PART, s)
            if not parts or re.sub(_PART, "", s).strip():
                raise ConfigError(f"{what} {value!r}: expected seconds or a duration like 90s, 15m, 72h, 1h30m, 2d") from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0:
        raise ConfigError(f"{what} {value!r}: must be longer than zero")
    return seconds
