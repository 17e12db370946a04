"""How ``calibrate`` (and ``run --calibrate-twin``) print a fitted twin: step time, front end, engine
settings, and each calibration run simulated back. A helper module, so no command imports another::

    show_calibration(cal, Path("cal.yaml"), SafeConsole())
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from infermeter.cli.fit import Fit, make_table
from infermeter.terminal import escape, safe_text

if TYPE_CHECKING:
    from infermeter.twin.calibration import DeploymentCalibration


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}%"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


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
        t = make_table("The calibration runs, simulated back (fitted on these: in-sample)",
                       [(col, "text" if col == "run" else "num")
                        for col in ("run", "TTFT p50 ms", "err", "TPOT p50 ms", "err", "out tok/s", "err")],
                       title_justify="left")
        for r in cal.checks:
            t.add_row(safe_text(r["load"]), f"{_num(r['ttft_p50_ms_measured'])} → {_num(r['ttft_p50_ms_predicted'])}",
                      _pct(r["ttft_p50_err_pct"]),
                      f"{_num(r['tpot_p50_ms_measured'])} → {_num(r['tpot_p50_ms_predicted'])}",
                      _pct(r["tpot_p50_err_pct"]),
                      f"{_num(r['output_tokens_per_s_measured'], '.0f')} → "
                      f"{_num(r['output_tokens_per_s_predicted'], '.0f')}", _pct(r["output_tokens_per_s_err_pct"]))
        c.print(Fit(t))  # at 80 columns: split into column groups, never "concurren…"
    c.print(f"wrote {escape(path)}", highlight=False)
