"""``run --calibrate-twin FILE``: a sweep measured and the twin fitted to it in one command; a calibration that
cannot be made names the flag and keeps the run's results."""

import json

from infermeter.engines.emulator.process import EmulatorProcess
from infermeter.twin.calibration import DeploymentCalibration


def test_a_sweep_and_the_twin_fitted_to_it_in_one_command(cli, tmp_path):
    with EmulatorProcess(["--speedup", "4"]) as emu:  # the digital twin: vLLM-like, its /metrics as vLLM's
        out, cal = tmp_path / "sweep", tmp_path / "cal.yaml"
        p = cli("run", "--url", emu.base_url, "--load", "sweep", "--sweep-rates", "1", "--concurrency", "4",
                "--requests", "40", "--input-tokens", "128", "--output-tokens", "32", "--no-calibrate",
                "--calibrate-twin", str(cal), "--out", str(out))
        assert p.returncode == 0, p.stderr[-3000:]
        assert (out / "summary.json").exists()
        back = DeploymentCalibration.read(cal)
        # every step of the sweep (synchronous, throughput, one rate between; and a step the client could not
        # apply on a loaded machine, with its retry: the server's step times are data all the same)
        steps = json.loads((out / "summary.json").read_text())["steps"]
        assert len(back.fit.runs) == len(steps) >= 3
        assert back.fit.steps > 50 and back.step_time.base_s > 0
        # a GPU vLLM says num_gpu_blocks (of block_size tokens), vLLM CPU kv_cache_size_tokens: both read
        assert back.engine.kv_capacity_tokens > 10_000 and back.engine.kv_capacity_tokens % back.engine.block_size == 0
        assert "cache_config_info" in back.engine.source
        assert "step time =" in p.stdout and f"wrote {cal}" in p.stdout.replace("\n", "")

        bad = tmp_path / "unscraped"
        p = cli("run", "--url", emu.base_url, "--concurrency", "2", "--requests", "10", "--output-tokens", "8",
                "--no-scrape", "--calibrate-twin", str(tmp_path / "never.yaml"), "--out", str(bad))
        assert p.returncode == 2, p.stderr[-3000:]
        assert "--calibrate-twin" in p.stderr and "KV capacity" in p.stderr and "kept" in p.stderr
        assert (bad / "summary.json").exists() and not (tmp_path / "never.yaml").exists()
