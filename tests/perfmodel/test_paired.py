"""Comparisons of two predictions: the paired out-of-sample errors behind a decision's cost-ratio interval."""

import math

import yaml

from infermeter.perfmodel.paired import PAIRED_FILE, family_of, ratio_interval, table_from_report


def test_the_shipped_paired_table_is_a_fresh_derivation_and_within_a_family_errors_move_together(lopo_report):
    fresh = table_from_report(lopo_report)  # the corpus's leave-one-publication-out report (tests/perfmodel/conftest.py)
    shipped = yaml.safe_load(PAIRED_FILE.read_text())
    for kind in ("same_family", "cross_family"):
        assert shipped[kind] == fresh[kind], kind
    # two hardware of one family share the fitted efficiencies: their errors differ far less than across families
    assert fresh["same_family"]["n"] >= 8 and fresh["cross_family"]["n"] >= 20
    assert fresh["same_family"]["rms"] < 0.6 * fresh["cross_family"]["rms"]


def test_a_25_percent_margin_is_clear_within_a_family_and_close_across():
    table = {"same_family": {"n": 12, "rms": 0.0744}, "cross_family": {"n": 41, "rms": 0.1973}}
    lo, hi, basis = ratio_interval(1.25, same_family=True, table=table)
    assert 1.0 < lo < 1.25 < hi and "within one hardware family, n=12" in basis
    lo, hi, _ = ratio_interval(1.25, same_family=False, table=table)
    assert lo < 1.0 < 1.25 < hi
    # too few pairs of a kind: the wider cross-family spread stands in
    few = {"same_family": {"n": 2, "rms": 0.01}, "cross_family": {"n": 41, "rms": 0.1973}}
    assert ratio_interval(1.25, True, few)[:2] == ratio_interval(1.25, False, few)[:2]
    assert family_of("4xa100-80gb:tp4") == family_of("a100-40gb") == "ampere" and family_of("h200") == "hopper"
    assert family_of("no-such-gpu") is None


def test_blind_pairs_count_the_true_ratio_inside_the_stated_interval():
    from types import SimpleNamespace

    from infermeter.perfmodel.freshpub import Record
    from infermeter.perfmodel.paired import blind_pairs

    table = {"same_family": {"n": 13, "rms": 0.07}, "cross_family": {"n": 56, "rms": 0.2}}
    h = ratio_interval(1.0, False, table)[1]  # the cross-family half-width, as a ratio

    def row(i, hw, model="llama-3.1-8b", conc=1, **settings):
        return SimpleNamespace(id=i, model=model, weight_dtype="bf16", engine="vllm", scenario="fixed_concurrency",
                               concurrency=conc, input_tokens=128, output_tokens=128, metric="tpot_ms", gpus=1, hardware=hw,
                               setting=lambda k, default=None: settings.get(k, default))

    def rec(i, measured, pub="p1", cls="dense"):
        return Record("b9", "c", i, pub, cls, "tpot_ms", measured, 10.0, 8.0, 12.0)

    rows = {r.id: r for r in [row("a", "h100-sxm"), row("b", "a100-80gb"), row("c", "mi300x"), row("d", "h100-sxm", conc=8),
                              row("e", "a100-80gb", conc=8), row("m1", "h100-sxm", "mixtral-8x7b"),
                              row("m2", "a100-80gb", "mixtral-8x7b"),
                              # two request rates (or run lengths) are two workloads, not one on two hardware: no pair
                              row("r1", "h100-sxm", rate=1.0), row("r2", "a100-80gb", rate=4.0),
                              row("s1", "h100-sxm", gpu_memory_utilization=0.9), row("s2", "a100-80gb", gpu_memory_utilization=0.8)]}
    recs = [rec("a", 10.0), rec("b", 10.0 * h * 0.99), rec("c", 10.0 * h * h),  # a-b inside, a-c and b-c outside
            rec("d", 10.0, "p2"), rec("e", 20.0, "p2"),  # one pair of another publication, far outside
            rec("m1", 10.0, cls="moe"), rec("m2", 50.0, cls="moe"),  # MoE pairs are not counted
            rec("r1", 10.0, "p3"), rec("r2", 50.0, "p3"),
            rec("s1", 10.0, "p4"), rec("s2", 10.0 * h * 0.99, "p4")]  # a server setting per GPU: still one workload
    got = blind_pairs(recs, rows, table)
    assert got["cross_family"] == {"pairs": 5, "inside": 2, "publications": 3}
    assert got["same_family"] == {"pairs": 0, "inside": 0, "publications": 0}


def test_the_blind_pairs_the_docs_quote():
    """docs (performance-model.md sections 8-9; study.md): of the blind sets' dense cross-family pairs, the shipped
    interval holds 15 of 23 (5 publications since blind sets 9 and 10 joined the corpus: their two new pairs, both
    inside; 13 of 21 before; half-width 0.63 in log since the ninth round's refit, blind set 8's TensorRT-LLM v0.17 pairs
    readable once it joined the corpus; 11 of 19 at 0.64 in the eighth round; 9 of 17 at 0.65 before blind set 6
    was folded into the corpus and its two L4/A100 pairs of the same benchmark suite could be read, both inside) and the
    conformal rank of the corpus pairs (0.35 in log) would have held 11 (9 of 21, 8 of 19 before): the reason the wider
    interval is kept.
    Recomputed from the shipped history and table."""
    from pathlib import Path

    from infermeter.perfmodel import freshpub
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.paired import blind_pairs, load
    from infermeter.perfmodel.uncertainty import t90

    data = Path(__file__).resolve().parents[1] / "data"
    rows = {r.id: r for name in ("published-measurements.csv", "published-measurements-new.csv",
                                 "published-measurements-aside.csv") for r in load_rows(data / name)}
    recs = freshpub.load()
    shipped = blind_pairs(recs, rows)["cross_family"]
    assert (shipped["pairs"], shipped["inside"], shipped["publications"]) == (23, 15, 5)
    narrow = dict(load())
    n = int(narrow["cross_family"]["n"])
    narrow["cross_family"] = {**narrow["cross_family"], "rms": 0.35 / (t90(n - 1) * math.sqrt(1 + 1 / n))}  # half-width 0.35
    assert blind_pairs(recs, rows, narrow)["cross_family"]["inside"] == 11
