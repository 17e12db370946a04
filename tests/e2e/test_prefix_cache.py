"""A warm prefix cache does not leak between runs unnoticed: new prompt text per run by default, a
warning when a workload without shared prefixes hits the cache, and the emulator's cache reset."""

import json
import urllib.request

import pyarrow.parquet as pq
import pytest

from infermeter.engines.emulator.process import EmulatorProcess


@pytest.fixture(scope="module")
def twin():
    with EmulatorProcess(["--speedup", "4"]) as emu:  # the digital twin: vLLM-like, prefix caching on
        yield emu


def _run(cli, url, out, *extra):
    p = cli("run", "--url", url, "--concurrency", "4", "--requests", "24", "--input-tokens", "256",
            "--output-tokens", "4", "--out", str(out), *extra)
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    return s, json.loads((out / "run.json").read_text()), p


def test_same_prompts_twice_warn_new_prompts_and_a_reset_do_not(twin, cli, tmp_path):
    a, _, _ = _run(cli, twin.base_url, tmp_path / "a", "--prompt-salt", "0")
    assert a["server_metrics"]["prefix_cache_hit_rate"] < 0.05 and not _warm(a)
    b, _, p = _run(cli, twin.base_url, tmp_path / "b", "--prompt-salt", "0")  # the same text again
    assert b["server_metrics"]["prefix_cache_hit_rate"] > 0.5
    assert _warm(b) and "prefix_cache_warm" in p.stdout + p.stderr
    c, run_c, _ = _run(cli, twin.base_url, tmp_path / "c")  # default: a new salt, new text, same lengths
    salt = run_c["config"]["prompt_salt"]
    assert isinstance(salt, int) and salt > 0 and run_c["workload"]["prompt_salt"] == salt
    assert c["server_metrics"]["prefix_cache_hit_rate"] < 0.05 and not _warm(c)
    lengths = [pq.read_table(d / "requests.parquet", columns=["requested_input_tokens"]).column(0).to_pylist()
               for d in (tmp_path / "a", tmp_path / "c")]
    assert lengths[0] == lengths[1]
    # the campaign's (and vLLM's dev) endpoint clears the cache: the same text again is cold
    req = urllib.request.Request(twin.base_url + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and json.loads(r.read()) == {"reset": True}
    d, _, _ = _run(cli, twin.base_url, tmp_path / "d", "--prompt-salt", "0")
    assert d["server_metrics"]["prefix_cache_hit_rate"] < 0.05 and not _warm(d)


def test_steps_of_a_plan_send_their_own_text(twin, cli, tmp_path):
    out = tmp_path / "sweep"
    p = cli("run", "--url", twin.base_url, "--load", "sweep", "--sweep-rates", "1", "--concurrency", "4",
            "--requests", "16", "--input-tokens", "256", "--output-tokens", "4", "--out", str(out),
            "--no-calibrate")
    assert p.returncode == 0, p.stderr
    salts = [json.loads((out / "steps" / str(k) / "run.json").read_text())["config"]["prompt_salt"] for k in range(3)]
    assert len(set(salts)) == 3 and salts[1] == salts[0] + 1
    s = json.loads((out / "summary.json").read_text())
    assert all((e.get("server_metrics") or {}).get("prefix_cache_hit_rate", 0) < 0.05 for e in s["steps"])


def _warm(s):
    return [w for w in s.get("warnings") or [] if w.startswith("prefix_cache_warm")]
