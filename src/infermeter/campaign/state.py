"""The campaign's state file: what ran, what is running, what is left — so it resumes after a stop.

``campaign-state.json`` in the campaign directory is rewritten atomically at
every change. Each cell (``target/profile/load/rK``) has a status:
``running`` (set before the run starts: a campaign killed mid-run leaves it
so), ``done``, ``failed`` (with the error), or ``interrupted`` (stopped with
Ctrl-C). Resuming runs every cell that is not ``done``; the directory of an
unfinished attempt is kept beside as ``rK.attempt-N``. Engines started by the
campaign are listed under ``engines`` while they run::

    state = CampaignState.open(out_dir, campaign, restart=False)
    state.todo(cells)                  # the cells still to run, in order
    state.set(cell.key, status="done", run_dir="runs/...")
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from infermeter.campaign.spec import Campaign, Cell
from infermeter.errors import UserError
from infermeter.records import store

STATE = "campaign-state.json"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class CampaignState:
    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def open(cls, out_dir: Path, campaign: Campaign, restart: bool = False) -> CampaignState:
        """The state in ``out_dir`` (new, or resumed when it matches the campaign file)."""
        path = Path(out_dir) / STATE
        if path.exists() and not restart:
            data = store.read_json(path)
            if data.get("spec_hash") != campaign.spec_hash:
                raise UserError(f"{out_dir}: holds campaign state from a different campaign file "
                                f"({data.get('file')}); use --restart to discard it, or another --out")
            data["resumed"] = int(data.get("resumed", 0)) + 1
        else:
            data = {"campaign": campaign.name, "file": str(campaign.path), "spec_hash": campaign.spec_hash,
                    "created_at": _now(), "resumed": 0, "engines": {}, "cells": {}}
        state = cls(path, data)
        state.save()
        return state

    def save(self) -> None:
        self.data["updated_at"] = _now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        store.write_json(self.path, self.data)

    def cell(self, key: str) -> dict[str, Any]:
        return dict(self.data["cells"].get(key) or {})

    def status(self, key: str) -> str | None:
        return self.cell(key).get("status")

    def todo(self, cells: list[Cell]) -> list[Cell]:
        return [c for c in cells if self.status(c.key) != "done"]

    def set(self, key: str, **fields: Any) -> None:
        entry = self.data["cells"].setdefault(key, {})
        entry.update(fields)
        if fields.get("status") in ("done", "failed", "interrupted"):
            entry["finished_at"] = _now()
        elif fields.get("status") == "running":
            entry["started_at"] = _now()
            entry["attempts"] = int(entry.get("attempts", 0)) + 1
        self.save()

    def engine(self, target: str, pid: int | None, marker: str | None = None) -> None:
        if pid is None:
            self.data["engines"].pop(target, None)
        else:
            self.data["engines"][target] = {"pid": pid, "marker": marker}
        self.save()

    def engines(self) -> dict[str, dict[str, Any]]:
        return dict(self.data.get("engines") or {})

    def launched(self, target: str, launch: dict[str, Any]) -> None:
        """What the engine of ``target`` ran when the campaign started it (its dtype, version, arguments): each
        distinct launch once, in order, so a campaign resumed on another machine keeps both."""
        if launch:
            launches = self.data.setdefault("launches", {})
            seen = launches[target] = _as_list(launches.get(target))
            if launch not in seen:
                seen.append(launch)
                self.save()

    def launches(self) -> dict[str, list[dict[str, Any]]]:
        return {k: _as_list(v) for k, v in (self.data.get("launches") or {}).items()}


def _as_list(v: Any) -> list[dict[str, Any]]:
    """A target's launches: a list (a state file of an early build kept one launch, a dict)."""
    return [v] if isinstance(v, dict) else list(v or [])


def set_aside(run_dir: Path) -> Path | None:
    """Move the directory of an unfinished attempt out of the way (``rK.attempt-N``)."""
    if not run_dir.exists():
        return None
    n = 1
    while (dest := run_dir.with_name(f"{run_dir.name}.attempt-{n}")).exists():
        n += 1
    run_dir.rename(dest)
    return dest
