"""Findings are computed from the numbers: change the inputs and the sentences change with them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from infermeter.study.findings import shown, write_findings
from infermeter.study.matrix import METRIC, display
from infermeter.study.pricing import price_study

TODAY = dt.date(2026, 11, 30)


def _priced(kit: Any, h100: float, a100: float, source: str = "simulated"):
    """Two configurations priced per hour; ``source="measured"`` cells carry no model interval (a sharper call)."""
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of([{"config": "h100-sxm", "price_per_hour": h100, "price_source": "test", "price_date": "2026-11-01"},
                      {"config": "a100-80gb", "price_per_hour": a100, "price_source": "test",
                       "price_date": "2026-11-01"}], ["chat"], slo={"ttft_ms": 2000})
    # h100: 4 req/s under the SLO, a100: 2 req/s; at $4 vs $2/h they cost the same per request.
    cells = [make_cell("h100-sxm", "chat", 4000, cap_rps=4.0, source=source),
             make_cell("a100-80gb", "chat", 2000, cap_rps=2.0, source=source)]
    return study, cells, price_study(study, cells, TODAY)


def _topic(findings, topic):
    return [f for f in findings if f.topic == topic]


def test_swapping_prices_swaps_the_best_value(kit: Any) -> None:
    # h100 serves 4 req/s under the SLO, a100 2 req/s: at $5 vs $2 per hour the a100 is cheaper per request
    study, cells, prices = _priced(kit, h100=5.0, a100=2.0)
    assert prices.picks["chat"].best.cell.config == "a100-80gb"
    assert prices.picks["chat"].best_value == pytest.approx(2.0 / (2 * 3600) * 1e6)  # $277.78
    assert prices.picks["chat"].margin_pct == pytest.approx((5.0 / (4 * 3600)) / (2.0 / (2 * 3600)) - 1)  # 25%
    fs = write_findings(study, cells, prices)
    text = fs[0].text  # the decision's finding comes first
    assert fs[0].topic == "value"
    assert text.startswith("chat: best value is a100-80gb at $278 per 1M requests (SLO capacity, simulated; "
                           "price $2.00/h, study file, 2026-11-01)")
    # two simulated figures on different hardware families: the model's paired errors (rms 0.4895 over 62 pairs since the
    # fifteenth round's refit on 979 rows, 0.493 over 62 since the fourteenth round's refit on 948 rows, 0.483 over 62 since the twelfth round's refit on 865 rows, 0.482 over 62 since the eleventh's on 818 rows, 0.479 over 62 since the ninth's on 762, 0.489 over 58 since the eighth's on 705, 0.4928 over 56 since the Huber refit, 0.517
    # before; blind set 3's GPUStack quantization page joined, whose A100/RTX 4090/H100 first tokens differ by
    # up to e^1.8; 0.179 over 46 before that) give their cost ratio, 1.25, an 80%
    # interval of 1.25 x e^(+-1.296 x 0.4895 x sqrt(1 + 1/62)) = 0.66-2.37
    assert ("20.0% cheaper than h100-sxm ($347); too close to call: the cost ratio's 80% interval, 0.66–2.37, "
            "includes 1; from the model's paired out-of-sample errors across hardware families, n=62; "
            "h100-sxm has the highest throughput") in text

    study, cells, prices = _priced(kit, h100=2.0, a100=5.0)  # the same cells, prices swapped
    text = _topic(write_findings(study, cells, prices), "value")[0].text
    assert text.startswith("chat: best value is h100-sxm at $139 per 1M requests")
    assert "80.0% cheaper than a100-80gb ($694)" in text


def test_best_value_follows_the_cheaper_cost_not_the_faster_configuration(kit: Any) -> None:
    study, cells, prices = _priced(kit, h100=10.0, a100=2.0)
    f = _topic(write_findings(study, cells, prices), "value")[0]
    assert f.text.startswith("chat: best value is a100-80gb") and "h100-sxm ($694)" in f.text
    assert f.text.endswith("; h100-sxm has the highest throughput.")


def test_equal_costs_are_a_tie_not_a_lead(kit: Any) -> None:
    # h100 4 req/s at $4/h and a100 2 req/s at $2/h: the same $ per request
    study, cells, prices = _priced(kit, h100=4.0, a100=2.0)
    fs = write_findings(study, cells, prices)
    value = _topic(fs, "value")[0].text
    assert "tied with" in value and "too close to call" in value and "0% cheaper" not in value
    assert not _topic(fs, "change")  # nothing to flip
    _, _, prices = _priced(kit, h100=5.0, a100=2.0)
    from infermeter.study.decision import decide

    d = decide(study, cells, prices)["chat"]  # simulated: the model's interval makes a 25% margin too close to call
    assert d.too_close and d.best.model is not None and d.best.interval.overlaps(d.runner_up.interval)
    assert not _topic(write_findings(study, cells, prices), "change")


def test_what_would_change_the_decision(kit: Any) -> None:
    study, cells, prices = _priced(kit, h100=5.0, a100=2.0, source="measured")
    (f,) = _topic(write_findings(study, cells, prices), "change")
    # the runner-up (h100, $5/h, $347/1M) would match $278/1M at $4.00/h, or with 25% more capacity
    assert f.text == ("chat: h100-sxm would match a100-80gb at $4.00/h instead of $5.00/h (20.0% cheaper), or with "
                      "25.0% more capacity at its cost basis.")


def test_findings_are_ranked_by_what_they_change_in_the_decision(kit: Any) -> None:
    study, cells, prices = _priced(kit, h100=5.0, a100=2.0, source="measured")
    fs = write_findings(study, cells, prices)
    topics = [f.topic for f in fs]
    assert topics[:2] == ["value", "change"]
    assert [f.weight for f in fs] == sorted((f.weight for f in fs), reverse=True)
    assert topics.index("slo") < topics.index("throughput") < topics.index("latency")


def test_throughput_leader_and_margin_come_from_the_cells(kit: Any) -> None:
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of(["h200", "h100-sxm", "a100-40gb"], ["chat"])
    cells = [make_cell("h200", "chat", 5000), make_cell("h100-sxm", "chat", 4000), make_cell("a100-40gb", "chat", 1250)]
    f = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "throughput")[0]
    assert f.text == ("chat: h200 has the highest throughput at saturation, 5,000 output tokens/s (simulated), 25% more than "
                      "h100-sxm (4,000, simulated); the lowest is a100-40gb at 1,250 (4.0x less).")
    cells[2] = make_cell("a100-40gb", "chat", 6000)
    f = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "throughput")[0]
    assert f.text.startswith("chat: a100-40gb has the highest throughput at saturation, 6,000 output tokens/s")


def test_kv_finding_names_the_limited_cache_and_compares_with_the_closest_bandwidth(kit: Any) -> None:
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of(["h200", "a100-80gb", "a100-40gb"], ["chat"])
    cells = [make_cell("h200", "chat", 5000, kv_max=0.4),
             make_cell("a100-80gb", "chat", 2400, kv_max=0.8, running_max=256),
             make_cell("a100-40gb", "chat", 1200, kv_max=1.0, preempt=415, waiting_max=256, running_max=120,
                       ttft_p95=90000)]
    kv = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "kv")
    assert len(kv) == 1
    assert kv[0].text == ("chat: the KV cache limited a100-40gb at saturation (max 100% used, 415 preemptions); it "
                          "reached 50% of the output tokens/s of a100-80gb, whose cache did not limit it "
                          "(1,200 vs 2,400).")
    for c in cells:
        cells[cells.index(c)] = make_cell(c.config, "chat", c.saturation["output_tokens_per_s"], kv_max=0.5)
    assert not _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "kv")


def test_a_full_cache_without_evidence_is_not_called_a_cause(kit: Any) -> None:
    # 98% full, but no preemptions and every offered request running: the cache did not limit anything
    study = kit.study_of(["h100-sxm", "a100-80gb"], ["code"])
    cells = [kit.make_cell("h100-sxm", "code", 370, kv_max=0.98, preempt=0, running_max=256),
             kit.make_cell("a100-80gb", "code", 150, kv_max=0.5)]
    assert not _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "kv")
    # fewer running than the closed loop offered is evidence (and it names it)
    cells[0] = kit.make_cell("h100-sxm", "code", 370, kv_max=0.98, preempt=0, running_max=104)
    (kv,) = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "kv")
    assert kv.text.startswith("code: the KV cache limited h100-sxm at saturation (max 98% used, at most 104 requests "
                              "running of 256 offered)")


def test_kv_finding_compares_only_with_the_same_kind_of_device(kit: Any) -> None:
    study = kit.study_of(["h100-sxm", "cpu-epyc-9654"], ["code"])
    cells = [kit.make_cell("h100-sxm", "code", 370, kv_max=0.98, running_max=104),
             kit.make_cell("cpu-epyc-9654", "code", 3.0, kv_max=0.1)]
    (kv,) = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "kv")
    assert kv.text == ("code: the KV cache limited h100-sxm at saturation (max 98% used, at most 104 requests running "
                       "of 256 offered).")


def test_tensor_vs_pipeline_parallel_p99(kit: Any) -> None:
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of(["8xa10g:tp8", "8xa10g:tp4,pp2"], ["chat"])
    cells = [make_cell("8xa10g:tp8", "chat", 900, e2e_p99=(800.0, 4000.0)),
             make_cell("8xa10g:tp4,pp2", "chat", 1000, e2e_p99=(1000.0, 5000.0))]
    f = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "parallelism")[0]
    assert f.text == ("chat: E2E p99 of 8xa10g:tp8 (more tensor parallel) vs 8xa10g:tp4,pp2 (more pipeline parallel) "
                      "was 20% lower one request at a time (800 vs 1,000 ms); 20% lower at saturation "
                      "(4,000 vs 5,000 ms).")


def test_measured_cell_serving_another_model_is_shown_but_not_ranked(kit: Any) -> None:
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of(["h100-sxm", {"config": "cpu-epyc-9654", "target": "http://127.0.0.1:9"}], ["chat"])
    cells = [make_cell("h100-sxm", "chat", 4000),
             make_cell("cpu-epyc-9654", "chat", 99000, source="measured", model="smollm2")]
    prices = price_study(study, cells, TODAY)
    fs = write_findings(study, cells, prices)
    src = _topic(fs, "sources")
    assert src[0].text.startswith("1 of 2 cells were measured on live endpoints (cpu-epyc-9654 × chat)")
    assert src[0].weight < _topic(fs, "value")[0].weight
    assert "cpu-epyc-9654 was measured serving smollm2, not llama-3.1-8b" in src[1].text
    assert not _topic(fs, "throughput")  # one comparable cell: nothing to rank


def test_cpu_against_the_slowest_gpu(kit: Any) -> None:
    make_cell, study_of = kit.make_cell, kit.study_of
    study = study_of(["h100-sxm", "a100-40gb", "cpu-epyc-9654"], ["chat"])
    cells = [make_cell("h100-sxm", "chat", 4000), make_cell("a100-40gb", "chat", 1500),
             make_cell("cpu-epyc-9654", "chat", 30.0)]
    f = _topic(write_findings(study, cells, price_study(study, cells, TODAY)), "cpu")[0]
    assert f.text == ("chat: cpu-epyc-9654 reached 30 output tokens/s at saturation, 50x less than the slowest GPU "
                      "configuration, a100-40gb (1,500).")


def test_every_reference_shows_the_number_the_sentence_quotes(kit: Any) -> None:
    study, cells, prices = _priced(kit, h100=3.0, a100=2.0)
    for f in write_findings(study, cells, prices):
        for r in f.refs:
            if r.table.startswith("m_"):
                cell = next(c for c in cells if (c.config, c.profile) == (r.row, r.column))
                assert display(METRIC[r.table[2:]], cell, prices.cost[cell.key])[1] == r.display
            assert shown(r) in f.text
