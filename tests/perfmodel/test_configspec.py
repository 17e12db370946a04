"""Configuration strings: parsing rules and a label that parses back to the same configuration."""

from __future__ import annotations

import pytest

from infermeter.errors import ConfigError
from infermeter.perfmodel.configspec import HardwareConfig, parse_config


@pytest.mark.parametrize("text,expected", [
    ("h100-sxm", HardwareConfig("h100-sxm", 1, 1, 1)),
    ("4xa100-80gb", HardwareConfig("a100-80gb", 4, 4, 1)),
    ("4xa100-80gb:tp4", HardwareConfig("a100-80gb", 4, 4, 1)),
    ("8xa10g:tp4,pp2", HardwareConfig("a10g", 8, 4, 2)),
    ("4xh100-sxm:tp1", HardwareConfig("h100-sxm", 4, 1, 1)),
    ("tp2", HardwareConfig("tp2", 1, 1, 1)),
])
def test_parse_and_label_round_trip(text, expected):
    cfg = parse_config(text)
    assert cfg == expected
    assert parse_config(cfg.label) == cfg


def test_labels():
    assert parse_config("4xh100-sxm:tp1").label == "4xh100-sxm:tp1"
    assert parse_config("4xh100-sxm:tp2").replicas == 2
    assert parse_config("8xa10g:pp2,tp4").label == "8xa10g:tp4,pp2"


def test_malformed_strings_name_the_input():
    with pytest.raises(ConfigError, match="'3xh100-sxm:tp2'.*does not divide 3"):
        parse_config("3xh100-sxm:tp2")
    with pytest.raises(ConfigError, match="unknown parallelism 'ep2'"):
        parse_config("h100-sxm:ep2")
