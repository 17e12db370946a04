"""Calibration lookup order and provenance of the shipped table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.calibration import Calibration, Entry, load_calibration

CSV = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"

TABLE = Calibration(entries=(
    Entry("*", "*", "*", "decode", "*", 0.70, "prior"),
    Entry("*", "*", "int4", "decode", "*", 0.60, "prior int4"),
    Entry("hopper", "*", "fp8", "decode", "*", 0.80, "pooled"),
    Entry("hopper", "trtllm", "fp8", "decode", 1, 0.87, "tp1"),
    Entry("hopper", "trtllm", "fp8", "decode", 4, 0.75, "tp4"),
), engines=())


@pytest.mark.parametrize("query,expected", [
    (("hopper", "trtllm", "fp8", "decode", 1), "tp1"),      # exact
    (("hopper", "trtllm", "fp8", "decode", 2), "tp1"),      # nearest TP (tie: first listed)
    (("hopper", "trtllm", "fp8", "decode", 8), "tp4"),      # nearest TP
    (("hopper", "vllm", "fp8", "decode", 1), "pooled"),     # other engine: the family's pooled value
    (("ampere", "vllm", "awq", "decode", 1), "prior int4"),  # dtype class
    (("ada", "vllm", "bf16", "decode", 2), "prior"),
])
def test_lookup_order(query, expected):
    assert TABLE.efficiency(*query)[1].source == expected


def test_missing_phase_and_engine_are_errors():
    with pytest.raises(ConfigError, match="no prefill entry"):
        TABLE.efficiency("hopper", "vllm", "bf16", "prefill", 1)
    with pytest.raises(ConfigError, match="--engine 'ollama' unknown"):
        load_calibration().engine("ollama")


def test_shipped_table_has_provenance_for_every_entry():
    cal = load_calibration()
    ids = {r["id"] for r in csv.DictReader(CSV.open())}
    fitted = [e for e in cal.entries if e.prior is not None]
    assert fitted, "the shipped table carries fitted entries"
    for e in cal.entries:
        assert e.source.startswith(("prior:", "fit: rows ")), e
        assert 0.05 <= e.value <= 0.95, e
    for e in fitted:
        named = set(e.source.removeprefix("fit: rows ").split(", "))
        assert named <= ids, e
    for eng in cal.engines:
        assert eng.source and eng.max_num_seqs > 0 and eng.request_overhead_ms > 0
