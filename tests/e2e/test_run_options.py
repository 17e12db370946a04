"""run options: alerts (exit 3), --set overrides, output and URL checks."""

import json


def test_an_alert_that_fires_exits_3_and_is_listed(emulator, tmp_path, cli):
    out = tmp_path / "a"
    p = cli("run", "--url", emulator.base_url, "--concurrency", "4", "--requests", "20", "--output-tokens", "4",
            "--alert", "ttft_p95_ms>1", "--alert", "error_rate>0.5", "--out", str(out))
    assert p.returncode == 3, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert [a["alert"] for a in s["alerts"] if a["scope"] == "run"] == ["ttft_p95_ms>1"]


def test_an_alert_that_holds_exits_0(emulator, tmp_path, cli):
    p = cli("run", "--url", emulator.base_url, "--concurrency", "4", "--requests", "20", "--output-tokens", "4",
            "--alert", "ttft_p95_ms>100000", "--out", str(tmp_path / "b"))
    assert p.returncode == 0, p.stderr


def test_set_overrides_a_profile_field(emulator, tmp_path, cli):
    out = tmp_path / "s"
    p = cli("run", "--url", emulator.base_url, "--profile", "classification", "--set", "questions_per_document=2",
            "--set", "document_tokens=300", "--concurrency", "2", "--requests", "6", "--output-tokens", "4",
            "--out", str(out))
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["profile_overrides"] == {"questions_per_document": 2, "document_tokens": 300}
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 6


def test_out_that_is_a_file_and_credentials_in_url_are_one_line_errors(emulator, tmp_path, cli):
    f = tmp_path / "file"
    f.write_text("x")
    p = cli("run", "--url", emulator.base_url, "--requests", "2", "--out", str(f))
    assert p.returncode == 2 and "is a file" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli("run", "--url", "http://user:secret@127.0.0.1:9", "--requests", "2", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "credentials" in p.stderr and "secret" not in p.stderr


def test_bounds_on_counts(tmp_path, cli):
    for args, needle in ((["--requests", "0"], "--requests"), (["--requests", "2", "--warmup", "-1"], "--warmup"),
                         (["--requests", "2", "--max-concurrency", "0", "--rate", "2"], "--max-concurrency")):
        p = cli("run", "--url", "http://127.0.0.1:9", *args, "--out", str(tmp_path / "x"))
        assert p.returncode == 2 and needle in p.stderr, (args, p.stderr)
