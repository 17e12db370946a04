"""``plan --disaggregate``: the split search and the aggregated comparison, from simulations of both layouts."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from infermeter.cli.main import app
from infermeter.errors import ConfigError
from infermeter.measure.disaggplan import Workload, compare_layout, search_split

runner = CliRunner()


def _cheapest(result, kind):
    ok = [x for x in result["layouts"] if x["meets_slo"] and (x["layout"] == "aggregated") == (kind == "agg")]
    return min((x["gpus"] for x in ok), default=None)


def test_short_prompts_disaggregation_loses():
    w = Workload(model="llama-3.1-70b", rate=2.0, input_tokens=256, output_tokens=300, requests=150, seeds=2,
                 slo={"ttft_ms": 2000, "tpot_ms": 60})
    r = search_split(w, "2xh100-sxm:tp2", 8)
    v = r["verdict"]
    assert v["winner"] == "aggregated"
    # the verdict is the table's: the fewest GPUs meeting the SLO, per kind
    assert _cheapest(r, "agg") < _cheapest(r, "dis")
    assert v["saving_gpus"] == _cheapest(r, "dis") - _cheapest(r, "agg")
    assert v["statement"].startswith("Disaggregation loses here") and "prefill pool is busy" in v["statement"]
    for lay in r["layouts"]:  # every figure: a mean inside its range over the seeds
        st = lay["tpot_ms_p99"]
        assert lay["seeds"] == 2 and st["lo"] <= st["mean"] <= st["hi"]


def test_long_prompts_the_split_meets_a_tpot_slo_aggregated_misses_on_the_same_gpus():
    # --max-num-seqs 256, as tests/twin/test_disagg.py says why (V1's 1024 costs each TP2 instance a 6,300-token sequence)
    w = Workload(model="llama-3.1-70b", rate=0.2, input_tokens=6000, output_tokens=300, requests=120, seeds=2,
                 slo={"ttft_ms": 10000, "tpot_ms": 38}, spec={"max_num_seqs": 256})
    r = compare_layout(w, "prefill=2xh100-sxm:tp2,decode=2xh100-sxm:tp2")
    agg, dis = r["layouts"]
    assert agg["layout"] == "aggregated" and agg["gpus"] == dis["gpus"] == 4 and agg["replicas"] == 2
    assert dis["tpot_ms_p99"]["hi"] < agg["tpot_ms_p99"]["lo"]
    assert dis["kv_transfer_ms_p99"]["mean"] > 0
    assert dis["meets_slo"] and not agg["meets_slo"] and r["verdict"]["winner"] == "disaggregated"
    assert "TPOT p99" in r["verdict"]["statement"]


def test_bad_inputs_are_one_line_errors():
    w = Workload(model="llama-3.1-70b", rate=1.0, input_tokens=100, output_tokens=10)
    with pytest.raises(ConfigError, match="needs --slo"):
        search_split(w, "2xh100-sxm:tp2", 8)
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--disaggregate", "search", "--gpu", "h100-sxm",
                              "--gpus", "2"])
    assert isinstance(res.exception, ConfigError) and "--rate" in str(res.exception)
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--disaggregate", "search", "--gpu", "h100-sxm",
                              "--gpus", "2", "--rate", "1", "--slo", "e2e_ms=100"])
    assert isinstance(res.exception, ConfigError) and "ttft_ms and tpot_ms" in str(res.exception)


def test_cli_plan_search_json():
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--disaggregate", "search,link=ib-ndr400",
                              "--gpu", "h100-sxm", "--gpus", "3", "--rate", "4", "--input-tokens", "3000",
                              "--output-tokens", "100", "--slo", "ttft_ms=3000,tpot_ms=40", "--seeds", "1",
                              "--requests", "60", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    names = [x["layout"] for x in out["layouts"]]
    assert "aggregated" in names and any(n.endswith("D") for n in names)
    assert all(x["gpus"] <= 3 for x in out["layouts"])
    assert all("link=ib-ndr400" in x["config"] for x in out["layouts"] if x["layout"] != "aggregated")
    assert out["verdict"]["winner"] in ("aggregated", "disaggregated", "tie", "neither")
