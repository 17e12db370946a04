"""The state file: what is left to run, a changed file is refused, unfinished attempts are kept aside."""

import pytest

from infermeter.campaign.spec import load_campaign
from infermeter.campaign.state import CampaignState, set_aside
from infermeter.errors import UserError


def camp(tmp_path, repeats=2):
    f = tmp_path / "c.yaml"
    f.write_text(f"repeats: {repeats}\ntargets: [{{name: a, engine: emulator}}]\nloads: [{{name: l, concurrency: 1, requests: 2}}]\n")
    return load_campaign(f)


def test_resume_runs_what_is_not_done(tmp_path):
    c = camp(tmp_path)
    st = CampaignState.open(tmp_path / "out", c)
    st.set("a/default/l/r0", status="running")
    st.set("a/default/l/r0", status="done")
    st.set("a/default/l/r1", status="running")
    again = CampaignState.open(tmp_path / "out", c)
    assert [x.key for x in again.todo(c.cells())] == ["a/default/l/r1"]
    assert again.data["resumed"] == 1 and again.cell("a/default/l/r0")["attempts"] == 1


def test_a_changed_file_is_refused_unless_restarted(tmp_path):
    CampaignState.open(tmp_path / "out", camp(tmp_path))
    other = camp(tmp_path, repeats=3)
    with pytest.raises(UserError, match="--restart"):
        CampaignState.open(tmp_path / "out", other)
    assert CampaignState.open(tmp_path / "out", other, restart=True).data["cells"] == {}


def test_unfinished_attempts_are_kept_aside(tmp_path):
    d = tmp_path / "r0"
    assert set_aside(d) is None
    d.mkdir()
    assert set_aside(d).name == "r0.attempt-1"
    d.mkdir()
    assert set_aside(d).name == "r0.attempt-2" and not d.exists()


def test_each_distinct_launch_of_a_target_is_kept_across_resumes(tmp_path):
    c = camp(tmp_path)
    bf16 = {"engine": "vllm-cpu", "dtype": "bfloat16"}
    st = CampaignState.open(tmp_path / "out", c)
    st.launched("a", bf16)
    st.launched("a", {})  # a URL target: nothing to record
    again = CampaignState.open(tmp_path / "out", c)
    again.launched("a", bf16)  # the same server again: once
    again.launched("a", {**bf16, "dtype": "float32"})  # resumed on a CPU without a bf16 matmul
    assert [x["dtype"] for x in CampaignState.open(tmp_path / "out", c).launches()["a"]] == ["bfloat16", "float32"]
    again.data["launches"]["a"] = bf16  # a state file of an early build: one launch, not a list
    again.launched("a", {**bf16, "dtype": "float32"})
    assert [x["dtype"] for x in again.launches()["a"]] == ["bfloat16", "float32"]
