"""A simulated run with --checkpoint survives a crash: --resume goes on to the same records and summary."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from infermeter.errors import ConfigError, UserError
from infermeter.measure import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.twin.config import EngineConfig
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime
from infermeter.twin.spec import TwinSpec

TWIN = fake_twin(predictor=LinearStepTime(base_s=0.01, per_token_s=1e-4), engine=EngineConfig(max_num_seqs=64),
                 lanes=3)


class Crash(Exception):
    pass


def _cfg(out, **kw):
    return RunConfig(rate=150.0, duration_s=200.0, input_tokens="200,50,100,400", output_tokens="30,10", prefix_tokens=64,
                     prefix_groups=4, seed=2, out=str(out), **kw)


def _summary(res):
    return (res.run_dir / "summary.json").read_text().replace(str(res.run_dir), "RUN")


def test_a_crashed_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    from infermeter.measure import recorder

    monkeypatch.setattr(recorder, "BATCH_ROWS", 4096)  # small row groups: parts are written before the crash
    whole = SimPlan(_cfg(tmp_path / "whole"), twin=TWIN, token_times="off").run()
    windows = []

    def crash_after_two(t, n):
        windows.append(n)
        if len(windows) == 3:
            raise Crash

    out = tmp_path / "crashed"
    with pytest.raises(Crash):
        SimPlan(_cfg(out, checkpoint_s=1e-9), twin=TWIN, token_times="off").run(progress=crash_after_two)
    assert (out / "checkpoint.pkl").exists() and not (out / "summary.json").exists()
    assert len(list((out / "parts").glob("part-*.parquet"))) >= 2
    plan, state = SimPlan.resume(out)
    assert state["seen"] < whole.records  # it stopped part way
    res = plan.run(resume=state)
    assert _summary(res) == _summary(whole)
    assert pq.read_table(res.run_dir / "requests.parquet").equals(pq.read_table(whole.run_dir / "requests.parquet"))
    assert res.run["runtime"]["resumed"] and not (out / "checkpoint.pkl").exists() and not (out / "parts").exists()


def test_resume_needs_a_checkpoint_and_one_process(tmp_path):
    with pytest.raises(UserError, match="checkpoint.pkl"):
        SimPlan.resume(tmp_path)
    with pytest.raises(ConfigError, match="--checkpoint"):
        SimPlan(_cfg(tmp_path / "x", checkpoint_s=60.0, workers=2), TwinSpec(gpu="4xh100-sxm:tp1"))


def test_simulate_resume_on_the_command_line(tmp_path):
    """A real crash: the simulating process is killed; `simulate --resume DIR` finishes the run."""
    out = tmp_path / "cli"
    args = ["--gpu", "2xh100-sxm:tp1", "--rate", "120", "--duration", "5m", "--input-tokens", "300",
            "--output-tokens", "40", "--out", str(out), "--checkpoint", "0.001", "--json"]
    code = ("import sys\nfrom infermeter.measure import simulate as s\norig = s.save_checkpoint\nn = [0]\n"
            "def save(d, st):\n    orig(d, st)\n    n[0] += 1\n    if n[0] == 2:\n        import os; os._exit(9)\n"
            "s.save_checkpoint = save\nfrom infermeter.cli.main import app\n"
            f"sys.argv = ['infermeter', 'simulate', *{args!r}]\napp()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 9, p.stderr[-2000:]
    assert (out / "checkpoint.pkl").exists() and not (out / "summary.json").exists()
    p = subprocess.run([sys.executable, "-m", "infermeter.cli.main", "simulate", "--resume", str(out), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduled"] == pq.read_metadata(out / "requests.parquet").num_rows > 30000


def test_a_checkpoint_with_other_prefix_cache_keys_is_refused_by_name(tmp_path):
    import pickle

    from infermeter.errors import DataError
    from infermeter.measure.simulate import CHECKPOINT_MAGIC

    out = tmp_path / "old"
    calls = []

    def crash_at_the_second_window(t, n):  # the first window's end saved a checkpoint
        calls.append(n)
        if len(calls) == 2:
            raise Crash

    with pytest.raises(Crash):
        SimPlan(_cfg(out, checkpoint_s=1e-9), twin=TWIN, token_times="off").run(progress=crash_at_the_second_window)
    assert SimPlan.resume(out)[1]["key_scheme"]  # this version's checkpoint resumes
    data = (out / "checkpoint.pkl").read_bytes()
    assert data.startswith(CHECKPOINT_MAGIC)
    state = pickle.loads(data[len(CHECKPOINT_MAGIC):])
    del state["key_scheme"]  # as written before the keys were made with array arithmetic
    (out / "checkpoint.pkl").write_bytes(CHECKPOINT_MAGIC + pickle.dumps(state))
    with pytest.raises(DataError, match="prefix-cache keys .*python-hash.*simulate the run again"):
        SimPlan.resume(out)
    # a checkpoint of an earlier format is refused before it is unpickled (its classes' states changed)
    (out / "checkpoint.pkl").write_bytes(data[len(CHECKPOINT_MAGIC):])
    with pytest.raises(DataError, match="written by another version of infermeter.*simulate the run again"):
        SimPlan.resume(out)
