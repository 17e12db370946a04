"""A study configuration with ``disaggregate``: the split's cell beside the aggregated one, on the same GPUs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from infermeter.errors import ConfigError
from infermeter.study.config import build_study
from infermeter.study.runner import run_study
from infermeter.study.targets import SimulatedTarget


def _study(conf: dict[str, Any]) -> Any:
    return build_study({
        "model": "llama-3.1-8b", "profiles": ["chat"],
        "configurations": [{"config": "2xh100-sxm:tp1", "name": "aggregated"}, conf],
        "load": {"sync_requests": 2, "saturation_requests": 120, "rate_fractions": [0.5], "requests": 30,
                 "refine": 0},
        "slo": {"ttft_ms": 3000}, "pricing": {"provider": "aws"},
    }, "test")


def test_a_disaggregated_configuration_runs_as_a_cell(tmp_path: Any) -> None:
    study = _study({"config": "2xh100-sxm:tp1", "name": "1P1D", "disaggregate": "prefill=h100-sxm,decode=h100-sxm"})
    res = run_study(study, tmp_path / "s", today=dt.date(2026, 11, 30))
    agg, dis = res.cell("aggregated", "chat"), res.cell("1P1D", "chat")
    assert dis.target["disaggregated"] is True and "disaggregated" not in agg.target
    assert dis.saturation["output_tokens_per_s"] > 0 and agg.saturation["output_tokens_per_s"] > 0


def test_the_split_must_use_the_configurations_gpus() -> None:
    study = _study({"config": "2xh100-sxm:tp1", "name": "bad", "disaggregate": "prefill=h100-sxm,decode=2xh100-sxm"})
    conf = study.configurations[1]
    with pytest.raises(ConfigError, match="not the configuration's 2xh100-sxm:tp1"):
        SimulatedTarget(study, conf)
