"""history --trend groups runs by comparable configuration and says what it grouped by."""

import json

from typer.testing import CliRunner

from infermeter.cli.main import app


def _sim(tmp_path, name, *args):
    r = CliRunner().invoke(app, ["simulate", "--requests", "40", "--output-tokens", "32", "--out", str(tmp_path / name),
                                 "--label", name, "--json", *args])
    assert r.exit_code == 0, r.output
    return tmp_path / name


def test_trend_never_mixes_lengths_or_load_levels(tmp_path):
    db = str(tmp_path / "h.duckdb")
    runs = [_sim(tmp_path, "a1", "--rate", "4", "--input-tokens", "200"),
            _sim(tmp_path, "long", "--rate", "4", "--input-tokens", "3000"),  # another input length
            _sim(tmp_path, "busy", "--rate", "12", "--input-tokens", "200"),  # another load level
            _sim(tmp_path, "a2", "--rate", "4", "--input-tokens", "200")]
    for d in runs:
        assert CliRunner().invoke(app, ["history", "--db", db, "--index", str(d)]).exit_code == 0
    data = json.loads(CliRunner().invoke(app, ["history", "--db", db, "--trend", "ttft_p50_ms", "--json"]).stdout)
    groups: dict[str, list[str]] = {}
    for r in data["runs"]:
        groups.setdefault(r["configuration"], []).append(r["label"])
    assert sorted(groups.values()) == [["a1", "a2"], ["busy"], ["long"]]
    key = next(k for k, v in groups.items() if v == ["a1", "a2"])
    assert "4rps-poisson" in key and "in200-out32" in key and "simulated" in key
    text = CliRunner().invoke(app, ["history", "--db", db, "--trend", "ttft_p50_ms"], env={"COLUMNS": "200"}).stdout
    assert "3 configuration(s); runs are grouped by model @ hardware · profile · load and level · lengths" in text
    a = [r["value"] for r in data["runs"] if r["label"] in ("a1", "a2")]
    line = next(x for x in text.splitlines() if "(2 runs)" in x)
    assert f"{a[0]:.4g} → {a[1]:.4g}" in line  # the change is read within the group only
    assert sum("→" in x for x in text.splitlines()) == 1  # one-run groups show no change
