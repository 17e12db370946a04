"""For scripts: an external emulator is named as such, and default output folders stay out of git."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_external_emulator_is_not_called_embedded(emulator, cli, tmp_path):
    p = cli("run", "--url", emulator.base_url, "--requests", "4", "--output-tokens", "2", "--out", str(tmp_path / "e"),
            env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert f"target: infermeter emulator at {emulator.base_url}" in p.stdout and "embedded" not in p.stdout


def test_default_output_folders_are_ignored_at_the_root_only():
    lines = {x.strip() for x in (ROOT / ".gitignore").read_text().splitlines()}
    assert {"results/", "/report/", "/reports/", "/runs/"} <= lines
    assert "report/" not in lines  # unanchored it would hide src/infermeter/report/
