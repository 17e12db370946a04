"""The decision card says what its inputs support: per-cell search status, failing cells, soaks, volume, limits."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from infermeter.errors import ConfigError
from infermeter.study.capstatus import capacity_status
from infermeter.study.config import build_study
from infermeter.study.decision import decide, decision_line, times_text
from infermeter.study.decisionview import decision_cards
from infermeter.study.findings import limit_of, write_findings
from infermeter.study.pricing import price_study

TODAY = dt.date(2026, 11, 30)


def _conf(name: str, price: float | None) -> dict[str, Any]:
    c: dict[str, Any] = {"config": name}
    if price is not None:
        c.update(price_per_hour=price, price_source="test", price_date="2026-11-01")
    return c


def _failing_cell(kit: Any, name: str) -> Any:
    """One request at a time met the SLO; every open-loop rate of the workload missed it (the A10G case)."""
    c = kit.make_cell(name, "chat", 50.0, cap_rps=None)
    sync = {**c.steps[0], "meets_slo": True, "slo_failures": []}
    rates = [{"k": 2 + i, "kind": "rate", "meets_slo": False, "offered_rate": r, "request_throughput": r,
              "ttft_ms_p95": t, "slo_failures": [f"ttft_ms p95 {t:,.1f} > 2000"]}
             for i, (r, t) in enumerate([(0.3, 9000.0), (0.15, 4100.0), (0.075, 2600.0)])]
    sat = {"k": 1, "kind": "saturation", "meets_slo": False, "request_throughput": 1.0, "ttft_ms_p95": 90000.0,
           "slo_failures": ["ttft_ms p95 90,000 > 2000"]}
    # the one-at-a-time step as an old study wrote it: the capacity (a study before this change ranked it)
    cap = {**c.saturation, "requests_per_s": 0.0339, "output_tokens_per_s": 3.39, "kind": "synchronous", "step": 0}
    return replace(c, steps=[sync, sat, *rates], capacity=cap)


def test_a_configuration_failing_the_slo_at_every_load_is_listed_as_failing_never_ranked(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a10g", 1.0)], ["chat"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0), _failing_cell(kit, "a10g")]
    st = capacity_status(cells[1], {"ttft_ms": 2000}, "p95")
    assert (st.status, st.ranked, st.high) == ("upper_bound", False, 0.075)
    assert st.closest is not None and st.closest["offered_rate"] == 0.075  # 2,600 ms: the nearest to 2,000
    prices = price_study(study, cells, TODAY)
    assert prices.cost[("a10g", "chat")].result is None  # never priced at the one-at-a-time figure
    d = decide(study, cells, prices)["chat"]
    assert [o.cell.config for o in d.options] == ["h100-sxm"]
    assert d.failing == ["a10g: every load tried missed the SLO; closest at 0.075 req/s: ttft_ms p95 2,600.0 > 2000"]
    card = decision_cards(study, {"chat": d}, prices)[0]
    assert ("fails the SLO", d.failing[0]) in card.rows


def test_caveats_say_what_each_cells_search_established(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 4.0)], ["chat"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0, bracket=None),  # passed at the highest load tried
             kit.make_cell("a100-80gb", "chat", 2000, cap_rps=2.0, bracket=0.72)]
    d = decide(study, cells, price_study(study, cells, TODAY))["chat"]
    text = " ".join(d.caveats)
    assert "by the load search" not in text  # the canned line is gone
    assert "h100-sxm: a lower bound: the highest load tried, 4 req/s, met the SLO" in text
    assert "a100-80gb: SLO edge bracketed within 72.0% (met at 2 req/s, missed at 3.44)" in text
    # swap which cell is bracketed: the caveats follow the cells
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0, bracket=0.03),
             kit.make_cell("a100-80gb", "chat", 2000, cap_rps=2.0, bracket=None)]
    d = decide(study, cells, price_study(study, cells, TODAY))["chat"]
    text = " ".join(d.caveats)
    assert "h100-sxm: SLO edge bracketed within 3.0%" in text and "a100-80gb: a lower bound" in text
    # the runner-up's capacity is only a lower bound: it may be cheaper than shown, so the call cannot be clear
    assert d.too_close and "a100-80gb's capacity is only a lower bound" in d.call_text


def test_without_intervals_the_call_says_it_rests_on_the_margin(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 4.0)], ["chat"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell(c, "chat", t, cap_rps=r, source="measured", bracket=0.0)
             for c, t, r in (("h100-sxm", 4000, 4.0), ("a100-80gb", 2000, 2.0))]
    d = decide(study, cells, price_study(study, cells, TODAY))["chat"]
    assert d.call_text.startswith("their intervals do not overlap")
    study1 = kit.study_of([_conf("h100-sxm", 4.0)], ["chat"], slo={"ttft_ms": 2000})
    d1 = decide(study1, cells[:1], price_study(study1, cells[:1], TODAY))["chat"]
    assert d1.call_text == "no runner-up to compare with"
    assert "intervals do not overlap" not in decision_line(d1)


def test_ratios_read_as_multiples() -> None:
    assert times_text(65.179) == "65x as much"
    assert times_text(3.41) == "3.4x as much"
    assert times_text(1.27) == "27.0% more"


def test_a_limit_is_named_only_where_the_counterfactual_holds(kit: Any) -> None:
    # h100: cache full, 107 of 256 running; h200: half its cache free, also 107: the cap is the prefill budget
    tgt = {"max_num_batched_tokens": 8192, "max_num_seqs": 256, "replicas": 1}
    tokens = {"mean_input": 4150.0, "mean_output": 55.0}
    h100 = replace(kit.make_cell("h100-sxm", "code", 3000, kv_max=1.0, preempt=0, running_max=107),
                   target=tgt, tokens=tokens)
    h200 = replace(kit.make_cell("h200", "code", 3500, kv_max=0.5, preempt=0, running_max=107),
                   target=tgt, tokens=tokens)
    kind, why = limit_of(h100, [h100, h200]) or ("", "")
    assert kind == "prefill" and "max_num_batched_tokens 8,192" in why and "107 ran of 256" in why
    study = kit.study_of(["h100-sxm", "h200"], ["code"])
    fs = [f.text for f in write_findings(study, [h100, h200], price_study(study, [h100, h200], TODAY))
          if f.topic == "kv"]
    assert not any("the KV cache limited" in t for t in fs)
    assert any(t.startswith("code: the prefill budget limited h100-sxm at saturation, not its KV cache") for t in fs)
    # without the prefill figures, a peer with room capped alike still rules the cache out
    bare = [replace(c, target={}) for c in (h100, h200)]
    assert limit_of(bare[0], bare) is None
    # and with no such peer the full cache is the evidence it was
    assert limit_of(bare[0], bare[:1]) == ("kv", "running")
    # max_num_seqs reached below the offered load
    mns = replace(h200, target={"max_num_seqs": 64}, server={**h200.server, "num_requests_running_max": 64})
    assert (limit_of(mns) or ("",))[0] == "max_num_seqs"


def _soak(config: str, bad: int, requests: int, probes: list[dict[str, Any]] | None = None) -> Any:
    windows = [{"index": 0, "window_s": 600.0, "start_s": 0.0, "end_s": 600.0, "sent": requests, "completed": requests,
                "failed": 0, "slo_misses": bad, "bad": bad, "error_rate": 0.0, "errors": {},
                "ttft_ms": {"p95": 120_000.0 if bad > requests / 10 else 300.0}}]
    budget = {"objective": 0.999, "requests": requests, "allowed_bad": 0.001 * requests, "bad": bad, "failed": 0,
              "slo_misses": bad, "consumed": bad / (0.001 * requests), "exhausted_at_s": 600.0 if bad else None}
    return SimpleNamespace(config=config, profile="chat", replicas=10, rate_per_s=32.0, duration_s=3600.0,
                           replicas_basis="32 req/s over 4 req/s per replica", router="session",
                           summary={"ttft_ms": {"p99": 120_000.0}, "server_metrics": {}}, windows=windows,
                           budget=budget, probes=probes or [])


def test_the_soak_verdict_is_on_the_card_and_a_failed_one_demotes_the_call(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 4.0)], ["chat"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0), kit.make_cell("a100-80gb", "chat", 2000, cap_rps=2.0)]
    prices = price_study(study, cells, TODAY)
    held = decide(study, cells, prices, [_soak("h100-sxm", 3, 115_000)])["chat"]
    assert held.soak is not None and held.soak.held and not held.demoted
    assert held.soak.text.startswith("held: 3 of 115,000 requests bad")
    probes = [{"per_replica_rps": 1.6, "held": False, "replicas": 4, "duration_s": 3600.0, "requests": 23000,
               "bad": 900}, {"per_replica_rps": 0.8, "held": True, "replicas": 4, "duration_s": 3600.0,
                             "requests": 11500, "bad": 2}, {"per_replica_rps": 1.2, "held": True, "replicas": 4,
                                                            "duration_s": 3600.0, "requests": 17000, "bad": 10}]
    d = decide(study, cells, prices, [_soak("h100-sxm", 110_000, 115_000, probes)])["chat"]
    assert d.demoted and d.soak is not None
    sv = d.soak
    # held at 1.2 req/s per replica: sized with 20% headroom that is a capacity of 1.5 req/s, 62.5% below 4
    assert sv.holding_rps == 1.2 and sv.failing_rps == 1.6 and sv.shrink == pytest.approx(1 - 1.5 / 4.0)
    assert sv.replicas == 27  # ceil(32 / 1.2)
    assert sv.value_at_holding == pytest.approx(d.best.value * 4.0 / 1.5)
    assert "must shrink by 62% to hold" in sv.text
    line = decision_line(d)
    assert line.startswith("chat: NOT CONFIRMED — h100-sxm is cheapest on paper") and "failed the soak" in line
    assert "more than a100-80gb" in line  # at the holding rate it costs more than the (unsoaked) runner-up
    card = decision_cards(study, {"chat": d}, prices)[0]
    assert card.tone == "warning" and ("its soak", sv.text) in card.rows


def test_a_point_volume_runs_and_the_card_answers_at_it(kit: Any) -> None:
    for vol in (2_000_000, {"low": 2e6, "high": 2e6}):
        v = kit.study_of(["h100-sxm"], ["chat"], volume=vol).volume
        assert (v.daily, v.low, v.high) == (2e6, 2e5, 2e7)
    with pytest.raises(ConfigError, match="volume"):
        kit.study_of(["h100-sxm"], ["chat"], volume={"low": 5e6, "high": 1e6})
    # per unit the 8-GPU box is cheaper (5% less per request), but at a small volume one replica of it is a waste
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("8xh100-sxm:tp8", 30.4)], ["chat"], slo={"ttft_ms": 2000},
                         volume={"daily": 100_000, "peak_factor": 1.0, "headroom": 0.2})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0),
             kit.make_cell("8xh100-sxm:tp8", "chat", 32000, cap_rps=32.0)]
    d = decide(study, cells, price_study(study, cells, TODAY))["chat"]
    assert d.best is not None and d.best.cell.config == "8xh100-sxm:tp8"
    assert [(c, n) for c, n, _ in d.at_volume] == [("h100-sxm", 1), ("8xh100-sxm:tp8", 1)]
    assert "At this volume h100-sxm is the cheaper fleet" in d.at_volume_text


def test_unpriced_rows_get_the_price_at_which_they_would_win(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), {"config": "h200", "price_per_hour": None}], ["chat"],
                         slo={"ttft_ms": 2000}, pricing={"prices_file": None, "provider": "vultr"})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0), kit.make_cell("h200", "chat", 6000, cap_rps=6.0)]
    prices = price_study(study, cells, TODAY)
    if prices.cost[("h200", "chat")].result is not None:
        pytest.skip("the catalog prices h200 on vultr now")
    d = decide(study, cells, prices)["chat"]
    # h100: $4/h over 4 req/s; h200 serves 6 req/s, so it matches at $6/h
    assert d.flips == ["h200 has no price: it would match h100-sxm ($278 per 1M requests) at $6/h and win below it"]


def test_price_terms_and_utilisation_are_on_the_card(kit: Any) -> None:
    study = kit.study_of(["h100-sxm"], ["chat"], slo={"ttft_ms": 2000},
                         pricing={"provider": "azure", "utilization": 0.6})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0)]
    prices = price_study(study, cells, TODAY)
    if prices.cost[("h100-sxm", "chat")].result is None:
        pytest.skip("no azure h100 price in the catalog")
    d = decide(study, cells, prices)["chat"]
    terms = dict((t, v) for t, v, _ in d.terms["h100-sxm"])
    assert {"on demand", "1yr-savings-plan", "3yr-savings-plan", "spot"} <= set(terms) and terms["spot"] is None
    res = prices.cost[("h100-sxm", "chat")].result
    assert res is not None
    assert terms["on demand"] == pytest.approx(d.best.value * res.price.list_usd_per_hour / res.price.usd_per_hour)
    assert terms["3yr-savings-plan"] == pytest.approx(terms["on demand"] * (1 - 0.38))
    assert d.assumptions.startswith("utilisation 60% of the cost basis capacity")
    card = decision_cards(study, {"chat": d}, prices)[0]
    assert any(k == "price terms" and "3yr-savings-plan" in v for k, v in card.rows)
    from infermeter.study.tables import price_terms_table

    t = price_terms_table(study, prices, cells)
    (row,) = t.rows
    cols = {c: row[i] for i, c in enumerate(t.columns)}
    assert cols["3-yr $ per 1M requests"].value == pytest.approx(terms["3yr-savings-plan"])
    assert cols["on demand $ per 1M requests"].value == pytest.approx(terms["on demand"])
    assert cols["spot $/h"].value is None  # no spot prices in the catalog: shown as missing, not invented


def test_a_cell_starved_by_its_own_configuration_names_the_fix(kit: Any) -> None:
    study = build_study({"model": "llama-3.1-70b", "configurations": ["2xh100-sxm:tp2", "4xa100-80gb:tp4"],
                         "profiles": ["chat"]}, "test")
    starved = replace(kit.make_cell("2xh100-sxm:tp2", "chat", 400), target={"kv_capacity_tokens": 25760,
                                                                           "max_num_seqs": 256},
                      tokens={"mean_input": 2254.0, "mean_output": 760.0})
    roomy = replace(kit.make_cell("4xa100-80gb:tp4", "chat", 1700), target={"kv_capacity_tokens": 485440,
                                                                           "max_num_seqs": 256},
                    tokens={"mean_input": 2254.0, "mean_output": 760.0})
    d = decide(study, [starved, roomy], price_study(study, [starved, roomy], TODAY))["chat"]
    assert len(d.starved) == 1 and d.starved[0].startswith(
        "2xh100-sxm:tp2: starved by its own configuration: its KV cache holds 25,760 tokens ≈ 14 sequences of 1,887 tokens after its 50% prefix-cache hits")
    assert "fp8 KV cache" in d.starved[0] and "twice the tensor parallel" in d.starved[0]


def test_the_card_says_what_a_request_is_and_whether_the_workload_drives_the_call(kit: Any) -> None:
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 1.8)], ["chat", "code"], slo={"ttft_ms": 2000})
    cells = [kit.make_cell("h100-sxm", "chat", 4000, cap_rps=4.0), kit.make_cell("a100-80gb", "chat", 2000, cap_rps=2.0),
             kit.make_cell("h100-sxm", "code", 4000, cap_rps=4.0), kit.make_cell("a100-80gb", "code", 2000, cap_rps=1.0)]
    ds = decide(study, cells, price_study(study, cells, TODAY))
    assert ds["chat"].best.cell.config == "a100-80gb" and ds["code"].best.cell.config == "h100-sxm"
    assert ds["chat"].request_text.startswith("one chat request = 200 input + 100 output tokens on average")
    assert ds["chat"].workload_text == "the workload drives this call: for code the recommendation is h100-sxm"


def test_cost_claims_are_checked_against_the_cost_floor(kit: Any) -> None:
    from infermeter.study.claims import check_claims
    from infermeter.study.config import example_text, load_study_text

    study = load_study_text(example_text("seed-002"), "seed-002")
    (c,) = [x for x in check_claims(study, []) if x.claim.canonical_metric == "usd_per_1m_requests"]
    # $16.28/h over the ceiling's requests/s: the floor is far above $0.019 per 1M requests
    assert c.verdict == "impossible" and c.ceiling is not None and c.ceiling > 100 * c.claim.value
    assert c.sentence.startswith("IMPOSSIBLE: claimed $0.019 per 1M requests is ")
    assert c.predicted is not None and c.predicted > c.ceiling  # the calibrated model is slower than physics
    # a lenient claim is possible; an unpriced configuration is not checked
    study = kit.study_of([_conf("h100-sxm", 4.0), "h200"], ["chat"], pricing={"provider": "vultr"},
                         claims=[{"text": "cheap", "configuration": "h100-sxm", "metric": "usd_per_1m_output_tokens",
                                  "value": 1000.0},
                                 {"text": "unpriced", "configuration": "h200", "metric": "usd_per_1m_requests",
                                  "value": 1.0}])
    got = {x.claim.text: x for x in check_claims(study, [])}
    assert got["cheap"].verdict == "possible"
    assert got["unpriced"].verdict == "not checked" and "has no price" in got["unpriced"].sentence


def test_seed_examples_reproduce_their_studies_workloads_and_questions() -> None:
    from infermeter.study.config import example_text, load_study_text

    s2 = load_study_text(example_text("seed-002"), "seed-002")
    hw = {c.config for c in s2.configurations}
    assert {"8xa10g:tp8", "8xa10g:tp4,pp2"} <= hw  # a pair that differs only in parallelism
    fp8 = [c for c in s2.configurations if s2.sim_for(c).dtype == "fp8"]
    assert fp8 and fp8[0].config == "2xh100-sxm:tp2" and s2.sim_for(fp8[0]).kv_dtype == "fp8"
    s3 = load_study_text(example_text("seed-003"), "seed-003")
    assert s3.profiles[0] == "fixed" and s3.profile_overrides["fixed"] == {"input_tokens": "200", "output_tokens": "512"}


def test_the_closest_load_is_an_open_loop_rate_judged_on_its_latency(kit: Any) -> None:
    c = _failing_cell(kit, "cpu")
    # a rate whose completed requests look fast but most did not finish: not "close"
    unfinished = {"k": 9, "kind": "rate", "meets_slo": False, "offered_rate": 0.5, "request_throughput": 0.1,
                  "ttft_ms_p95": 2100.0, "slo_failures": ["failed or unfinished 70% of 60 scheduled > 1.0%"]}
    sat = {**c.steps[1], "ttft_ms_p95": 2050.0}  # the closed loop: not a load at a rate
    c = replace(c, steps=[c.steps[0], sat, *c.steps[2:], unfinished])
    st = capacity_status(c, {"ttft_ms": 2000}, "p95")
    assert st.closest is not None and st.closest["offered_rate"] == 0.075 and st.high == 0.075


def test_a_saturation_figure_from_an_invalid_run_is_flagged_and_never_ranked(kit: Any) -> None:
    """The fastest cell's saturation run was judged invalid (the client fell behind): its figure is shown flagged
    'invalid' with the reason, it is not ranked, the leader's share is taken among valid runs, and a
    throughput claim is not checked against it."""
    from infermeter.study.claims import _saturation_ratio
    from infermeter.study.tables import ranking_tables

    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 2.0)], ["chat"])
    fast = kit.make_cell("h100-sxm", "chat", 9000)
    fast = replace(fast, saturation={**fast.saturation, "valid": False,
                                     "invalid_reasons": ["schedule_lag: p99 schedule lag 80.0 ms > 50 ms"]})
    slow = kit.make_cell("a100-80gb", "chat", 3000)
    cells = [fast, slow]
    prices = price_study(study, cells, TODAY)
    (table,) = ranking_tables(study, cells, prices)
    by_config = {row[1].display: row for row in table.rows}
    assert [row[1].display for row in table.rows] == ["a100-80gb", "h100-sxm"]  # the valid one first
    assert by_config["a100-80gb"][0].value == 1 and by_config["a100-80gb"][4].value == 1.0  # the leader
    rank, sat = by_config["h100-sxm"][0], by_config["h100-sxm"][3]
    assert rank.flag == "invalid" and "schedule_lag" in rank.display and rank.value != 1
    assert sat.flag == "invalid" and sat.value == 9000
    assert _saturation_ratio(cells, "h100-sxm", "a100-80gb", "chat") is None
    valid = replace(fast, saturation={**fast.saturation, "valid": True})
    assert _saturation_ratio([valid, slow], "h100-sxm", "a100-80gb", "chat") == 3.0
    (table,) = ranking_tables(study, [valid, slow], prices)
    assert [row[1].display for row in table.rows] == ["h100-sxm", "a100-80gb"]


def test_the_throughput_finding_never_names_an_invalid_saturation_run_the_leader(kit: Any) -> None:
    """The findings say who has the highest throughput at saturation: a figure from a run judged invalid (shown
    flagged, not ranked in the table) is not the leader there either."""
    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 2.0), _conf("l40s", 1.0)], ["chat"])
    fast = kit.make_cell("h100-sxm", "chat", 9000)
    fast = replace(fast, saturation={**fast.saturation, "valid": False, "invalid_reasons": ["schedule_lag"]})
    cells = [fast, kit.make_cell("a100-80gb", "chat", 3000), kit.make_cell("l40s", "chat", 1000)]
    fs = [f.text for f in write_findings(study, cells, price_study(study, cells, TODAY)) if f.topic == "throughput"]
    assert len(fs) == 1 and fs[0].startswith("chat: a100-80gb has the highest throughput"), fs
    assert "h100-sxm" not in fs[0]


def test_a_saturation_run_judged_invalid_is_no_cost_basis(kit: Any) -> None:
    """Without an SLO every cell is priced at its saturation throughput: a figure from a run judged invalid is no
    price per token, so it gets no cost rank and is not the best value (as a cell without a basis)."""
    from infermeter.study.tables import ranking_tables

    study = kit.study_of([_conf("h100-sxm", 4.0), _conf("a100-80gb", 2.0)], ["chat"])
    assert not study.slo.limits
    fast = kit.make_cell("h100-sxm", "chat", 9000)  # 4 $/h over 9,000 tok/s: the cheaper per token, were it valid
    fast = replace(fast, saturation={**fast.saturation, "valid": False, "invalid_reasons": ["schedule_lag"]})
    cells = [fast, kit.make_cell("a100-80gb", "chat", 3000)]
    prices = price_study(study, cells, TODAY)
    cc = prices.cost[fast.key]
    assert cc.result is None and "invalid" in (cc.reason or "")
    (table,) = ranking_tables(study, cells, prices)
    by_config = {row[1].display: row for row in table.rows}
    assert by_config["h100-sxm"][7].value is None and by_config["a100-80gb"][7].value == 1
    assert prices.picks["chat"].best.cell.config == "a100-80gb"
