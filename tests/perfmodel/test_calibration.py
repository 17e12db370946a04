"""Calibration lookup order and provenance of the shipped table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.calibration import PHASE_BOUNDS, Calibration, EngineDefaults, Entry, load_calibration

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
        lo, hi = PHASE_BOUNDS[e.phase]
        assert lo <= e.value <= hi, e
    for e in fitted:
        named = set(e.source.removeprefix("fit: rows ").split(", "))
        assert named <= ids, e
    for eng in cal.engines:
        assert eng.source and eng.max_num_seqs > 0 and eng.request_overhead_ms > 0


CLASSY = Calibration(entries=(
    Entry("*", "*", "*", "decode", "*", 0.70, "prior"),
    Entry("hbm", "serving", "half", "decode", "*", 0.72, "hbm serving"),
    Entry("hbm", "llamacpp", "half", "decode", "*", 0.50, "hbm llamacpp"),
    Entry("ampere", "serving", "half", "decode", "*", 0.68, "ampere serving"),
), engines=(EngineDefaults("vllm", 1, 1, 1, 1, 1, "current", "total", "t"),
            EngineDefaults("llamacpp", 1, 1, 1, 1, 1, "full", "free", "t", group="llamacpp")))


@pytest.mark.parametrize("query,expected", [
    (("ampere", "vllm", "bf16", "decode", 1, "hbm"), "ampere serving"),       # family beats memory class
    (("hopper", "vllm", "bf16", "decode", 1, "hbm"), "hbm serving"),          # unseen family: its memory class
    (("ampere", "llamacpp", "fp16", "decode", 1, "hbm"), "hbm llamacpp"),     # another engine group's family value does not apply
    (("ada", "llamacpp", "fp16", "decode", 1, "gddr"), "prior"),
])
def test_memory_class_and_engine_group(query, expected):
    assert CLASSY.efficiency(*query)[1].source == expected


def test_engine_versions_resolve_to_their_generation():
    cal = load_calibration()
    old = cal.engine("trtllm@0.6.1")
    assert (old.name, old.version, old.generation, old.gqa_kv_reads) == ("trtllm", "0.6.1", "trtllm<0.8", "per_query_head")
    assert cal.engine("trtllm@0.12.0").generation == "" and cal.engine("trtllm@0.12.0").gqa_kv_reads == "grouped"
    assert cal.engine("trtllm@nim 1.8.0").generation == ""  # no readable version: the current defaults
    assert cal.engine("vllm@0.6").generation == "vllm<0.8" and cal.engine("vllm@0.9.1").generation == ""
    with pytest.raises(ConfigError, match="--engine 'tgi@2.0' unknown"):
        cal.engine("tgi@2.0")


def test_per_deployment_calibration_file_overlays_the_shipped_table(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "fitted:\n"
        "  - {family: hopper, engine: vllm, dtype: bf16, phase: decode, tp: 1, value: 0.9, prior: 0.75, source: 'calibrate: runs/x'}\n"
        "  - {family: hopper, engine: vllm, phase: step_overhead, value: 0.3, prior: 0.5, source: 'calibrate: runs/x'}\n"
        "fitted_engines:\n"
        "  vllm: {request_overhead_ms: 9.0, source: 'calibrate: runs/x'}\n")
    from infermeter.perfmodel import build_deployment

    mine = build_deployment("llama-3.1-8b", "h100-sxm", calibration=str(f))
    shipped = build_deployment("llama-3.1-8b", "h100-sxm")
    assert (mine.mbu, mine.step_overhead_ms) == (0.9, 0.3) and mine.request_overhead_s == pytest.approx(0.009)
    assert mine.calibration_entries[1].origin == str(f)
    assert mine.step_time(1, 1000, 1) < shipped.step_time(1, 1000, 1)
    assert mine.mfu == shipped.mfu  # what the file does not fit comes from the shipped table
    other = build_deployment("llama-3.1-8b", "a100-80gb", calibration=str(f))
    assert other.mbu == build_deployment("llama-3.1-8b", "a100-80gb").mbu


@pytest.mark.parametrize("text,match", [
    ("fitted:\n  - {family: hopper, engine: vllm, phase: decode, value: 1.5, source: x}\n", r"decode value 1.5 outside 0.05..0.95"),
    ("fitted:\n  - {family: hopper, engine: vllm, phase: warp, value: 0.5, source: x}\n", r"phase 'warp' unknown"),
    ("fitted:\n  - {family: hopper, phase: decode, value: 0.5, source: x}\n", r"bad calibration entry"),
    ("fitted_engines:\n  tgi: {request_overhead_ms: 1}\n", r"fitted_engines: engine 'tgi' unknown"),
    ("residuals:\n  - {metric: tpot_ms}\n", r"residuals\[0\] needs metric and a list of log_errors"),
    ("fitted: [\n", r"not valid YAML \(line"),
])
def test_bad_calibration_files_name_the_problem(tmp_path, text, match):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_calibration(str(f))
    with pytest.raises(ConfigError, match="no such file"):
        load_calibration(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("bad", ["nan", "inf", "-1"])
def test_an_engine_generation_with_a_non_finite_or_negative_cost_is_named(bad):
    from infermeter.perfmodel.engines import parse_generation

    with pytest.raises(ConfigError, match=r"x\.yaml: engine generation vllm<0\.8: frontend_ms must be a finite number >= 0"):
        parse_generation({"engine": "vllm", "below": "0.8", "source": "s", "frontend_ms": bad}, "x.yaml")
