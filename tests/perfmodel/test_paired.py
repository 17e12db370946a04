"""Comparisons of two predictions: the paired out-of-sample errors behind a decision's cost-ratio interval."""

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
