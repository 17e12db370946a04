"""The campaign file: validation that names the entry, cells in run order, and the content hash."""

import pytest

from infermeter.campaign.spec import load_campaign
from infermeter.errors import ConfigError

GOOD = """
name: pair
repeats: 2
defaults: {output_tokens: "8", warmup: 1}
targets:
  - {name: a, engine: emulator, args: [--max-concurrency, "2"]}
  - {name: b, url: "http://127.0.0.1:9000", model: m, hardware: h100-sxm}
profiles: [{name: short, input_tokens: "16"}, {name: long, input_tokens: "256"}]
loads:
  - {name: c2, concurrency: 2, requests: 10}
  - {name: soak, rate: 5, duration: 2m, window: 30s}
  - {name: fm, load: find-max, slo: "ttft_ms=500", requests: 20}
"""


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_cells_run_target_by_target_repeat_by_repeat(tmp_path):
    c = load_campaign(write(tmp_path, GOOD))
    keys = [cell.key for cell in c.cells()]
    assert len(keys) == 2 * 2 * 2 * 3
    assert keys[:7] == ["a/short/c2/r0", "a/short/soak/r0", "a/short/fm/r0", "a/long/c2/r0", "a/long/soak/r0",
                        "a/long/fm/r0", "a/short/c2/r1"]
    soak = c.cells()[1].config
    assert soak.duration_s == 120.0 and soak.window_s == 30.0 and soak.warmup == 1 and soak.output_tokens == "8"
    fm = c.cells()[2].config
    assert fm.load == "find-max" and fm.slo == {"ttft_ms": 500.0}
    b = c.cells_by_target["b"][0].config
    assert b.model == "m" and b.hardware == "h100-sxm" and b.input_tokens == "16"


def test_same_content_same_hash(tmp_path):
    a = load_campaign(write(tmp_path, GOOD, "a.yaml"))
    b = load_campaign(write(tmp_path, GOOD.replace("repeats: 2", "repeats: 2  # same"), "b.yaml"))
    c = load_campaign(write(tmp_path, GOOD.replace("repeats: 2", "repeats: 3"), "c.yaml"))
    assert a.spec_hash == b.spec_hash != c.spec_hash


@pytest.mark.parametrize("change,needle", [
    ('{name: c2, concurrency: 2, requests: 10}', None),
    ('{name: c2, concurrency: 2, requets: 10}', "loads.c2: requets: Extra inputs are not permitted"),
    ('{name: c2, concurrency: 2, rate: 3, requests: 10}', "--concurrency and --rate"),
    ('{name: c2, concurrency: 2, duration: soon}', "loads[0].duration 'soon'"),
    ('{name: c2, concurrency: 2, requests: 10, url: "http://x"}', "loads[0].url: set per target"),
    ('{name: "c 2", concurrency: 2, requests: 10}', "loads[0].name 'c 2'"),
])
def test_bad_entries_are_named(tmp_path, change, needle):
    text = GOOD.replace('{name: c2, concurrency: 2, requests: 10}', change)
    if needle is None:
        load_campaign(write(tmp_path, text))
        return
    with pytest.raises(ConfigError) as err:
        load_campaign(write(tmp_path, text))
    assert needle in str(err.value) and "c.yaml" in str(err.value)


@pytest.mark.parametrize("text,needle", [
    ("targets: [{name: a, url: 'http://x', engine: emulator}]\nloads: [{requests: 1}]", "exactly one of url: or engine:"),
    ("targets: [{name: a, engine: sglang}]\nloads: [{requests: 1}]", "line 1: targets[0].engine"),
    ("targets: []\nloads: [{requests: 1}]", "targets"),
    ("targets: [{name: a, engine: emulator}, {name: a, engine: emulator}]\nloads: [{requests: 1}]", "distinct names"),
    ("- just a list", "expected a mapping"),
    ("targets: [unclosed", "not valid YAML"),
])
def test_bad_files(tmp_path, text, needle):
    with pytest.raises(ConfigError, match=None) as err:
        load_campaign(write(tmp_path, text))
    assert needle in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_campaign(tmp_path / "nope.yaml")
