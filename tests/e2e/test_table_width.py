"""cost, capacity, history and the run summary at 80 and 120 columns: no figure or name is cut.

Runs are simulated (fast, hardware known) with long labels and model names, as real runs have."""

import json
import re

import pytest
from typer.testing import CliRunner

from infermeter.cli.costview import money
from infermeter.cli.main import app

WIDTHS = [80, 120]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    out = []
    for name, model, gpu, rate in (("a", "llama-3.1-8b", "h100-sxm", "10"), ("b", "llama-3.1-70b", "4xa100-80gb:tp4", "2")):
        d = root / name
        r = CliRunner().invoke(app, ["simulate", "--model", model, "--gpu", gpu, "--rate", rate, "--requests", "60",
                                     "--out", str(d), "--label", f"nightly-{model}-on-{gpu}-chat-rate{rate}", "--json"])
        assert r.exit_code == 0, r.output
        out.append(d)
    return out


def _check(text: str, width: int, whole: list[str]) -> None:
    assert "…" not in text
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, wide
    cells = {c.strip() for line in text.splitlines() for c in re.split(r"[│┃]", line)}
    missing = [w for w in whole if w not in cells]
    assert not missing, (missing, text)


@pytest.mark.parametrize("width", WIDTHS)
def test_cost_tables_show_every_figure_whole(runs, width):
    env = {"COLUMNS": str(width)}
    data = json.loads(CliRunner().invoke(app, ["cost", *map(str, runs), "--provider", "aws", "--json"]).stdout)
    text = CliRunner().invoke(app, ["cost", *map(str, runs), "--provider", "aws"], env=env, terminal_width=width).stdout
    figures = [money(r[k]) for r in data["runs"] for k in ("usd_per_1k_output_tokens", "usd_per_1m_output_tokens",
                                                           "usd_per_1m_requests", "usd_per_month")]
    _check(text, width, figures + [r["hardware"] for r in data["runs"]])


@pytest.mark.parametrize("width", WIDTHS)
def test_capacity_tables_show_every_figure_whole(runs, width):
    args = ["capacity", "--requests-per-day", "2M", *map(str, runs), "--provider", "aws"]
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    text = CliRunner().invoke(app, args, env={"COLUMNS": str(width)}, terminal_width=width).stdout
    figures = [money(c[k]) for c in data["configs"] for k in ("usd_per_month", "usd_per_1m_requests",
                                                              "usd_per_1m_requests_at_capacity")]
    _check(text, width, figures + [c["config"] for c in data["configs"]])


@pytest.mark.parametrize("width", WIDTHS)
def test_history_table_shows_every_name_whole(runs, width, tmp_path):
    db = str(tmp_path / "h.duckdb")
    for d in runs:
        assert CliRunner().invoke(app, ["history", "--db", db, "--index", str(d)]).exit_code == 0
    text = CliRunner().invoke(app, ["history", "--db", db], env={"COLUMNS": str(width)}, terminal_width=width).stdout
    rows = json.loads(CliRunner().invoke(app, ["history", "--db", db, "--json"]).stdout)["runs"]
    _check(text, width, [f"{r['output_token_throughput']:.2f}" for r in rows] + [r["hardware"] for r in rows])
    # long names fold onto several lines of one column, whole: glue each column's pieces back together
    glued = _columns(text)
    for r in rows:
        for key in ("model", "label"):
            assert any(r[key] in col for col in glued), (r[key], glued)


def _columns(text: str) -> list[str]:
    """Each table column's data cells joined top to bottom (a folded value reads whole again)."""
    out: list[str] = []
    current: list[list[str]] = []
    for line in text.splitlines() + ["┃"]:
        if "┃" in line:  # a header line: a new table starts
            out += ["".join(col) for col in current]
            current = []
        elif "│" in line:
            cells = [c.strip() for c in line.split("│")]
            current += [[] for _ in range(len(cells) - len(current))]
            for k, c in enumerate(cells):
                current[k].append(c)
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_run_summary_fits(runs, width):
    text = CliRunner().invoke(app, ["summarize", str(runs[0])], env={"COLUMNS": str(width)}, terminal_width=width).stdout
    s = json.loads((runs[0] / "summary.json").read_text())
    _check(text, width, [f"{s['ttft_ms']['p50']:.2f}", f"{s['e2e_ms']['mean']:.2f}"])
