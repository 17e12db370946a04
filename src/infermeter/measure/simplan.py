"""``infermeter simulate``'s plan: a RunConfig's flags -> twin, shape, workload, source and run.json.

The same workload and load flags as ``infermeter run`` (one ``RunConfig``), simulated in virtual
time and written as the same result files; used by the CLI, the study and the benchmarks::

    plan = SimPlan(RunConfig(model="llama-3.1-8b", rate=10, requests=500, out="results/sim"), gpu="h100-sxm")
    plan.run().summary["output_token_throughput"]
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError

TOKEN_TIMES_AUTO_LIMIT = 100_000  # records; above it per-token times are not stored
CHILD_FEEDER_MIN = 200_000  # expected requests from which a child process makes the request stream


class SimPlan:
    """Flags -> twin, shape, workload, source and run.json header (testable without the CLI)."""

    def __init__(self, cfg: Any, *, gpu: str, tp: int | None = None, pp: int | None = None, dtype: str = "bf16",
                 kv_dtype: str | None = None, gpu_memory_utilization: float = 0.9,
                 engine: dict[str, Any] | None = None, token_times: str = "auto") -> None:
        from infermeter.load.shapes import ConstantConcurrency, TraceReplay
        from infermeter.measure import build_shape
        from infermeter.twin.deploy import build_twin, engine_defaults, hardware_config
        from infermeter.workload import build_workload

        self.cfg = cfg
        self.shape = build_shape(cfg)
        self.twin = build_twin(cfg.model, hardware_config(gpu, tp, pp), dtype=dtype, kv_dtype=kv_dtype,
                               engine=engine_defaults(**(engine or {})),
                               gpu_memory_utilization=gpu_memory_utilization)
        self.workload = build_workload(**self.workload_args())
        self.closed = isinstance(self.shape, ConstantConcurrency)
        self.replay = isinstance(self.shape, TraceReplay)
        self.child_feeder = True
        expected = self._expected_requests()
        self.token_times = token_times == "on" or (
            token_times == "auto" and expected is not None and expected <= TOKEN_TIMES_AUTO_LIMIT)

    def _expected_requests(self) -> float | None:
        cfg = self.cfg
        if cfg.requests is not None:
            return cfg.requests + cfg.warmup
        rate = getattr(self.shape, "rate_per_s", None) or getattr(self.shape, "end_rate_per_s", None)
        if rate and cfg.duration_s:
            return rate * cfg.duration_s
        return None

    def workload_args(self) -> dict[str, Any]:
        from infermeter.measure.config import workload_args

        return workload_args(self.cfg)

    def source(self) -> Any:
        """The arrival source; huge runs make their requests in a child process (measure.feeder)."""
        import numpy as np

        from infermeter.measure.feeder import ChildStream, FeedSpec, local_stream
        from infermeter.twin.hashing import calibrate_chars_per_block
        from infermeter.twin.sources import ClosedLoopSource, OpenLoopSource

        cfg = self.cfg
        cpb = calibrate_chars_per_block(iter(self.workload.requests()))
        self.chars_per_block = cpb
        expected = self._expected_requests()
        if self.child_feeder and (expected is None or expected > CHILD_FEEDER_MIN):
            limit = None if cfg.requests is None else cfg.requests + cfg.warmup
            reqs: Any = ChildStream(FeedSpec(workload=self.workload_args(), shape=None if self.closed else self.shape,
                                             seed=cfg.seed, replay=self.replay, time_scale=cfg.time_scale,
                                             limit=limit, duration_s=None if self.closed else cfg.duration_s,
                                             chars_per_block=cpb))
        else:
            offsets = None if (self.closed or self.replay) else self.shape.arrivals(np.random.default_rng(cfg.seed))
            reqs = local_stream(offsets, iter(self.workload.requests()), replay=self.replay,
                                time_scale=cfg.time_scale, chars_per_block=cpb)
        delay = self.twin.request_overhead_s
        if self.closed:
            return ClosedLoopSource(self.shape.concurrency, reqs, requests=cfg.requests, duration_s=cfg.duration_s,
                                    warmup=cfg.warmup, delay=delay)
        return OpenLoopSource(reqs, requests=cfg.requests, duration_s=cfg.duration_s, warmup=cfg.warmup,
                              max_concurrency=cfg.max_concurrency, delay=delay)

    def run_header(self, label: str) -> dict[str, Any]:
        from infermeter import __version__
        from infermeter.measure import host_info

        cfg = self.cfg
        load_desc: dict[str, Any] = {
            **self.shape.model_dump(mode="json"), "describe": self.shape.describe(), "open_loop": not self.closed,
            "target_rate": getattr(self.shape, "rate_per_s", None),
            "limits": {"requests": cfg.requests, "duration_s": cfg.duration_s, "warmup": cfg.warmup,
                       "max_concurrency": cfg.max_concurrency}}
        wl = self.workload.describe()
        return {
            "schema_version": 1, "tool": "infermeter", "version": __version__, "source": "simulated",
            "label": label, "started_at": datetime.now(timezone.utc).isoformat(), "seed": cfg.seed,
            "model": self.twin.served_model_name, "hardware": self.twin.hardware, "profile": wl.get("profile"),
            "target": {"url": None, "embedded": False, "engine": "infermeter-twin", "emulated": self.twin.describe()},
            "load": load_desc, "workload": wl, "host": host_info(), "slo": cfg.slo,
            "config": {**cfg.public(), "simulate": {
                "token_times": self.token_times,
                "prefix_key_chars_per_block": getattr(self, "chars_per_block", None),
                **self.twin.describe()}},
            "argv": sys.argv[1:],
        }

    def run(self, progress: Any = None) -> Any:
        from infermeter.measure import default_out_dir
        from infermeter.measure.simulate import simulate
        from infermeter.records import store

        cfg = self.cfg
        kind = self.shape.describe().split(",")[0].replace(" ", "-")
        label = cfg.label or f"sim-{self.twin.model}-{self.twin.hardware}-{kind}"
        out = Path(cfg.out) if cfg.out else default_out_dir(label)
        if (out / store.SUMMARY).exists():
            raise ConfigError(f"--out {out}: already holds a run; choose another directory")
        return simulate(self.twin, self.source(), out_dir=out, run=self.run_header(label), warmup=cfg.warmup,
                        token_times=self.token_times, on_progress=progress)
