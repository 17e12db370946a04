"""``simulate --disaggregate``: a workload through a prefill pool and a decode pool, written as any simulated run.

Promises: :class:`DisaggPlan` is a :class:`~infermeter.measure.simplan.SimPlan` whose deployment is a
:class:`~infermeter.twin.disagg.DisaggTwin` (both pools built from the same ``TwinSpec`` knobs, each on its
own configuration); :func:`simulate_disagg` runs it in one process and writes ``requests.parquet``,
``run.json`` and ``summary.json`` as :func:`~infermeter.measure.simulate.simulate` does, plus
``kv_transfer_ms`` (a distribution like ``ttft_ms``) and ``disaggregation`` (the link, and per pool its
instances, queue, KV use, busy fraction and token counters: ``server_metrics`` of that pool alone)::

    plan = DisaggPlan(RunConfig(rate=2, requests=200, input_tokens="6000", output_tokens="300"),
                      TwinSpec(model="llama-3.1-70b"), "prefill=2xh100-sxm:tp2,decode=2xh100-sxm:tp2")
    plan.run().summary["kv_transfer_ms"]["p99"]

``server_metrics`` sums both pools (as a scrape of every instance would). Not here: worker processes /
Ray, checkpoints, speculative decoding, serial API-server work (``frontend_service_s``) and the 80 %
``prediction_intervals`` (the uncertainty tables calibrate aggregated deployments only).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from infermeter.analysis.accumulator import EXACT_LIMIT, exact_distribution
from infermeter.errors import ConfigError
from infermeter.measure import recorder
from infermeter.measure.config import RunConfig
from infermeter.measure.recorder import WindowSink
from infermeter.measure.simplan import SimPlan
from infermeter.measure.simulate import (
    WINDOW,
    SimulationResult,
    engine_stats,
    finish_run,
    gc_paused,
    open_writer,
    server_metrics,
)
from infermeter.twin.disagg import DisaggLoop, DisaggSpec, DisaggTwin, disagg_twin
from infermeter.twin.loop import ArrivalSource, LoopStats, VirtualClock
from infermeter.twin.series import sum_series
from infermeter.twin.spec import TwinSpec


class DisaggPlan(SimPlan):
    """A SimPlan on a disaggregated deployment (module docstring)."""

    def __init__(self, cfg: RunConfig, spec: TwinSpec | None, disaggregate: str | DisaggSpec, *,
                 token_times: str = "auto") -> None:
        spec = spec or TwinSpec(model=cfg.model or "llama-3.1-8b")
        self.dtwin = disagg_twin(spec, disaggregate)
        super().__init__(cfg, spec, token_times=token_times, twin=self.dtwin.prefill)

    @property
    def fleet(self) -> bool:
        return False

    def check_fleet(self) -> None:
        cfg = self.cfg
        if cfg.workers > 1 or cfg.ray is not None:
            raise ConfigError("--disaggregate runs in one process (its routers read every instance's state); "
                              "drop --workers/--ray")
        if cfg.checkpoint_s is not None:
            raise ConfigError("--disaggregate: --checkpoint is not supported for disaggregated runs; drop it")
        if self.dtwin.prefill.config.frontend_service_s:
            raise ConfigError("--disaggregate: --frontend-service-s (serial API-server work) is not modelled for "
                              "disaggregated runs; drop it")

    def run_header(self, label: str) -> dict[str, Any]:
        head = super().run_header(label)
        emulated = self.dtwin.describe()
        head["target"] = {**head.get("target", {}), "emulated": emulated}
        head["hardware"] = emulated["hardware"]
        cfgx = head.get("config") or {}
        if isinstance(cfgx.get("simulate"), dict):
            cfgx["simulate"] = {**cfgx["simulate"], "disaggregate": self.dtwin.spec.text}
        return head

    def out_dir(self) -> tuple[Path, str]:
        cfg = self.cfg
        dt = self.dtwin
        label = cfg.label or f"sim-{dt.prefill.model}-disagg-{dt.prefill.hardware}-{dt.decode.hardware}"
        if cfg.out:
            return Path(cfg.out), label
        from infermeter.measure.header import default_out_dir

        return default_out_dir(label.replace(":", "-")), label

    def _run(self, out: Path, label: str, progress: Any, resume: dict[str, Any] | None) -> SimulationResult:
        cfg = self.cfg
        return simulate_disagg(self.dtwin, self.source(), out_dir=out, run=self.run_header(label), warmup=cfg.warmup,
                               token_times=self.token_times, cancel_at=self.cancel_at, timeouts=self.timeouts,
                               on_progress=progress)


@recorder.malloc_pool()
def simulate_disagg(dt: DisaggTwin, source: ArrivalSource, *, out_dir: Path, run: dict[str, Any], warmup: int = 0,
                    token_times: bool = False, exact_summary_limit: int = EXACT_LIMIT, cancel_at: float = math.inf,
                    timeouts: tuple[float | None, float | None] = (None, None),
                    on_progress: Any = None) -> SimulationResult:
    """Run ``source`` through ``dt`` in this process; write the run directory (module docstring)."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    loop = DisaggLoop(dt, keep_token_times=token_times, warmup=warmup)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        writer = open_writer(out_dir, run, token_times, exact_summary_limit)
        sink = WindowSink(warmup=warmup, token_times=token_times)
        clock = VirtualClock()
        seen = [0, 0]

        def on_done(r: Any) -> None:
            sink.add(r)
            seen[1] += 1
            if seen[1] >= WINDOW:
                flush()

        def flush() -> None:
            table = sink.window()
            seen[1] = 0
            if table is not None:
                seen[0] += table.num_rows
                writer.add(table)
                if on_progress is not None:
                    on_progress(clock.now, seen[0])

        with gc_paused():
            loop.run(source, on_done, clock, cancel_at=cancel_at, timeouts=timeouts)
            flush()
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    stats = [engine_stats(e) for e in loop.engines]
    npre = len(loop.prefill)
    st = loop.stats
    extra = {"kv_transfer_ms": exact_distribution(loop.pool.transfer_ms).model_dump(mode="json"),
             "disaggregation": disaggregation_block(dt, loop, stats, npre, writer.intended_span, st)}
    return finish_run(out_dir, run, writer, stats, [e.waiting_series.state() for e in loop.engines], st, t0,
                      runtime={"disaggregated": True}, summary_extra=extra)


def disaggregation_block(dt: DisaggTwin, loop: DisaggLoop, stats: list[dict[str, Any]], npre: int,
                         arrivals: Any, st: LoopStats) -> dict[str, Any]:
    """``summary.json`` ``disaggregation``: the layout, the link and each pool's own server metrics."""
    def pool(name: str, lo: int, hi: int, twin: Any) -> dict[str, Any]:
        engines = loop.engines[lo:hi]
        ls = LoopStats(end=st.end, in_system_s=sum(e.in_system_integral for e in engines))
        m = server_metrics(stats[lo:hi], ls, sum_series([e.waiting_series.state() for e in engines]), arrivals)
        m.pop("engine", None)
        m.pop("prefix_cache_hit_rate_source", None)
        return {"config": twin.hardware, "instances": twin.replicas, "gpus": twin.replicas * int(
            twin.details.get("tp", 1)) * twin.pp, **m}

    ps = loop.pool
    return {"layout": dt.spec.text, "route": dt.spec.route, "pipelining": dt.spec.pipelining,
            "link": dt.link.describe(), "kv_bytes_per_token": dt.kv_bytes_per_token,
            "transfers": ps.transfers, "transfer_gb": ps.transfer_bytes / 1e9, "in_transfer_max": ps.in_transfer_max,
            "prefill": pool("prefill", 0, npre, dt.prefill),
            "decode": pool("decode", npre, len(loop.engines), dt.decode)}
