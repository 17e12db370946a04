"""Measured and simulated cells in one study: an emulator process stands in for a live endpoint (and is labelled
emulated: it measures infermeter's own twin, not hardware)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from infermeter.study.config import build_study
from infermeter.study.runner import run_study


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from infermeter.engines.emulator.process import EmulatorProcess

    out = tmp_path_factory.mktemp("mixed")
    with EmulatorProcess(["--simple", "--ttft-ms", "5", "--itl-ms", "1", "--served-model-name", "llama-3.1-8b"]) as emu:
        study = build_study({
            "model": "llama-3.1-8b", "profiles": ["chat"],
            "profile_overrides": {"chat": {"output_tokens": "40,10,20,60"}},
            "configurations": [
                "h100-sxm",
                {"config": "a10g", "target": emu.base_url, "price_per_hour": 1.0, "price_date": "2026-11-01",
                 "load": {"concurrency": 8, "saturation_requests": 32, "requests": 16}},
            ],
            "load": {"sync_requests": 2, "saturation_requests": 320, "rate_fractions": [0.5], "requests": 40,
                     "refine": 0},
            "slo": {"ttft_ms": 3000}, "pricing": {"provider": "aws"},
        }, "test")
        return run_study(study, out, today=dt.date(2026, 11, 30))


def test_each_cell_is_measured_or_simulated_as_configured(mixed: Any) -> None:
    m, s = mixed.cell("a10g", "chat"), mixed.cell("h100-sxm", "chat")
    assert (m.source, s.source) == ("emulated", "simulated")  # the endpoint said it is infermeter's emulator
    assert m.target["url"].startswith("http://127.0.0.1:") and s.target["kind"] == "twin"
    assert m.saturation["output_tokens_per_s"] > 0 and m.saturation["concurrency"] == 8
    step0 = json.loads((Path(m.run_dir) / "steps" / "0" / "run.json").read_text())
    assert (step0["source"], step0["hardware"], step0["profile"]) == ("emulated", "a10g", "chat")


def test_every_figure_says_where_it_came_from(mixed: Any) -> None:
    md = mixed.files["markdown"].read_text()
    m, s = mixed.cell("a10g", "chat"), mixed.cell("h100-sxm", "chat")
    from infermeter.study.matrix import fmt_sig

    matrix = md.split("### Output tokens/s at saturation", 1)[1].split("###", 1)[0]
    row = {line.split("|")[1].strip(): line for line in matrix.splitlines() if line.startswith("| ")}
    assert f"{fmt_sig(m.saturation['output_tokens_per_s'])} (emul.)" in row["a10g"]
    assert f"{fmt_sig(s.saturation['output_tokens_per_s'])} (sim.)" in row["h100-sxm"]
    html = mixed.files["html"].read_text()
    assert "(emul.)</td>" in html and 'class="simulated"' in html
    first, second = [f for f in mixed.findings if f.topic == "sources"][:2]
    assert first.text.startswith("1 of 2 cells were measured on live endpoints (a10g × chat)")
    assert second.text.startswith("The endpoint of a10g reported itself as an infermeter emulator")
    assert "Every figure is simulated" not in " ".join(mixed.decisions["chat"].caveats)
    assert any("emulated endpoint" in c for c in mixed.decisions["chat"].caveats)


def test_an_emulated_endpoint_is_not_priced_as_the_gpu_it_models(mixed: Any) -> None:
    from infermeter.study.pricing import price_study

    study = mixed.study.model_copy(update={"configurations": tuple(
        c.model_copy(update={"price_per_hour": None, "price_date": None}) for c in mixed.study.configurations)})
    cc = price_study(study, mixed.cells, dt.date(2026, 11, 30)).cost[("a10g", "chat")]
    assert cc.result is None and cc.reason.startswith("not priced: an emulated endpoint")


def test_profile_overrides_reach_both_kinds_of_cell(mixed: Any) -> None:
    for c in mixed.cells:  # output_tokens 40,10,20,60: every request asks 20..60 tokens
        assert 20 <= c.tokens["mean_output"] <= 60, (c.config, c.tokens)


def test_an_override_a_measured_run_cannot_take_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from infermeter.errors import ConfigError

    study = build_study({"configurations": [{"config": "a10g", "target": "http://127.0.0.1:9"}], "profiles": ["chat"],
                         "profile_overrides": {"chat": {"turns": "2"}}}, "test")
    with pytest.raises(ConfigError, match="profile_overrides.chat: turns cannot be applied to a measured endpoint"):
        run_study(study, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_the_measured_cell_is_priced_and_ranked_with_its_own_price(mixed: Any) -> None:
    cc = mixed.prices.cost[("a10g", "chat")]
    assert cc.comparable and cc.result is not None
    assert (cc.result.price.usd_per_hour, cc.result.price.date_text) == (1.0, "2026-11-01")
    assert set(mixed.prices.picks) == {"chat"}
