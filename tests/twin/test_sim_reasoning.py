"""simulate --reasoning-tokens: a reasoning model's thinking tokens are generated tokens in the twin; the records
split them from the answer, and ttfo - ttft is the thinking's decode time."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from infermeter.errors import ConfigError
from infermeter.measure import RunConfig
from infermeter.measure.simplan import SimPlan
from infermeter.twin.deploy import fake_twin
from infermeter.twin.predictor import LinearStepTime

P = LinearStepTime(base_s=0.01, per_token_s=1e-4)


def _plan(tmp_path, name, think, *, out="120", token_times="off", **kw):
    cfg = RunConfig(concurrency=4, requests=24, input_tokens="100", output_tokens=out, out=str(tmp_path / name),
                    seed=2, **kw)
    return SimPlan(cfg, twin=fake_twin(predictor=P), token_times=token_times, reasoning_tokens=think)


def test_thinking_is_decoded_and_ttfo_minus_ttft_is_its_time(tmp_path):
    res = _plan(tmp_path, "think", "80").run()
    plain = _plan(tmp_path, "plain", None).run()
    t = pq.read_table(res.run_dir / "requests.parquet").to_pydict()
    assert t["reasoning_tokens"] == [80] * 24 and t["answer_tokens"] == [40] * 24
    # thinking costs as many steps as answer tokens: the same run, the same end
    assert res.virtual_s == pytest.approx(plain.virtual_s)
    s = res.summary
    assert s["total_reasoning_tokens"] == 24 * 80
    thinking = s["ttfo_ms"]["mean"] - s["ttft_ms"]["mean"]
    assert thinking == pytest.approx(80 * s["tpot_ms"]["mean"], rel=0.1)  # the Done-when's +-10 %
    for first, answer, ended in zip(t["first_token_at"], t["first_answer_at"], t["ended_at"]):
        assert first < answer < ended
    assert "ttfo_ms" not in plain.summary or plain.summary["ttfo_ms"] is None


def test_thinking_at_max_tokens_leaves_no_answer_and_distributions_vary_per_request(tmp_path):
    res = _plan(tmp_path, "all", "200").run()
    t = pq.read_table(res.run_dir / "requests.parquet").to_pydict()
    assert t["reasoning_tokens"] == [120] * 24 and t["answer_tokens"] == [0] * 24
    assert t["first_answer_at"] == [None] * 24
    a = pq.read_table(_plan(tmp_path, "d1", "60,20,10,110").run().run_dir / "requests.parquet").to_pydict()
    b = pq.read_table(_plan(tmp_path, "d2", "60,20,10,110").run().run_dir / "requests.parquet").to_pydict()
    by_id = dict(zip(a["request_id"], a["reasoning_tokens"]))
    assert by_id == dict(zip(b["request_id"], b["reasoning_tokens"]))  # seeded: the same draws
    assert len(set(by_id.values())) > 3 and all(10 <= v <= 110 for v in by_id.values())


@pytest.mark.parametrize("bad", ["x", "10,-1", "5,1,9,2"])
def test_a_bad_value_names_the_flag(tmp_path, bad):
    with pytest.raises(ConfigError, match="--reasoning-tokens"):
        _plan(tmp_path, "bad", bad)


def test_a_speculative_run_says_what_its_prompts_are(tmp_path):
    import dataclasses
    import json

    from infermeter.twin.speculative import parse_speculative

    twin = dataclasses.replace(fake_twin(predictor=P), speculative=parse_speculative("ngram:k=3,acceptance=0.6"))
    cfg = RunConfig(concurrency=2, requests=6, input_tokens="100", output_tokens="20", out=str(tmp_path / "s"), seed=1)
    res = SimPlan(cfg, twin=twin, token_times="off").run()
    note = json.loads((res.run_dir / "run.json").read_text())["config"]["simulate"]["speculative_prompts"]
    assert note.startswith("natural prose text") and "acceptance" in note
    assert res.summary["server_metrics"]["spec_decode"]["num_speculative_tokens"] == 3
    plain = SimPlan(cfg.model_copy(update={"out": str(tmp_path / "p")}), twin=fake_twin(predictor=P),
                    token_times="off").run()
    assert "speculative_prompts" not in json.loads((plain.run_dir / "run.json").read_text())["config"]["simulate"]
