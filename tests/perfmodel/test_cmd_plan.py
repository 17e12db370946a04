"""`infermeter plan`: the table, --json keys, --compare parsing, --check, --validate, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from infermeter.cli import cmd_plan
from infermeter.errors import ConfigError
from infermeter.perfmodel import blindscore

CSV = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"
JSON_KEYS = {"fits", "weights_gib_per_gpu", "kv_capacity_tokens", "max_concurrency", "ttft_ms", "tpot_ms",
             "output_tokens_per_s", "saturation_output_tokens_per_s", "bound"}


@pytest.fixture(scope="module")
def app():
    a = typer.Typer()

    @a.callback()
    def _root() -> None:
        """test app"""

    cmd_plan.register(a)
    return a


def run(app, *args):
    return CliRunner().invoke(app, ["plan", *args], catch_exceptions=True)


def test_70b_bf16_on_one_h100_does_not_fit_and_says_why(app):
    res = run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "1", "--dtype", "bf16")
    assert res.exit_code == 0, res.output
    assert "NO" in res.output and "131.4 GiB" in res.output
    assert "does not fit: weights need 131.4 GiB per GPU" in " ".join(res.output.split())


def test_json_has_the_documented_keys(app):
    res = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "8", "--json")
    out = json.loads(res.stdout)
    assert JSON_KEYS <= out.keys()
    assert out["fits"] is True and out["bound"] in ("compute", "memory", "communication", "overhead")
    assert out["output_tokens_per_s"] == pytest.approx(8 * out["output_tokens"] / (
        out["ttft_ms"] / 1e3 + (out["output_tokens"] - 1) * out["tpot_ms"] / 1e3), rel=1e-3)
    nofit = json.loads(run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--json").stdout)
    assert (nofit["fits"], nofit["ttft_ms"], nofit["bound"], nofit["kv_capacity_tokens"]) == (False, None, None, 0)


def test_gpus_tp_pp_flags_build_the_configuration(app):
    out = json.loads(run(app, "--model", "llama-3.1-70b", "--gpu", "a10g", "--gpus", "8", "--tp", "4", "--pp", "2", "--json").stdout)
    assert out["config"] == "8xa10g:tp4,pp2"
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "4", "--tp", "1", "--json").stdout)
    assert (out["config"], out["replicas"]) == ("4xh100-sxm:tp1", 4)


def test_compare_accepts_one_string_or_several_arguments(app):
    one = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2", "--json")
    many = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4", "2xh100-sxm:tp2", "8xa10g:tp4,pp2", "--json")
    assert one.exit_code == 0, one.output
    a, b = json.loads(one.stdout), json.loads(many.stdout)
    assert a == b and [p["config"] for p in a] == ["4xa100-80gb:tp4", "2xh100-sxm:tp2", "8xa10g:tp4,pp2"]
    table = run(app, "--model", "llama-3.1-70b", "--compare", "4xa100-80gb:tp4 2xh100-sxm:tp2 8xa10g:tp4,pp2")
    header = next(line for line in table.output.splitlines() if "4xa100-80gb:tp4" in line)
    assert "2xh100-sxm:tp2" in header and "8xa10g:tp4,pp2" in header  # side by side


def test_check_reports_the_verdict(app):
    res = run(app, "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "2", "--check", "decode_tokens_per_s=115")
    assert res.exit_code == 0, res.output
    assert "IMPOSSIBLE" in res.output and "2.39x the physical limit" in res.output
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "ttft=500", "--json").stdout)
    assert out[0]["verdict"] == "possible" and out[0]["metric"] == "ttft_ms"
    lo, hi = out[0]["interval"]  # the prediction's 80% interval beside the physical bound
    assert lo < out[0]["predicted"] < hi and out[0]["ceiling"] < hi
    assert out[0]["interval_basis"]["basis"] == "calibrated"  # vLLM on an H100: the corpus has its rows
    unseen = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "lmdeploy", "--check", "ttft=500",
                            "--json").stdout)
    assert unseen[0]["interval_basis"]["basis"] == "unseen"  # LMDeploy on an H100: no such row (A100 only)
    lo_u, hi_u = unseen[0]["interval"]
    assert hi_u / lo_u > hi / lo  # an unseen combination gets the wider band


def test_the_plan_says_how_seldom_first_token_intervals_held_on_fresh_publications(app):
    from infermeter.perfmodel.uncertainty import fresh_held_out

    held = fresh_held_out()
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json").stdout)
    assert out["interval_basis"]["ttft_ms"]["fresh_held_out"] == held["ttft"] | {"group": "ttft"}
    assert out["interval_basis"]["tpot_ms"]["fresh_held_out"] == held["tpot"] | {"group": "tpot"}
    text = " ".join(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm").output.split())
    assert f"{held['ttft']['inside']} of {held['ttft']['rows']} first-token measurements of one request alone" in text
    rest = sum(v["rows"] for g, v in held.items() if not g.startswith("ttft"))
    assert f"of {rest}," in text
    check = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "ttft=500", "--json").stdout)
    assert check[0]["interval_basis"]["fresh_held_out"] == held["ttft"] | {"group": "ttft"}  # plan --check states the same


def test_the_first_token_caveat_follows_the_history(monkeypatch):
    """The label is computed: first tokens are called the least certain figure only while they held less often."""
    from infermeter.cli import cmd_plan
    from infermeter.perfmodel import uncertainty

    plans = [{"interval_basis": {"ttft_ms": {"fresh_held_out": {"rows": 10, "inside": 9}}}}]
    monkeypatch.setattr(uncertainty, "fresh_held_out", lambda: {"ttft": {"rows": 10, "inside": 9},
                                                                 "tpot": {"rows": 10, "inside": 5}})
    better = cmd_plan._first_token_caveat(plans)
    assert better is not None and "least certain" not in better and "9 of 10" in better and "5 of 10, 50%" in better
    monkeypatch.setattr(uncertainty, "fresh_held_out", lambda: {"ttft": {"rows": 10, "inside": 9},
                                                                 "tpot": {"rows": 10, "inside": 10}})
    assert "least certain" in (cmd_plan._first_token_caveat(plans) or "")
    assert cmd_plan._first_token_caveat([{"interval_basis": {"ttft_ms": {"basis": "deployment"}}}]) is None


def _small_corpus(tmp_path):
    small = tmp_path / "few.csv"
    lines = CSV.read_text().splitlines()
    small.write_text("\n".join(lines[:1] + [line for line in lines if line.startswith(("trt05-a100", "trt05-h100-7b", "ft13b"))]) + "\n")
    return small


def test_validate_prints_rows_breakdowns_and_every_holdout(app, tmp_path):
    res = run(app, "--validate", str(_small_corpus(tmp_path)), "--holdout", "all")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "trt05-h100-7b-128" in out and "LOO err" in out and "LOPO err" in out
    assert "by hardware family" in out and "by engine" in out and "ampere" in out and "fastertransformer" in out
    for kind in ("in-sample: median |error|", "leave-one-out: median |error|", "leave-one-publication-out: median |error|"):
        assert kind in out
    assert "targets (leave-one-publication-out median <= 12%, max <= 60%, 80% intervals holding 70%-90% of rows)" in out
    assert "80% prediction intervals, leave-one-publication-out (nested" in out and "rows (" in out


def test_validate_json_has_every_kind_of_error(app, tmp_path):
    res = run(app, "--validate", str(_small_corpus(tmp_path)), "--holdout", "source", "--json")
    out = json.loads(res.stdout)
    assert set(out["summary"]) == {"in", "lopo"} and out["holdout"] == "source"
    assert {"error", "error_lopo", "predicted_lopo"} <= set(out["rows"][0])
    assert out["by_engine"]["trtllm"]["n"] == sum(1 for r in out["rows"] if r["id"].startswith("trt05"))
    cov = out["interval_coverage"]
    assert 0.0 <= cov["inside"] <= 1.0 and cov["nominal"] == 0.8 and cov["kind"].startswith("leave-one-publication-out")
    stated = [r for r in out["rows"] if r["interval"] is not None]
    assert cov["rows"] == len(stated) > 0
    for r in stated:  # each row: its interval around the out-of-sample prediction, and whether the published value is inside
        lo, hi = r["interval"]
        assert lo < hi and r["inside"] == (lo <= r["measured"] <= hi)
        assert r["interval_basis"] in ("calibrated", "pooled", "unseen") and r["model_class"] in ("dense", "moe")
    assert cov["inside"] == pytest.approx(sum(r["inside"] for r in stated) / len(stated), abs=1e-4)
    for part, key in (("by_basis", lambda r: r["interval_basis"]), ("by_class", lambda r: r["model_class"]),
                      ("by_class_basis", lambda r: f"{r['model_class']}/{r['interval_basis']}")):
        keys = {key(r) for r in stated}
        assert set(cov[part]) == keys, part  # per class and basis: the rows of each, and the share inside
        for k in keys:
            mine = [r["inside"] for r in stated if key(r) == k]
            assert cov[part][k] == {"inside": pytest.approx(sum(mine) / len(mine), abs=1e-4), "rows": len(mine)}
    none = json.loads(run(app, "--validate", str(_small_corpus(tmp_path)), "--holdout", "none", "--json").stdout)
    assert set(none["summary"]) == {"in"} and none["interval_coverage"]["kind"].startswith("in-sample")
    assert none["interval_coverage"]["rows"] == len(none["rows"])
    for r in none["rows"]:
        lo, hi = r["interval"]
        assert lo < r["predicted"] * 1.5 and hi > r["predicted"] / 1.5 and r["inside"] == (lo <= r["measured"] <= hi)


def test_table_shows_each_prediction_with_its_interval(app):
    res = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "4")
    assert res.exit_code == 0, res.output
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "4", "--json").stdout)
    lo, hi = out["intervals"]["tpot_ms"]
    assert f"{out['tpot_ms']:,.2f} ms ({lo:,.2f}–{hi:,.2f})" in res.output
    assert "80% interval" in " ".join(res.output.split()) and "predicted" in res.output
    assert out["basis"].startswith("predicted; 80% intervals")


@pytest.mark.parametrize("args,match", [
    (["--gpu", "h100-sxm"], "--model is required"),
    (["--model", "llama-3.1-8b"], "--gpu is required"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "extra-config"], "unexpected argument"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--compare", "h200"], "drop --gpu"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "ttft"], "expected METRIC=VALUE"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "0"], "--concurrency must be >= 1"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "0"], "--rate 0: request rate 0.0 must be a positive"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "1000"], "--rate 1000: 1000 requests a second is at or past"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--requests", "50"], "--requests sizes a run at --rate"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "5", "--requests", "0"], "--requests must be >= 1"),
    (["--model", "llama-3.1-70b", "--gpu", "4xa100-80gb:tp4", "--rate", "2", "--speculative", "draft:llama-3.1-8b,k=4,acceptance=0.7"],
     "--rate with --speculative is not modelled yet"),
    (["--validate", "rows.csv", "--rate", "2"], "--validate takes the rates from its file"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "5", "--requests", "20000000"], "is more than 10,000,000"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "trtllm", "--enforce-eager"],
     "engine 'trtllm' has no graph capture"),
    (["--validate", "rows.csv", "--enforce-eager"], "--validate does not take it (a row of the file states it"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--check", "tpot_ms=5", "--enforce-eager"], "--check does not take it"),
    (["--validate", "rows.csv", "--max-output", "1024"], "--max-output sets how one planned deployment runs; --validate does not "
                                                          "take it (a row of the file states it: settings max_output=N)"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--lengths", "sharegpt", "--check", "tpot_ms=5", "--max-output", "1024"],
     "--max-output sets how one planned deployment runs; --check does not take it"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-output", "1024"], "--max-output 1024: equal lengths have no tail"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--network", "ib-xdr"], "--network 'ib-xdr': unknown network 'ib-xdr'; known: "),
    (["--validate", "rows.csv", "--network", "roce-400"], "--network sets how one planned deployment runs; --validate does not "
                                                          "take it (a row of the file states it: settings network=ID)"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--disaggregate", "prefill=h100-sxm,decode=h100-sxm", "--network", "roce-400"],
     "--disaggregate does not take it (give the link in the spec: link=NETWORK)"),
    (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--lengths", "sharegpt", "--output-tokens", "600", "--max-output", "512"],
     "--max-output 512: below --output-tokens 600, the mean of the capped outputs"),
])
def test_bad_input_is_a_config_error_naming_it(app, args, match):
    res = run(app, *args)
    assert isinstance(res.exception, ConfigError)
    assert match in str(res.exception)


def test_a_configuration_over_two_nodes_plans_on_the_network_named(app):
    """16 H200s at TP16 span two 8-GPU nodes: the JSON names the network, the note says so, and a slower network
    predicts a slower decode; a one-node plan carries no network."""
    base = ["--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--tp", "16", "--dtype", "fp8", "--concurrency", "8", "--json"]
    ib = json.loads(run(app, *base).stdout)
    eth = json.loads(run(app, *base, "--network", "ethernet-100").stdout)
    assert ib["network"] == "ib-ndr400" and eth["network"] == "ethernet-100"
    assert any("span 2 nodes of 8" in n and "ethernet-100" in n for n in eth["notes"])
    assert eth["tpot_ms"] > 1.5 * ib["tpot_ms"]
    one = json.loads(run(app, "--model", "llama-3.1-70b", "--gpu", "h200", "--gpus", "8", "--tp", "8", "--json").stdout)
    assert "network" not in one


def test_a_first_token_with_others_in_flight_takes_the_queued_spread(app):
    """One user's first token keeps its model class's fresh-publication spread; 32 users' (or an open loop holding
    several) take the ``queued`` spread: a far wider band, and the line under the table says how it held."""
    import math

    from infermeter.perfmodel.freshpub import QUEUED
    from infermeter.perfmodel.uncertainty import table_of

    base = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]
    one, many = (json.loads(run(app, *base, *extra).stdout) for extra in ([], ["--concurrency", "32"]))
    assert one["interval_basis"]["ttft_ms"]["fresh_held_out"]["group"] == "ttft"
    assert many["interval_basis"]["ttft_ms"]["fresh_held_out"]["group"] == "ttft_queued"
    assert many["interval_basis"]["tpot_ms"]["fresh_held_out"]["group"] == "tpot"  # other figures keep their class
    width = [math.log(p["intervals"]["ttft_ms"][1] / p["intervals"]["ttft_ms"][0]) / 2 for p in (one, many)]
    tau = table_of().fresh_tau(QUEUED)
    assert tau > 2 * table_of().fresh_tau("dense") and width[1] >= tau > width[0]
    text = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "32").output
    assert "with other requests in flight" in " ".join(text.split()) and f"x{math.exp(tau):,.0f} either way" in text
    alone = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm").output
    assert "of one request alone" in " ".join(alone.split())


def test_a_first_token_is_queued_above_one_and_a_half_requests_a_replica():
    """QUEUED_BATCH: one user, or three over two replicas (1.5 each), is alone; two users on one, or an open loop that
    holds several, are queued; prompt rates never are; a table without the class falls back to the model class's."""
    from dataclasses import replace

    from infermeter.perfmodel.planner import plan
    from infermeter.perfmodel.freshpub import QUEUED
    from infermeter.perfmodel.uncertainty import Regime, table_of

    def queued(cfg, **kw):
        p = plan("llama-3.1-8b", cfg, **kw)
        return p.interval_basis["ttft_ms"]["fresh_held_out"]["group"] == "ttft_queued"

    assert not queued("h100-sxm") and queued("h100-sxm", concurrency=2)
    assert not queued("2xh100-sxm:tp1", concurrency=3) and queued("2xh100-sxm:tp1", concurrency=4)
    assert queued("h100-sxm", rate=5.0) and not queued("h100-sxm", rate=0.05)
    table = table_of()
    old = replace(table, fresh=tuple(f for f in table.fresh if f[0] != QUEUED))
    reg = Regime("ttft", "prefill", "calibrated", "dense", queued=True)
    assert old.fresh_tau_of(reg) == table.fresh_tau("dense") < table.fresh_tau_of(reg)


def test_validate_json_names_each_rows_fresh_class(app, tmp_path):
    """A first-token row with others in flight is ``queued`` (a 400-user loop), one alone keeps its model class, and
    other metrics never are: what ``freshpub.records_from`` files in the blind history."""
    lines = (CSV.parent / "published-measurements-blind13.csv").read_text().splitlines()
    f = tmp_path / "b.csv"
    f.write_text("\n".join(lines[:1] + [x for x in lines if x.startswith(("b13b-cr-q3coder-4090x1", "b13b-cr-glmair-h200x1"))]) + "\n")
    rows = {r["id"]: r for r in json.loads(run(app, "--validate", str(f), "--holdout", "none", "--json").stdout)["rows"]}
    assert rows["b13b-cr-q3coder-4090x1-ttft"]["fresh_class"] == "queued"
    assert rows["b13b-cr-glmair-h200x1-c1-ttft"]["fresh_class"] == "moe"
    assert {r["fresh_class"] for i, r in rows.items() if not i.endswith("ttft")} == {"moe"}


def test_a_request_longer_than_the_context_window_is_named_in_the_notes(app):
    """Llama 3.1 holds 131,072 tokens: a 200,000-token prompt, or a cap that takes a request past it, gets a note that
    engines refuse it; a request within the window gets none."""
    long = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-tokens", "200000", "--json").stdout)
    assert any("200,200 tokens (prompt + output) exceeds llama-3.1-8b's 131,072-token context window" in n for n in long["notes"])
    capped = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--lengths", "sharegpt", "--input-tokens", "1000",
                            "--max-output", "140000", "--json").stdout)
    assert any("141,000 tokens (prompt + output cap) exceeds" in n for n in capped["notes"])
    fine = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-tokens", "100000", "--json").stdout)
    assert not any("context window" in n for n in fine["notes"])


def test_costs_carry_the_inverted_throughput_interval(app):
    out = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--cost", "--json").stdout)
    lo_tps, hi_tps = out["intervals"]["saturation_output_tokens_per_s"]
    cost, (lo, hi) = out["cost"]["usd_per_1m_output_tokens"], out["cost"]["intervals"]["usd_per_1m_output_tokens"]
    assert lo < cost < hi
    # dollars per token move against tokens per second: the same relative spread, the cheap end at the fast end
    assert hi / lo == pytest.approx(hi_tps / lo_tps, rel=1e-3)
    table = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--cost").output
    assert f"(${lo:,.3f}–${hi:,.3f})" in table


@pytest.mark.parametrize("gpu,gpus,want", [("mi300x", 8, "8xmi300x"), ("mi300x", None, "mi300x"),
                                           ("h100-sxm", 4, "4xh100-sxm")])
def test_an_x_inside_a_hardware_id_is_not_a_gpu_count(gpu, gpus, want):
    assert cmd_plan._config_string(gpu, gpus, None, None) == want


@pytest.mark.parametrize("gpu", ["8xmi300x", "8 x mi300x", "4xa100-80gb:tp4", "mi300x:tp8"])
def test_a_gpu_that_names_a_layout_refuses_gpus_too(gpu):
    with pytest.raises(ConfigError, match="already names count/parallelism"):
        cmd_plan._config_string(gpu, 8, None, None)


def test_plan_mi300x_with_gpus_runs(app):
    res = run(app, "--model", "llama-3.1-8b", "--gpu", "mi300x", "--gpus", "8", "--json")
    assert res.exit_code == 0, res.output
    assert "already names" not in res.output


def test_a_plan_on_the_unseen_band_says_so_and_an_moe_one_says_how_far_such_plans_missed(cli):
    # gpt-oss-20b's MXFP4 experts on an L4: no publication measures MoE terms of that format on Ada (Qwen3-30B-A3B FP8 on
    # an L40S was the example until blind set 8's L40S vGPU rows fitted Ada's FP8 MoE terms)
    moe = cli("plan", "--model", "gpt-oss-20b", "--gpu", "l4", "--concurrency", "4")
    assert moe.returncode == 0, moe.stderr
    text = " ".join(moe.stdout.split())
    assert "l4: unseen: no fitted publication measures" in text
    moe_scores = blindscore.load()["scores"]["moe"]  # the figures the blind set gave (data/blind-scores.yaml)
    if moe_scores["unseen"]["rows"] >= 5:
        moe_scores = moe_scores["unseen"]
    n = moe_scores["rows"]
    assert "on MoE models in publications no fit had seen" in text
    then = (blindscore.load().get("blind_time") or {}).get("scores", {}).get("moe")
    cls = blindscore.load()["scores"]["moe"]
    if then and (then["median_abs_error"], then["max_abs_error"]) != (cls["median_abs_error"], cls["max_abs_error"]):
        # the set is in the blind history and the model changed since: its blind figures lead, today's follow, marked
        # not blind (the same model, as when the set was scored with the shipped model, says it once)
        assert (f"scored before the set was read, missed its {then['rows']} MoE figures by a median "
                f"{then['median_abs_error']:.0%}") in text
        assert f"this model, changed since (not blind), misses {n} of them" in text
        assert text.index("scored before the set was read") < text.index("not blind")
        assert f"{moe_scores['inside']} of {n} fall inside" in text and f"a median {moe_scores['median_abs_error']:.0%}" in text
    else:
        assert f"{n} published figures" in text
        assert f"{moe_scores['inside']} of {n} fell inside" in text and f"a median {moe_scores['median_abs_error']:.0%}" in text
    dense = cli("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert dense.returncode == 0 and "unseen" not in dense.stdout


def test_validating_a_file_the_spread_was_fitted_with_says_it_is_not_blind(cli, tmp_path):
    import csv as _csv

    from infermeter.perfmodel import blindscore as _bs

    blind = _bs.BLIND_FILE
    res = cli("plan", "--validate", blind, "--holdout", "none", "--json")
    assert res.returncode == 0, res.stderr
    flag = json.loads(res.stdout)["interval_coverage"]["fresh_publication"]["fitted_with_this_file"]
    with open(blind, newline="") as fh:
        every = list(_csv.DictReader(fh))
    assert flag == _bs.in_spread(r["id"] for r in every)
    rows = every[:3]
    fresh = tmp_path / "fresh.csv"
    with fresh.open("w", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([{**r, "id": "new-" + r["id"]} for r in rows])  # the same rows under ids no blind set holds
    res = cli("plan", "--validate", str(fresh), "--holdout", "none")
    assert res.returncode == 0, res.stderr
    assert "not blind" not in res.stdout
    if flag:
        assert "not blind" in cli("plan", "--validate", blind, "--holdout", "none").stdout


def test_an_moe_plan_on_pooled_expert_terms_says_it_takes_the_moe_band(cli):
    """An MoE figure whose expert terms are fitted on its family (``pooled``) takes the MoE band: the console says so."""
    from infermeter.perfmodel import build_deployment
    from infermeter.perfmodel.uncertainty import regime_of

    d = build_deployment("mixtral-8x7b", "8xh100-sxm:tp2", engine="vllm")
    assert regime_of(d, "tpot_ms", 1000, 200, 1).calibration == "pooled"  # Hopper vLLM's fitted MoE terms
    res = cli("plan", "--model", "mixtral-8x7b", "--gpu", "8xh100-sxm:tp2", "--engine", "vllm")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "MoE band: this MoE model's expert terms on this hardware rest on few publications" in text
    assert "tpot" in text.split("MoE band:")[1] and "on MoE models in publications no fit had seen" in text


def test_rate_plans_an_open_loop_and_says_when_it_queues(app):
    """``--rate`` replaces the closed loop of ``--concurrency`` users: below the configuration's rate the output is the
    arrivals' (rate x output tokens) and the note gives the requests in the system; past it, with ``--requests``, the
    batch stays full and the first token carries the queue's wait."""
    def plan_json(*extra):
        res = run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-tokens", "1000", "--output-tokens", "200",
                  "--json", *extra)
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    calm, busy = plan_json("--rate", "2"), plan_json("--rate", "100", "--requests", "2000")
    assert calm["rate"] == 2.0 and calm["output_tokens_per_s"] == pytest.approx(400, rel=1e-3)
    assert "Little's law" in calm["notes"][-1] and calm["concurrency"] < calm["max_concurrency"]
    assert busy["concurrency"] == busy["max_concurrency"] and "queue for a slot" in busy["notes"][-1]
    assert busy["ttft_ms"] > 100 * calm["ttft_ms"] and busy["output_tokens_per_s"] < busy["saturation_output_tokens_per_s"]
    for p in (calm, busy):
        lo, hi = p["intervals"]["ttft_ms"]
        assert lo < p["ttft_ms"] < hi


def test_enforce_eager_plans_a_slower_step_and_says_why(app):
    """--enforce-eager adds each layer's launch cost to every step: at one user the TPOT grows by layers x that cost
    (the JSON's note names it), and the header says the run is eager."""
    args = ("--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--concurrency", "1", "--input-tokens", "512", "--output-tokens", "128")
    graphs = json.loads(run(app, *args, "--json").output)
    eager_res = run(app, *args, "--json", "--enforce-eager")
    assert eager_res.exit_code == 0, eager_res.output
    eager = json.loads(eager_res.output)
    note = next(n for n in eager["notes"] if n.startswith("eager execution"))
    per_layer_us = float(note.split(" x ")[1].split(" us")[0])
    assert eager["tpot_ms"] - graphs["tpot_ms"] == pytest.approx(32 * per_layer_us * 1e-3, abs=0.02)
    assert not any(n.startswith("eager execution") for n in graphs["notes"])
    assert eager["enforce_eager"] is True and "enforce_eager" not in graphs
    assert "(fitted on 16 eager ampere rows)" in note  # where the per-layer cost comes from: the A100 rows that state it
    hopper = json.loads(run(app, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json", "--enforce-eager").output)
    assert any("x 47 us" in n and "the engine's prior: no eager vllm row on hopper GPUs" in n for n in hopper["notes"])
    assert ", eager)" in run(app, *args, "--enforce-eager").output


def test_a_capped_chat_run_is_planned_and_said(app):
    """Past the configuration's rate (20 requests a second on one A100) a finite run of 100 ends in its drain, which the
    longest output sets: capped at 1,024 tokens the run serves about twice the uncapped law's rate."""
    args = ("--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--lengths", "sharegpt", "--input-tokens", "198",
            "--output-tokens", "551", "--rate", "20", "--requests", "100", "--json")
    out, free = json.loads(run(app, *args, "--max-output", "1024").stdout), json.loads(run(app, *args).stdout)
    assert out["max_output"] == 1024 and "max_output" not in free
    assert out["output_tokens_per_s"] > 1.5 * free["output_tokens_per_s"]
