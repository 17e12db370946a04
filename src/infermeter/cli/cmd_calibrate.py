"""``infermeter calibrate RUN_DIR... --out cal.yaml``: fit the twin of a deployment to measured runs of it.

    infermeter calibrate results/c1 results/c4 --engine vllm-cpu --hardware my-cpu --out cal.yaml
    infermeter simulate --calibration cal.yaml --concurrency 8 --input-tokens 128 --output-tokens 32

Prints the fitted step time, the front end's cost, the engine settings and where each came from,
then every calibration run simulated back (measured vs predicted TTFT p50, TPOT p50, output
tokens/s). See docs/performance-model.md, "Calibrating a deployment".
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from infermeter.cli.calview import show_calibration
from infermeter.terminal import SafeConsole


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate_cmd(
        run_dirs: Annotated[list[Path], typer.Argument(help="Measured runs of one deployment (sweeps: their steps).")],
        out: Annotated[Path, typer.Option("--out", help="Calibration file to write (YAML).")] = Path("calibration.yaml"),
        engine: Annotated[Optional[str], typer.Option(help="Engine served: vllm, vllm-cpu, sglang (its scheduler defaults; default: what /metrics showed, else vllm).")] = None,
        hardware: Annotated[Optional[str], typer.Option(help="A name for what it ran on (default: the runs' --hardware).")] = None,
        max_num_seqs: Annotated[Optional[int], typer.Option(help="The server's --max-num-seqs, when not the engine's default.")] = None,
        max_num_batched_tokens: Annotated[Optional[int], typer.Option(help="The server's --max-num-batched-tokens, when not the default.")] = None,
        kv_capacity_tokens: Annotated[Optional[int], typer.Option(help="KV cache size in tokens, when /metrics did not say.")] = None,
        check: Annotated[bool, typer.Option(help="Simulate each run back with the calibrated twin.")] = True,
        model_spec: Annotated[Optional[str], typer.Option(help="The served model's architecture (catalog id or a config.json) to estimate the context cost from when the runs have one length mix (default: the served model's name, where the catalog knows it).")] = None,
    ) -> None:
        """Fit the twin of one deployment (step time, front end, KV capacity) to its measured runs; write a calibration file."""
        from infermeter.measure.calibrate import calibrate
        from infermeter.records.outputs import output_file

        output_file(out)  # before the fit: a file that cannot be written is one line, not a lost fit
        cal = calibrate(run_dirs, engine=engine, hardware=hardware, max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=max_num_batched_tokens, kv_capacity_tokens=kv_capacity_tokens,
                        check=check, model_spec=model_spec)
        show_calibration(cal, cal.write(out), SafeConsole())
