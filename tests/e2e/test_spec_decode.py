"""End to end: infermeter run against `emulate --speculative ngram:k=3,acceptance=0.6` reads the emulator's
vLLM speculative-decoding counters into summary.json's server_metrics.spec_decode."""

import json

import pytest

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.twin.speculative import expected_tokens_per_step, parse_speculative


@pytest.fixture(scope="module")
def spec_twin():
    with EmulatorProcess(["--speculative", "ngram:k=3,acceptance=0.6", "--speedup", "4"]) as emu:
        yield emu


def test_run_reports_the_emulated_acceptance(spec_twin, cli, tmp_path):
    out = tmp_path / "r"
    p = cli("run", "--url", spec_twin.base_url, "--concurrency", "4", "--requests", "32", "--input-tokens", "128",
            "--output-tokens", "96", "--scrape-interval", "0.5", "--out", str(out))
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    sd = s["server_metrics"]["spec_decode"]
    assert sd["source"] == "counters" and sd["num_speculative_tokens"] == pytest.approx(3)
    # the emulator's acceptance=0.6 is vLLM's acceptance rate (accepted / drafted tokens): the Done-when of #30
    assert sd["acceptance_rate"] == pytest.approx(0.6, abs=0.1)
    # per position P(L >= i) = c^i with c the conditional probability solved from it
    assert sd["conditional_acceptance"] == pytest.approx(parse_speculative("ngram:k=3,acceptance=0.6").conditional,
                                                         abs=0.1)
    assert sd["mean_accepted_length"] == pytest.approx(expected_tokens_per_step(3, 0.6), abs=0.3)
    pos = sd["per_position_acceptance"]
    assert len(pos) == 3 and pos[0] >= pos[1] >= pos[2]
    assert s["completed"] == 32 and s["mean_output_tokens"] == 96


def test_conditional_is_the_per_position_form(cli, tmp_path):
    with EmulatorProcess(["--speculative", "eagle:k=3,conditional=0.6", "--speedup", "4"]) as emu:
        out = tmp_path / "r"
        p = cli("run", "--url", emu.base_url, "--concurrency", "4", "--requests", "24", "--input-tokens", "128",
                "--output-tokens", "96", "--scrape-interval", "0.5", "--out", str(out))
    assert p.returncode == 0, p.stderr
    sd = json.loads((out / "summary.json").read_text())["server_metrics"]["spec_decode"]
    assert sd["conditional_acceptance"] == pytest.approx(0.6, abs=0.1)
    assert sd["acceptance_rate"] == pytest.approx((0.6 + 0.36 + 0.216) / 3, abs=0.1)
