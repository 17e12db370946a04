"""What a new user needs to find is findable: every doc linked from the README, the flags the
tool tells users to use documented, fault kinds in the help."""

import re
from pathlib import Path

from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.engines.emulator.faults import KINDS

ROOT = Path(__file__).resolve().parents[2]


def test_every_doc_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", readme))
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= linked


def test_flags_the_tool_points_to_are_documented():
    docs = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for flag in ("--set", "--prompt-salt", "--min-effect", "--progress-every", "--api-key", "--strict"):
        assert re.search(rf"`[^`]*{re.escape(flag)}[ =`]", docs), flag
    assert "examples/campaign.yaml" in docs and (ROOT / "examples" / "campaign.yaml").is_file()


def test_fault_kinds_are_in_the_help():
    text = CliRunner().invoke(app, ["emulate", "--help"], env={"COLUMNS": "80"}).output
    flat = " ".join(text.split())
    for kind in KINDS:
        assert re.search(rf"\b{kind}\b", flat), kind
