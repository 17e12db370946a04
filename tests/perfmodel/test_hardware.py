"""Hardware catalog: required entries, dense figures, CPU derivation, user overrides."""

from __future__ import annotations

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.hardware import get_hardware, load_catalog

REQUIRED = ["h100-sxm", "h100-pcie", "h100-nvl", "h200", "a100-40gb", "a100-80gb", "a10g", "l4", "l40s", "rtx-4090", "mi300x", "b200"]


def test_every_required_accelerator_has_source_date_and_fields():
    cat = load_catalog()
    for hid in REQUIRED:
        hw = cat[hid]
        assert hw.source.startswith("https://"), hid
        assert len(hw.date) == 10 and hw.date[4] == "-", hid
        assert hw.memory_gb > 0 and hw.memory_bandwidth_gbs > 0 and hw.tdp_w > 0, hid
        assert hw.peak_tflops("bf16") > 0, hid
    assert [h.id for h in cat.values() if h.type == "cpu"]  # at least one CPU entry


def test_dense_figures_from_the_datasheets():
    h100 = get_hardware("h100-sxm")
    assert (h100.memory_bandwidth_gbs, h100.peak_tflops("bf16"), h100.peak_tflops("fp8")) == (3350, 989.4, 1978.9)
    assert h100.interconnect.per_direction_bytes_per_s == 450e9
    assert get_hardware("rtx-4090").peak_tflops("bf16") == 165.2  # FP32 accumulate: half the FP16-accumulate rate
    assert get_hardware("b200").peak_tflops("fp4") == 9000


def test_ampere_has_no_fp8_and_asking_names_the_hardware():
    for hid in ("a100-80gb", "a10g"):
        assert not get_hardware(hid).has("fp8")
    with pytest.raises(ConfigError, match="a100-80gb.*fp8"):
        get_hardware("a100-80gb").peak_tflops("fp8")


def test_cpu_tflops_derive_from_cores_clock_and_vector_width():
    epyc = get_hardware("cpu-epyc-9654")  # 96 cores x 2.4 GHz x 16 fp32 lanes x 2 (FMA) x 1 unit = 7.3728 TF
    assert epyc.peak_tflops("fp16") == pytest.approx(7.3728)
    assert epyc.peak_tflops("bf16") == pytest.approx(14.7456)
    assert epyc.peak_tflops("int8") == pytest.approx(29.4912)
    assert get_hardware("cpu-xeon-8480").peak_tflops("bf16") == 114.7  # explicit AMX figure wins


def test_hardware_file_overrides_fields_and_adds_entries(tmp_path):
    f = tmp_path / "hw.yaml"
    f.write_text(
        "h100-sxm: {memory_bandwidth_gbs: 3000}\n"
        "my-gpu: {name: Mine, family: hopper, memory_gb: 10, memory_bandwidth_gbs: 100, tflops: {bf16: 50},\n"
        "         interconnect: {kind: pcie4, bandwidth_gbs: 64, latency_us: 20}, tdp_w: 100, source: 'https://x', date: '2026-01-01'}\n"
    )
    h = get_hardware("h100-sxm", str(f))
    assert h.memory_bandwidth_gbs == 3000 and h.peak_tflops("bf16") == 989.4
    assert get_hardware("MY-GPU", str(f)).memory_bytes == 10e9
    assert get_hardware("h100-sxm").memory_bandwidth_gbs == 3350  # the shipped catalog is untouched


def test_bad_hardware_file_names_entry_and_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("new-gpu: {name: X, family: y, memory_gb: 8}\n")
    with pytest.raises(ConfigError, match=r"new-gpu.*missing field\(s\) memory_bandwidth_gbs"):
        get_hardware("new-gpu", str(f))
    f.write_text("h100-sxm: {memory_gb: lots}\n")
    with pytest.raises(ConfigError, match="'memory_gb' must be a number"):
        get_hardware("h100-sxm", str(f))
    with pytest.raises(ConfigError, match="no such file"):
        get_hardware("h100-sxm", str(tmp_path / "missing.yaml"))


def test_unknown_hardware_lists_known_ids():
    with pytest.raises(ConfigError, match="unknown hardware 'v100'.*h100-sxm"):
        get_hardware("v100")
