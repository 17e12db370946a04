"""`infermeter profiles` lists every profile with its fields and defaults."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from infermeter.cli.main import app


def test_profiles_json_lists_every_profile_and_default() -> None:
    result = CliRunner().invoke(app, ["profiles", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["profile"]: r for r in json.loads(result.output)}
    assert sorted(rows) == ["chat", "classification", "code", "fixed", "reasoning", "synthetic"]
    fields = {f["field"]: f["default"] for f in rows["classification"]["fields"]}
    assert fields["document_tokens"] == "10000,5000,8000,12000"
    assert fields["output_tokens"] == "50,10,30,80"
    assert {f["field"]: f["default"] for f in rows["code"]["fields"]}["input_tokens"] == "4096,1000,3000,6000"
    assert {f["field"]: f["default"] for f in rows["fixed"]["fields"]}["output_tokens"] == "800,100,50,800"


def test_profiles_table_for_one_profile() -> None:
    result = CliRunner().invoke(app, ["profiles", "synthetic"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "prefix_groups" in result.output and "--prefix-tokens" in result.output
    assert "classification" not in result.output


def test_unknown_profile_is_an_error() -> None:
    result = CliRunner().invoke(app, ["profiles", "nope"])
    assert result.exit_code != 0
    assert "profile 'nope': unknown" in str(result.exception)
