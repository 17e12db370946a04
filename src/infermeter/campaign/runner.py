"""``infermeter campaign FILE``: run the matrix, target by target, resumable at any point.

For each target with cells left: start it (engine) or wait for it (URL), then
run its cells in order — before each run reset the prefix cache where the
engine supports it, after it copy the run's slice of the server log to
``server.log`` in the run directory — and stop it. State goes to
``campaign-state.json`` before and after every run, so a campaign stopped by
Ctrl-C, a crash or a reboot continues where it stopped when started again with
the same file and directory (``--restart`` starts over). At the end (and after
every target) ``campaign.json`` and ``campaign.md`` report each cell's spread
over the repeats::

    runner = CampaignRunner(load_campaign("campaign.yaml"), Path("results/c1"), notify=print)
    report = runner.run()            # dict of campaign.json
    runner.stop()                    # from a signal handler: finish the current run cleanly, then stop

Layout: ``runs/<target>/<profile>/<load>/r<k>/`` (each a run directory, sweeps
with ``steps/``), ``logs/<target>.log`` (whole server logs).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infermeter.campaign.spec import Campaign, Cell
from infermeter.campaign.spread import campaign_report, cell_metrics, report_markdown
from infermeter.campaign.state import CampaignState, set_aside
from infermeter.engines.emulator.process import MARKER as EMULATOR_MARKER
from infermeter.engines.target import LiveTarget, Target, running, stop_leftover
from infermeter.errors import UserError
from infermeter.measure import Measurement
from infermeter.records import store

# what a leftover engine's command line holds, so a resumed campaign stops only engines it started
MARKERS = {"emulator": EMULATOR_MARKER, "vllm-cpu": "vllm"}


class CampaignRunner:
    def __init__(self, campaign: Campaign, out_dir: Path, notify: Callable[[str], None] = lambda s: None,
                 restart: bool = False) -> None:
        self.campaign = campaign
        self.out = Path(out_dir)
        self.notify = notify
        self.restart = restart
        self.stopping = False
        self.signal: int | None = None  # the signal that stopped it (SIGINT, SIGTERM)
        self._current: Measurement | None = None
        self._handler: Any = None

    def stop(self, signum: int | None = None) -> None:
        self.stopping = True
        self.signal = self.signal or signum
        if self._current is not None:
            self._current.stop()

    def run(self) -> dict[str, Any]:
        state = CampaignState.open(self.out, self.campaign, restart=self.restart)
        for name, eng in state.engines().items():
            if stop_leftover(eng.get("pid"), eng.get("marker") or "infermeter"):
                self.notify(f"stopped engine {name} (pid {eng['pid']}) left running by an interrupted campaign")
            state.engine(name, None)
        total = len(self.campaign.cells())
        left = len(state.todo(self.campaign.cells()))
        if left < total:
            self.notify(f"resuming campaign {self.campaign.name}: {total - left} of {total} runs already done")
        restore = self._trap_signals()
        try:
            for target in self.campaign.targets:
                todo = state.todo(self.campaign.cells_by_target[target.name])
                if not todo or self.stopping:
                    continue
                self._run_target(target, todo, state)
                self._write_report(state)
        except KeyboardInterrupt:  # between runs (an engine starting): nothing to finish, stop now
            self.stopping = True
        except RuntimeError as exc:
            # Python 3.11 wraps what a class body's __set_name__ raises in RuntimeError: a Ctrl-C landing while a module
            # is imported lazily between runs (a workload's dataclasses) arrives so; it is the same interruption
            if not isinstance(exc.__cause__, KeyboardInterrupt):
                raise
            self.stopping = True
        finally:
            restore()
        report = self._write_report(state)
        if self.stopping:
            report["interrupted"] = True
        return report

    def _trap_signals(self) -> Callable[[], None]:
        """SIGINT/SIGTERM stop the campaign: during a run, after that run (``_measure``); between runs
        (an engine starting, a health wait), at once. Returns what puts the old handlers back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: Any) -> None:
            self.stop(signum)
            if self._current is None:
                raise KeyboardInterrupt

        for sig in old:
            signal.signal(sig, handler)
        self._handler = handler

        def restore() -> None:
            for sig, h in old.items():
                signal.signal(sig, h)
            self._handler = None

        return restore

    def _run_target(self, target: Target, cells: list[Cell], state: CampaignState) -> None:
        what = target.url or f"{target.engine} {' '.join(target.args)}".strip()
        self.notify(f"target {target.name}: {what} ({len(cells)} runs)")

        def on_pid(pid: int | None) -> None:
            state.engine(target.name, pid, MARKERS.get(target.engine or ""))

        try:
            with running(target, self.out / "logs" / f"{target.name}.log", on_pid=on_pid,
                         notify=lambda s: self.notify(f"  {target.name}: {s}")) as live:
                state.launched(target.name, live.launch)
                if live.launch.get("dtype"):
                    self.notify(f"  {target.name}: serves dtype {live.launch['dtype']}")
                for cell in cells:
                    if self.stopping:
                        break
                    self._run_cell(cell, live, state)
        finally:
            state.engine(target.name, None)

    def _run_cell(self, cell: Cell, live: LiveTarget, state: CampaignState) -> None:
        rel = Path("runs") / cell.target.name / cell.profile / cell.load / f"r{cell.repeat}"
        run_dir = self.out / rel
        aside = set_aside(run_dir)
        if aside is not None:
            self.notify(f"{cell.key}: an unfinished attempt was kept as {aside.name}")
        state.set(cell.key, status="running", run_dir=str(rel), error=None)
        reset = live.reset_prefix_cache()
        log0 = live.log_offset()
        cfg = cell.config.model_copy(update={"url": live.base_url, "out": str(run_dir),
                                             "label": f"{self.campaign.name}/{cell.key}"})
        self.notify(f"{cell.key}: running ({cfg.load or 'single'}; prefix cache {reset})")
        try:
            m = Measurement(cfg, notify=lambda s: self.notify(f"  {s}"), launch=live.launch)
            self._current = m
            res = asyncio.run(self._measure(m))
        except UserError as exc:
            state.set(cell.key, status="failed", error=str(exc), prefix_cache=reset)
            self.notify(f"{cell.key}: failed: {exc}")
            return
        finally:
            self._current = None
            if self._handler is not None:  # asyncio.run put the default handlers back when its loop closed
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, self._handler)
        log_bytes = live.copy_log(log0, run_dir / "server.log") if live.log_path else 0
        status = "interrupted" if m.stopped else "done"
        state.set(cell.key, status=status, prefix_cache=reset, server_log_bytes=log_bytes,
                  metrics=cell_metrics(res.summary))
        self.notify(f"{cell.key}: {status}")

    async def _measure(self, m: Measurement) -> Any:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - not the main thread
                pass
        if self.stopping:
            m.stop()
        return await m.run()

    def _write_report(self, state: CampaignState) -> dict[str, Any]:
        report = campaign_report(self.campaign, state.data["cells"], state.launches())
        report["state"] = str(state.path)
        store.write_json(self.out / "campaign.json", report)
        (self.out / "campaign.md").write_text(report_markdown(report))
        return report
