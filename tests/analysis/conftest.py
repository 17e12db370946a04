"""Shared fixtures for tests/analysis (cost and capacity: small run directories on disk)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer


def write_cost_run(root: Path, name: str, *, hardware: str | None = "4xa100-80gb:tp4", profile: str | None = "chat",
                   output_tps: float = 1000.0, input_tps: float = 2000.0, rps: float = 4.0,
                   goodput: float | None = None, source: str = "measured", hardware_in: str = "summary",
                   steps: list[dict[str, Any]] | None = None, **extra: Any) -> Path:
    """A run directory with summary.json and run.json; ``hardware_in`` = summary | run | none."""
    d = root / name
    d.mkdir(parents=True)
    summary: dict[str, Any] = {
        "schema_version": 1, "source": source, "label": name, "model": "llama-3.1-8b", "profile": profile,
        "hardware": hardware if hardware_in == "summary" else None,
        "request_throughput": rps, "input_token_throughput": input_tps, "output_token_throughput": output_tps,
        "total_token_throughput": input_tps + output_tps, "goodput": goodput, "valid": True, "invalid_reasons": [],
        **extra,
    }
    if steps is not None:
        summary["steps"] = steps
    run = {"schema_version": 1, "tool": "infermeter", "source": source, "label": name, "model": "llama-3.1-8b",
           "hardware": hardware if hardware_in == "run" else None, "profile": profile}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "run.json").write_text(json.dumps(run))
    return d


@pytest.fixture
def make_cost_run(tmp_path: Path) -> Callable[..., Path]:
    return lambda name, **kw: write_cost_run(tmp_path, name, **kw)


@pytest.fixture
def cost_cli_app() -> typer.Typer:
    """A typer app with just the ``cost`` and ``capacity`` commands."""
    from infermeter.cli import cmd_capacity, cmd_cost

    app = typer.Typer()
    cmd_cost.register(app)
    cmd_capacity.register(app)
    return app
