"""``RunHeader``: what ``run.json`` says about a run, for measured, emulated and simulated runs alike.

Written before the run starts (so a killed run can still be read) and completed at its end
(``runtime``, ``server_metrics``, ``gpu``); ``source`` tells measured from simulated. Readers
use :meth:`RunHeader.read`::

    h = RunHeader.read(Path("results/demo/run.json"))
    h.source, h.load["describe"], h.target["emulated"]

The top level is typed; the blocks whose contents depend on the load shape, the target or the
telemetry (``load``, ``target``, ``workload``, ``config``, ``runtime`` ...) are JSON objects at
this I/O boundary, documented in docs/load.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from infermeter.errors import DataError

HEADER_SCHEMA = 1


class RunHeader(BaseModel):
    """run.json; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="allow")

    schema_version: int = HEADER_SCHEMA
    tool: str = "infermeter"
    version: str | None = None
    source: str = "measured"  # measured | emulated (infermeter's emulator as the server) | simulated
    label: str | None = None
    started_at: str | None = None
    seed: int = 0
    model: str | None = None
    hardware: str | None = None
    profile: str | None = None
    target: dict[str, Any] = {}
    load: dict[str, Any] = {}
    workload: dict[str, Any] = {}
    host: dict[str, Any] = {}
    slo: dict[str, float] | None = None
    config: dict[str, Any] = {}
    runtime: dict[str, Any] | None = None
    server_metrics: dict[str, Any] | None = None
    notices: list[str] = []

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def given(cls, **fields: Any) -> dict[str, Any]:
        """run.json for a writer that knows only some fields (a plan's head, a study cell): validated here,
        so a wrong type fails the writer and not a later reader, with this schema's version and tool, and
        nothing else added. The one way run.json gets its ``schema_version``."""
        head = cls.model_validate({**fields, "schema_version": HEADER_SCHEMA, "tool": "infermeter"})
        return head.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def read(cls, path: Path) -> RunHeader:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls.model_validate(data)
        except FileNotFoundError:
            raise DataError(f"{path}: file not found") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                e = exc.errors()[0]
                raise DataError(f"{path}: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}") from None
            raise DataError(f"{path}: not readable JSON ({exc})") from None
