"""Help texts of CLI options from the models that declare them (one declaration, one wording).

    >>> from infermeter.engines.emulator.config import EmulatorConfig
    >>> field_help(EmulatorConfig)["speedup"]
    'Run K times faster than real time.'
"""

from __future__ import annotations

from pydantic import BaseModel


def field_help(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> its description as a help sentence (capitalised, ending in a full stop)."""
    out: dict[str, str] = {}
    for name, f in model.model_fields.items():
        text = (f.description or "").strip()
        if text:
            text = text[0].upper() + text[1:]
            out[name] = text if text.endswith((".", ")")) else text + "."
        else:
            out[name] = ""
    return out
