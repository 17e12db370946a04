"""End-to-end: ``infermeter run`` against an emulated reasoning model reports TTFO beside TTFT."""

import json


def test_a_run_against_a_thinking_emulator_reports_ttfo_beside_ttft(cli, tmp_path):
    out = tmp_path / "r"
    p = cli("run", "--emulator", "--ttft-ms 20 --itl-ms 5 --reasoning-tokens 40", "--concurrency", "2",
            "--requests", "6", "--output-tokens", "60", "--profile", "synthetic", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert set(s["ttfo_ms"]) == set(s["ttft_ms"]) and s["ttfo_ms"]["count"] == 6
    thinking_ms = s["ttfo_ms"]["mean"] - s["ttft_ms"]["mean"]
    assert abs(thinking_ms - 40 * 5) <= 0.1 * 40 * 5  # 40 thinking tokens x 5 ms
    assert s["reasoning_requests"] == 6 and s["total_reasoning_tokens"] == 240 and s["total_answer_tokens"] == 120
    assert s["mean_reasoning_tokens"] == 40 and s["mean_answer_tokens"] == 20
    assert "TTFO" in p.stdout and "thinking" in p.stdout


def test_a_run_without_thinking_shows_no_ttfo(cli, tmp_path):
    out = tmp_path / "r"
    p = cli("run", "--emulator", "--ttft-ms 5 --itl-ms 1", "--concurrency", "2", "--requests", "4",
            "--output-tokens", "8", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert "ttfo_ms" not in s and "reasoning_requests" not in s
    assert "TTFO" not in p.stdout
