"""``infermeter compare BASELINE CANDIDATE``: did the candidate regress? An exit code for CI.

    infermeter compare results/main results/pr-123 --threshold 5%
    infermeter compare results/main results/pr-123 --metric ttft_p95_ms --metric output_tokens_per_s --json

Per metric: both values, the change, and its bootstrap confidence interval from
the per-request records (``infermeter.analysis.compare``). Exit codes: 0 when
no metric regressed, 1 when at least one regressed beyond the threshold with
confidence, 2 for bad input. Thresholds: ``5%`` or ``0.05`` (relative, for
latencies and throughput); ``--error-threshold 1%`` is in percentage points.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import numpy as np
import typer

from infermeter.cli.fit import Fit, make_table
from infermeter.errors import ConfigError
from infermeter.numbers import rate
from infermeter.terminal import SafeConsole, escape, safe_text

if TYPE_CHECKING:
    from infermeter.report.rundir import RunDir

_VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "worse, within threshold": "yellow",
                  "better, within threshold": "cyan", "negligible": "dim", "no significant change": "", "no data": "dim", "too few samples": "dim"}


def parse_fraction(text: str, flag: str) -> float:
    """``5%`` -> 0.05; ``0.05`` -> 0.05; anything else is a ConfigError naming the flag."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", text or "")
    if not m:
        raise ConfigError(f"{flag} {text!r}: expected a percentage like 5% or a fraction like 0.05")
    value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    if not m.group(2) and value >= 1:
        raise ConfigError(f"{flag} {text!r}: a plain number is a fraction (0.05 = 5%); did you mean {text}%?")
    return value


def _pct(v: float | None, relative: bool) -> str:
    if v is None:
        return "–"
    return f"{v * 100:+.1f}%" if relative else f"{v * 100:+.2f} pp"


def _val(v: float | None) -> str:
    return "–" if v is None else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}")


def run_names(base: Any, cand: Any) -> tuple[str, str]:
    """What to call the two runs: their labels, or (when those are the same) their directories."""
    if base.label != cand.label:
        return str(base.label), str(cand.label)
    b, c = Path(str(base.path)), Path(str(cand.path))
    if b.name != c.name:
        return b.name, c.name
    return str(b), str(c)


def differences(base: RunDir, cand: RunDir) -> list[str]:
    """Setup fields that differ between the two runs (a comparison across setups is worth a warning)."""
    out = []
    for key in ("model", "hardware", "profile", "source"):
        a, b = getattr(base, key), getattr(cand, key)
        if a is None or b is None:  # not recorded (an imported run has no infermeter profile): unknown, not different
            continue
        if a != b:
            out.append(f"{key}: {a} vs {b}")
    ra, rb = base.summary.target_rate, cand.summary.target_rate
    if ra != rb:
        out.append(f"target rate: {rate(ra)} vs {rate(rb)}")  # never "23.06169428689927 vs None"
    return out


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        baseline: Annotated[str, typer.Argument(help="Result directory of the reference run.")],
        candidate: Annotated[str, typer.Argument(help="Result directory of the run to check.")],
        threshold: Annotated[str, typer.Option("--threshold", help="Relative change that counts as a regression (5% or 0.05).")] = "5%",
        error_threshold: Annotated[str, typer.Option("--error-threshold", help="Increase of the error rate, in percentage points, that counts as a regression.")] = "1%",
        min_effect: Annotated[str, typer.Option("--min-effect", help="Relative changes smaller than this are 'negligible', whatever their interval (1% or 0.01).")] = "1%",
        confidence: Annotated[float, typer.Option("--confidence", help="Confidence level of the intervals.")] = 0.95,
        resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = 0,
        metric: Annotated[Optional[list[str]], typer.Option("--metric", help="Metric to compare (repeatable; default: all).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """Compare two runs metric by metric with bootstrap confidence intervals; exit 1 on a regression."""
        from infermeter.analysis.compare import DEFAULT_METRICS, compare_runs, spec

        thr = parse_fraction(threshold, "--threshold")
        err_thr = parse_fraction(error_threshold, "--error-threshold")
        min_eff = parse_fraction(min_effect, "--min-effect")
        if not 0 < confidence < 1:
            raise ConfigError(f"--confidence {confidence}: must be between 0 and 1, e.g. 0.95")
        if resamples < 100:
            raise ConfigError(f"--resamples {resamples}: use at least 100")
        try:  # the metric catalog's names, or their aliases (ttft_p95, output_throughput)
            names = tuple(spec(m).name for m in metric) if metric else DEFAULT_METRICS
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        from infermeter.report.rundir import load_for_compare

        base_run, base = load_for_compare(baseline, "baseline")
        cand_run, cand = load_for_compare(candidate, "candidate")
        result = compare_runs(base, cand, base_duration_s=base_run.summary.duration_s,
                              cand_duration_s=cand_run.summary.duration_s, rng=np.random.default_rng(seed),
                              threshold=thr, error_threshold=err_thr, confidence=confidence, resamples=resamples,
                              metrics=names, min_effect=min_eff)
        warnings = [f"the runs differ in {d}" for d in differences(base_run, cand_run)]
        from infermeter.interop.definitions import definition_warnings, tool_of  # imported runs keep their tool's rules

        warnings += definition_warnings(tool_of(base_run.run), tool_of(cand_run.run), names)
        warnings += [f"{role} {r.label} is marked invalid: {'; '.join(r.summary.invalid_reasons)}"
                     for role, r in (("baseline", base_run), ("candidate", cand_run)) if not r.summary.valid]
        if json_out:
            print(json.dumps({
                "baseline": str(base_run.path), "candidate": str(cand_run.path), "threshold": thr,
                "error_threshold": err_thr, "min_effect": min_eff, "confidence": confidence, "resamples": resamples,
                "regressed": result.regressed, "warnings": warnings,
                "metrics": [{"metric": c.spec.name, "unit": c.spec.unit, "better": c.spec.better,
                             "baseline": c.baseline, "candidate": c.candidate,
                             "change": c.change, "change_kind": "relative" if c.relative else "absolute",
                             "ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict,
                             "n_baseline": c.n_baseline, "n_candidate": c.n_candidate} for c in result.changes],
            }, indent=2))
        else:
            console = SafeConsole()
            b_name, c_name = run_names(base_run, cand_run)
            table = make_table(f"{escape(c_name)} vs {escape(b_name)} (threshold {thr:.1%}, errors {err_thr * 100:g} pp, "
                               f"min effect {min_eff:.1%}, {confidence:.0%} CI)",
                               [("metric", "text"), ("baseline", "num"), ("candidate", "num"), ("change", "num"),
                                (f"{confidence:.0%} CI", "num"), ("verdict", "text")])
            for c in result.changes:
                ci = "–" if c.ci_low is None else f"[{_pct(c.ci_low, c.relative)}, {_pct(c.ci_high, c.relative)}]"
                table.add_row(safe_text(f"{c.spec.label} ({c.spec.unit})"), _val(c.baseline), _val(c.candidate),
                              _pct(c.change, c.relative), ci, f"[{_VERDICT_STYLE[c.verdict]}]{c.verdict}[/]" if
                              _VERDICT_STYLE[c.verdict] else c.verdict)
            console.print(Fit(table))
            for w in warnings:
                console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
            names_bad = ", ".join(c.spec.label for c in result.regressions)
            console.print(f"[bold red]REGRESSION[/]: {escape(names_bad)}" if result.regressed else "[green]OK[/]: no metric regressed beyond the threshold")
        if result.regressed:
            raise typer.Exit(1)
