"""What ``infermeter study`` prints: a live progress display while it runs, then the decision.

:func:`study_progress` is a context manager giving ``(lines, events)`` callbacks for
:func:`infermeter.study.runner.run_study`: step and cell lines scroll above a rich progress bar
that counts cells done of the total with the elapsed time and an ETA (on a terminal; elsewhere
only the lines are printed). :func:`print_result` prints the decision per profile, the claims,
the first findings and where the report is::

    with study_progress(Console(stderr=True)) as (lines, events):
        result = run_study(study, out, progress=lines, events=events)
    print_result(Console(), result)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SHOWN_FINDINGS = 8


@contextmanager
def study_progress(err: Any) -> Iterator[tuple[Any, Any]]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    def line(text: str) -> None:
        err.print(text, highlight=False, markup=False, soft_wrap=True)

    if not err.is_terminal:
        yield line, None
        return
    bar = Progress(TextColumn("cells"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.description}", markup=False), console=err,
                   transient=True)
    task = bar.add_task("", total=None)

    def event(e: Any) -> None:
        if e.kind == "cell":
            bar.update(task, total=e.total, completed=e.done, description=e.text.split("] ", 1)[-1])
        elif e.kind == "done":
            bar.update(task, total=e.total, completed=e.done)
        elif e.kind == "soak":
            bar.update(task, description="soak")

    def printed(text: str) -> None:
        bar.console.print(text, highlight=False, markup=False, soft_wrap=True)

    with bar:
        yield printed, event


def print_result(console: Any, result: Any) -> None:
    from infermeter.study.decision import decision_line

    console.print("[bold]Decision[/]")
    for profile in result.study.profiles:
        d = result.decisions.get(profile)
        if d is None:
            continue
        console.print(decision_line(d), highlight=False, markup=False, soft_wrap=True)
        b = d.best
        lines = []
        if b is not None:
            from infermeter.study.decisionview import _interval_text

            lines.append("interval: " + _interval_text(b))
        if d.soak is not None:
            lines.append(f"its soak {d.soak.text}")
        lines += [f"soak of {v.config} {v.text}" for v in d.other_soaks]
        if d.request_text:
            lines.append(d.request_text)
        if d.workload_text:
            lines.append(d.workload_text)
        if d.at_volume_text:
            lines.append(d.at_volume_text)
        if d.holds_text:
            lines.append(f"holds {d.holds_text}")
        lines += [f"fails the SLO: {x}" for x in d.failing] + [f"starved: {x}" for x in d.starved]
        lines += [f"unpriced: {x}" for x in d.flips] + [f"left out: {x}" for x in d.excluded]
        for line in lines:
            console.print("    " + line, highlight=False, markup=False, soft_wrap=True)
    if result.claims:
        console.print("[bold]Claims[/]")
        for c in result.claims:
            console.print(f"  {c.claim.text}: {c.sentence}", highlight=False, markup=False, soft_wrap=True)
    console.print("[bold]Findings[/] (ranked; all in the report)")
    for i, f in enumerate(result.findings[:SHOWN_FINDINGS], 1):
        console.print(f"{i}. {f.text}", highlight=False, markup=False, soft_wrap=True)
    files = result.files
    console.print(f"report: {files['html']}  (also {files['markdown'].name}, {files['json'].name}, "
                  f"{files['csv'].name}); {len(result.cells)} cells in {result.wall_s:.1f} s", highlight=False, markup=False)
