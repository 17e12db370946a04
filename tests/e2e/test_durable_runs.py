"""End-to-end: nothing lost, nothing merged. A full disk during a run (injected: the journal's writes fail
with ENOSPC after N records) stops it once, with one line and exit 4, and keeps and summarises what was
written; two runs started together into one --out never merge; a prompt that cannot be encoded is a failed
record; an output that cannot be written is one line and exit 2 for every command that writes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

# `infermeter ARGS` in a process whose journal writes fail with ENOSPC after FULL_AFTER records
FULL_DISK = """
import errno, os, sys
from infermeter.records import store

class FullDisk:
    def __init__(self, after):
        self.after = after
    def __getattr__(self, name):
        return getattr(os, name)
    def write(self, fd, data):
        if self.after <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.after -= 1
        return os.write(fd, data)

store.os = FullDisk(int(os.environ["FULL_AFTER"]))
from infermeter.cli.main import main
sys.argv = ["infermeter", *sys.argv[1:]]
main()
"""


def _env(**kw: str) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("OPENAI_API_KEY", None)
    return e | kw


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "never retrieved" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_full_disk_stops_the_run_once_keeps_and_summarises_what_was_written(emulator, tmp_path, as_json):
    out = tmp_path / "r"
    p = subprocess.run([sys.executable, "-c", FULL_DISK, "run", "--url", emulator.base_url, "--model",
                        "infermeter-emulator", "--concurrency", "4", "--requests", "400", "--output-tokens", "4",
                        "--out", str(out), "--progress-every", "0", *(["--json"] if as_json else [])],
                       capture_output=True, text=True, timeout=300, env=_env(FULL_AFTER="50"))
    assert p.returncode == 4, p.stderr
    line = _one_error_line(p.stderr)
    assert "No space left on device" in line and "stopped sending" in line and str(out) in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduled"] == 50 and summary["completed"] == 50  # the 50 records written, summarised
    assert any(w.startswith("write_failed") for w in summary["warnings"])
    if as_json:  # the summary of what was written is shown, then the one line
        assert json.loads(p.stdout)["scheduled"] == 50
    else:
        assert "50 ok" in p.stdout
    table = pq.read_table(out / "requests.parquet")
    ids = table.column("request_id").to_pylist()
    assert len(ids) == 50 == len(set(ids))
    run = json.loads((out / "run.json").read_text())
    failure = run["runtime"]["write_failure"]
    assert failure["errno"] == 28 and failure["path"].endswith("requests.jsonl")
    assert run["runtime"]["sent"] <= 50 + 1 + 4  # it stopped sending at the failure (400 were asked for)
    assert failure["unwritten"] == run["runtime"]["sent"] - 50  # and counted every request left without a record


def test_two_runs_started_together_into_one_out_never_merge(emulator, tmp_path, infermeter_bin):
    out = tmp_path / "shared"
    args = [str(infermeter_bin), "run", "--url", emulator.base_url, "--model", "infermeter-emulator",
            "--concurrency", "4", "--requests", "120", "--output-tokens", "4", "--out", str(out),
            "--progress-every", "0"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for _ in range(2)]
    done = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], done
    loser = next(err for p, (_, err) in zip(procs, done) if p.returncode == 2)
    line = _one_error_line(loser)
    assert f"--out {out}" in line and ("is writing to it" in line or "already holds a run" in line)
    ids = pq.read_table(out / "requests.parquet").column("request_id").to_pylist()
    assert sorted(ids) == list(range(120))  # one run's records, each once
    assert json.loads((out / "summary.json").read_text())["scheduled"] == 120


def test_a_prompt_that_cannot_be_encoded_is_a_failed_record_not_a_missing_one(emulator, tmp_path, cli):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hello \ud800 world", "max_tokens": 4}) + "\n"
                    + json.dumps({"prompt": "fine", "max_tokens": 4}) + "\n")
    out = tmp_path / "r"
    p = cli("run", "--url", emulator.base_url, "--model", "infermeter-emulator", "--dataset", str(data),
            "--requests", "4", "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["scheduled"] == 4 and s["completed"] == 2 and s["failed"] == 2
    assert s["errors"] == {"request_encoding_error": 2}
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    bad = [r for r in rows if r["outcome"] == "error"]
    assert len(rows) == 4 and all(r["sent_at"] is None and "surrogates" in r["error_detail"] for r in bad)


CAMPAIGN = """name: t
targets:
  - {name: e, url: "http://127.0.0.1:9"}
loads:
  - {name: c1, concurrency: 1, requests: 2}
"""


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "run"
    p = subprocess.run([str(Path(sys.executable).parent / "infermeter"), "simulate", "--model", "llama-3.1-8b",
                        "--gpu", "h100-sxm", "--requests", "20", "--concurrency", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 0, p.stderr
    return out


def _unwritable(tmp_path: Path, kind: str) -> Path:
    """A folder path no process can write, root included (chmod does not stop root)."""
    if kind == "under-a-file":
        (tmp_path / "file").write_text("")
        return tmp_path / "file" / "out"
    sysfs = Path("/sys/infermeter-test-out")
    try:
        sysfs.mkdir()
    except OSError:
        return sysfs
    sysfs.rmdir()
    pytest.skip("/sys can be written here")


COMMANDS = {
    "run": lambda url, out, aux: ["run", "--url", url, "--model", "infermeter-emulator", "--requests", "2",
                                  "--out", str(out)],
    "sweep": lambda url, out, aux: ["run", "--url", url, "--model", "infermeter-emulator", "--load", "sweep",
                                    "--requests", "4", "--out", str(out)],
    "run --calibrate-twin": lambda url, out, aux: ["run", "--url", url, "--model", "infermeter-emulator",
                                                   "--requests", "2", "--out", str(aux / "r"),
                                                   "--calibrate-twin", str(out / "cal.yaml")],
    "simulate": lambda url, out, aux: ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--requests",
                                       "5", "--concurrency", "1", "--out", str(out)],
    "study": lambda url, out, aux: ["study", "--example", "--out", str(out)],
    "calibrate": lambda url, out, aux: ["calibrate", str(aux / "sim"), "--out", str(out / "cal.yaml")],
    "campaign": lambda url, out, aux: ["campaign", str(aux / "campaign.yaml"), "--out", str(out)],
    "report": lambda url, out, aux: ["report", str(aux / "sim"), "--out", str(out)],
    "history --index": lambda url, out, aux: ["history", "--index", str(aux / "sim"), "--db", str(out / "h.duckdb")],
}
CASES = [(c, "under-a-file") for c in COMMANDS] + [(c, "sysfs") for c in ("run", "simulate", "calibrate", "study")]


@pytest.mark.parametrize(("command", "kind"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(command, kind, emulator, sim_run, tmp_path, cli):
    out = _unwritable(tmp_path, kind)
    aux = tmp_path / "aux"
    aux.mkdir()
    (aux / "sim").symlink_to(sim_run)
    (aux / "campaign.yaml").write_text(CAMPAIGN)
    p = cli(*COMMANDS[command](emulator.base_url, out, aux))
    assert p.returncode == 2, (p.stdout, p.stderr)
    line = _one_error_line(p.stderr)
    assert str(out) in line, line
    assert not (aux / "r").exists()  # --calibrate-twin: refused before the run, not after it
