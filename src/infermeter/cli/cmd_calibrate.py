"""``infermeter calibrate RUN_DIR... --out cal.yaml``: fit the twin of a deployment to measured runs of it.

    infermeter calibrate results/c1 results/c4 --engine vllm-cpu --hardware my-cpu --out cal.yaml
    infermeter simulate --calibration cal.yaml --concurrency 8 --input-tokens 128 --output-tokens 32

Prints the fitted step time, the front end's cost, the engine settings and where each came from,
then every calibration run simulated back (measured vs predicted TTFT p50, TPOT p50, output
tokens/s). See docs/performance-model.md, "Calibrating a deployment".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from infermeter.terminal import SafeConsole, escape, safe_text

if TYPE_CHECKING:
    from infermeter.twin.calibration import DeploymentCalibration


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}%"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


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


def show_calibration(cal: DeploymentCalibration, path: Path, c: Console) -> None:
    """What ``calibrate`` prints: the fitted step time, front end, engine settings, and each run simulated back."""
    st, fe, e = cal.step_time, cal.frontend, cal.engine
    aside = int(cal.fit.residuals.get("outliers", 0))
    c.print(f"[bold]{escape(cal.deployment.model)}[/] served by {escape(cal.deployment.engine)} on "
            f"{escape(cal.deployment.hardware)} "
            f"({len(cal.fit.runs)} runs, {cal.fit.steps:,} engine steps fitted"
            + (f"; {aside:,} set aside as stretched by other work on the machine" if aside else "") + ")",
            highlight=False)
    kv = f" + {st.per_kv_token_s * 1e6:.2f} µs/context token" if st.per_kv_token_s else ""
    if cal.fit.context_basis and not cal.fit.context_basis.startswith("fitted"):
        kv += f" (context: {escape(cal.fit.context_basis)})"
    c.print(f"step time = {st.base_s * 1000:.2f} ms + {st.per_token_s * 1000:.3f} ms/token + "
            f"{st.per_seq_s * 1000:.3f} ms/sequence{kv}  (median |residual| {cal.fit.residuals['median_abs_pct']:.1f}%, "
            f"p90 {cal.fit.residuals['p90_abs_pct']:.1f}%; batches of up to {cal.fit.max_seqs} sequences seen: "
            "larger ones are extrapolated)" + (f"; not identifiable: {', '.join(cal.fit.dropped)}"
                                               if cal.fit.dropped else ""), highlight=False)
    c.print(f"front end: {fe.overhead_s * 1000:.1f} ms per request before the engine, "
            f"{fe.service_s * 1000:.1f} ms of serial work in the API server; the server adds "
            f"{fe.template_tokens} tokens to each prompt", highlight=False)
    for w in cal.fit.warnings:
        c.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    c.print(f"engine: max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_num_batched_tokens}, "
            f"KV {e.kv_capacity_tokens:,} tokens in blocks of {e.block_size} ({escape(e.source)})", highlight=False)
    if cal.checks:
        t = Table(title="The calibration runs, simulated back (fitted on these: in-sample)", title_justify="left")
        for col in ("run", "TTFT p50 ms", "err", "TPOT p50 ms", "err", "out tok/s", "err"):
            t.add_column(col, justify="left" if col == "run" else "right")
        for r in cal.checks:
            t.add_row(safe_text(r["load"]), f"{_num(r['ttft_p50_ms_measured'])} → {_num(r['ttft_p50_ms_predicted'])}",
                      _pct(r["ttft_p50_err_pct"]),
                      f"{_num(r['tpot_p50_ms_measured'])} → {_num(r['tpot_p50_ms_predicted'])}",
                      _pct(r["tpot_p50_err_pct"]),
                      f"{_num(r['output_tokens_per_s_measured'], '.0f')} → "
                      f"{_num(r['output_tokens_per_s_predicted'], '.0f')}", _pct(r["output_tokens_per_s_err_pct"]))
        c.print(t)
    c.print(f"wrote {escape(path)}", highlight=False)
