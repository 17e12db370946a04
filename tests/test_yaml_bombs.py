"""YAML alias bombs are refused, by every reader of a user's YAML, with one line naming the file.

A "billion laughs" of a few hundred bytes (nine levels of nine aliases) would expand to ~4e8
nodes; before, a 700-byte campaign file took 1.7 GB for ``campaign --dry-run``. Here each reader
refuses it while parsing, and the memory it takes stays that of the file (measured with
tracemalloc, not timed).
"""

import tracemalloc
from pathlib import Path

import pytest

from infermeter.errors import UserError
from infermeter.yamlfile import MAX_ALIAS_NODES, AliasBomb, safe_load, yaml_mapping


def _bomb(top_key: str = "a", levels: int = 8) -> str:
    names = [f"l{i}" for i in range(levels + 1)]
    lines = [f'{names[0]}: &{names[0]} ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, cur in zip(names, names[1:]):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + f"\n{top_key}: *{names[-1]}\n"


def test_a_bomb_is_refused_without_expanding_it():
    text = _bomb()
    assert len(text) < 700
    tracemalloc.start()
    try:
        with pytest.raises(AliasBomb, match="alias bomb"):
            safe_load(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # the expansion would be ~4e8 nodes


def test_a_recursive_alias_is_refused():
    with pytest.raises(AliasBomb, match="recursive"):
        safe_load("a: &a [1, *a]\n")


def test_ordinary_anchors_and_merge_keys_still_load():
    text = "base: &b {concurrency: 4, requests: 50}\nruns:\n  - <<: *b\n    label: x\n  - *b\n"
    assert safe_load(text) == {"base": {"concurrency": 4, "requests": 50},
                               "runs": [{"concurrency": 4, "requests": 50, "label": "x"},
                                        {"concurrency": 4, "requests": 50}]}
    # a shared block used often, up to the bound, loads; past it, refused
    block = "b: &b [" + ", ".join(["1"] * 99) + "]\n"  # 100 nodes per use
    fine = block + "u: [" + ", ".join(["*b"] * (MAX_ALIAS_NODES // 100 - 1)) + "]\n"
    assert len(safe_load(fine)["u"]) == MAX_ALIAS_NODES // 100 - 1
    with pytest.raises(AliasBomb):
        safe_load(block + "u: [" + ", ".join(["*b"] * (MAX_ALIAS_NODES // 100 + 2)) + "]\n")


def test_yaml_mapping_names_the_file_on_one_line():
    with pytest.raises(UserError) as e:
        yaml_mapping(_bomb(), "campaign file c.yaml", "name, runs")
    msg = str(e.value)
    assert msg.startswith("campaign file c.yaml:") and "alias" in msg and "\n" not in msg


def _readers(tmp_path: Path):
    from infermeter.analysis.prices import load_catalog as load_prices
    from infermeter.campaign.spec import load_campaign
    from infermeter.perfmodel.calibration import load_calibration
    from infermeter.perfmodel.hardware import load_catalog as load_hardware
    from infermeter.study.flags import study_from

    return {
        "campaign": load_campaign,
        "study": lambda p: study_from(p, None, {}),
        "hardware": lambda p: load_hardware(str(p)),
        "prices": lambda p: load_prices(overrides=p),
        "calibration": lambda p: load_calibration(str(p)),
    }


@pytest.mark.parametrize("kind", ["campaign", "study", "hardware", "prices", "calibration"])
def test_every_reader_of_user_yaml_refuses_a_bomb_naming_the_file(kind, tmp_path):
    path = tmp_path / f"{kind}-bomb.yaml"
    path.write_text(_bomb())
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as e:
            _readers(tmp_path)[kind](path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert path.name in msg and "alias" in msg and "\n" not in msg, msg
    assert peak < 50_000_000


def test_campaign_dry_run_of_a_bomb_is_one_line_and_exit_2(cli, tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text("name: x\n" + _bomb("runs"))
    p = cli("campaign", str(path), "--dry-run")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "bomb.yaml" in p.stderr, p.stderr
