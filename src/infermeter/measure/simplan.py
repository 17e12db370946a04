"""``infermeter simulate``'s plan: a RunConfig's flags -> twin, shape, workload, source and run.json.

The same workload and load flags as ``infermeter run`` (one ``RunConfig``), simulated in virtual
time and written as the same result files; used by the CLI, the study and the benchmarks::

    plan = SimPlan(RunConfig(rate=10, requests=500, out="results/sim"), TwinSpec(model="llama-3.1-8b", gpu="h100-sxm"))
    plan.run().summary["output_token_throughput"]

The twin comes from a :class:`~infermeter.twin.spec.TwinSpec` (the deployment, declared once for
``simulate``, ``emulate`` and studies); ``run.json`` from the same header builder as a measured
run (:func:`infermeter.measure.header.build_header`), with ``source: "simulated"``.

Where it runs: one process (any load, any router), or -- ``RunConfig.workers > 1`` or
``RunConfig.ray`` -- the fleet's replicas split over worker processes or Ray actors
(:mod:`infermeter.measure.fleet`), which needs an open loop without ``--max-concurrency`` and a
router decided from the arrival stream (``round-robin`` or ``session``). Both give the same
records and the same summary for the same seed. A run with ``--duration`` ends ``grace_s``
after it, as a measured run does: what is still in flight is cancelled; and a request waits for
its first token (and its end) no longer than the client's ``--first-token-timeout`` (``--timeout``).
With ``RunConfig.checkpoint_s`` a one-process run saves itself that often; an interrupted run goes
on from its last checkpoint (``SimPlan.resume(dir)``, ``simulate --resume DIR``) to the same result.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from infermeter.errors import ConfigError
from infermeter.measure.config import RunConfig, build_shape, workload_args
from infermeter.measure.feeder import (
    ChildStream,
    FeedSpec,
    local_stream,
    needs_keys,
    sim_requests,
    timed_specs,
    workload_specs,
)
from infermeter.measure.header import build_header, default_out_dir
from infermeter.measure.simulate import SimulationResult, simulate
from infermeter.measure.thinking import Thinking
from infermeter.records import store
from infermeter.records.outputs import claim_run_dir
from infermeter.twin.deploy import Twin
from infermeter.twin.hashing import KeyMaker, calibrate_chars_per_block
from infermeter.twin.loop import ArrivalSource
from infermeter.twin.sources import ClosedLoopSource, OpenLoopSource
from infermeter.twin.spec import TwinSpec
from infermeter.workload import build_workload

TOKEN_TIMES_AUTO_LIMIT = 100_000  # records; above it per-token times are not stored
CHILD_FEEDER_MIN = 200_000  # expected requests from which a child process makes the request stream


class SimPlan:
    """A RunConfig and a TwinSpec -> twin, shape, workload, source and run.json (testable without the CLI)."""

    def __init__(self, cfg: RunConfig, spec: TwinSpec | None = None, *, token_times: str = "auto",
                 twin: Twin | None = None, reasoning_tokens: str | None = None) -> None:
        self.cfg = cfg
        # a reasoning model's thinking tokens per request (measure.thinking; ConfigError names the flag)
        self.reasoning_tokens = reasoning_tokens
        self.thinking = Thinking.parse(reasoning_tokens, seed=cfg.seed)
        self.spec = spec or TwinSpec(model=cfg.model or "llama-3.1-8b")
        self.shape = build_shape(cfg)
        self._given_twin = twin
        self.twin = twin if twin is not None else self.spec.twin()
        self.workload = build_workload(**workload_args(cfg))
        self.child_feeder = True
        # prefix-cache keys (and so prompt text) only for a workload whose prompts can share blocks (feeder)
        self.keys = needs_keys(self.workload)
        self.chars_per_block: int | None = None
        expected = self._expected_requests()
        self.token_times = token_times == "on" or (
            token_times == "auto" and expected is not None and expected <= TOKEN_TIMES_AUTO_LIMIT)
        self.check_fleet()

    @property
    def fleet(self) -> bool:
        """True when the replicas are split over worker processes or Ray actors (one replica: never)."""
        return (self.cfg.workers > 1 and self.twin.replicas > 1) or self.cfg.ray is not None

    @property
    def cancel_at(self) -> float:
        """Virtual time at which what is still in flight is cancelled (``--duration`` + ``--grace``)."""
        cfg = self.cfg
        return math.inf if cfg.duration_s is None else cfg.duration_s + cfg.grace_s

    @property
    def timeouts(self) -> tuple[float | None, float | None]:
        """The clients' (first-token, total) timeouts: a request waiting longer fails as it would measured."""
        return self.cfg.first_token_timeout_s, self.cfg.timeout_s

    def check_fleet(self) -> None:
        """A split fleet needs routing and sends decided from the arrival stream alone (ConfigError names why)."""
        if not self.fleet:
            return
        flag = "--ray" if self.cfg.ray else f"--workers {self.cfg.workers}"
        if self.thinking is not None:
            raise ConfigError(f"{flag}: --reasoning-tokens runs in one process for now; drop --workers/--ray")
        if self.twin.router == "least-outstanding":
            raise ConfigError(f"{flag}: --router least-outstanding depends on every replica's state at every "
                              "arrival, so it runs in one process; use --router round-robin or session")
        if not self.shape.open_loop:
            raise ConfigError(f"{flag}: a closed loop sends when answers come back, which couples the replicas; "
                              "it runs in one process")
        if self.cfg.max_concurrency is not None:
            raise ConfigError(f"{flag}: --max-concurrency couples the replicas (sends wait for any answer); "
                              "it runs in one process")
        if self.cfg.checkpoint_s is not None:
            raise ConfigError(f"{flag}: --checkpoint (a resumable run) needs one process for now; "
                              "drop --workers/--ray or --checkpoint")

    def _expected_requests(self) -> float | None:
        cfg = self.cfg
        if cfg.requests is not None:
            return cfg.requests + cfg.warmup
        return self.shape.expected_requests(cfg.duration_s)

    def calibrate(self) -> int:
        """Characters per KV block of this workload's text (the prefix-cache keys' chunk size)."""
        if self.chars_per_block is None:
            self.chars_per_block = calibrate_chars_per_block(iter(self.workload.requests()),
                                                             block_size=self.twin.block_size)
        return self.chars_per_block

    def feed_spec(self, *, skip: int = 0) -> FeedSpec:
        cfg = self.cfg
        limit = None if cfg.requests is None else cfg.requests + cfg.warmup
        return FeedSpec(workload=workload_args(cfg), shape=self.shape, seed=cfg.seed, limit=limit,
                        duration_s=cfg.duration_s if self.shape.open_loop else None,
                        chars_per_block=self.calibrate(), block_size=self.twin.block_size, skip=skip,
                        keys=self.keys)

    def stream(self, skip: int = 0) -> Any:
        """The request stream from request ``skip`` on; huge runs make it in a child process (measure.feeder)."""
        cfg = self.cfg
        cpb = self.calibrate()
        expected = self._expected_requests()
        if self.child_feeder and (expected is None or expected > CHILD_FEEDER_MIN):
            return ChildStream(self.feed_spec(skip=skip))
        specs = workload_specs(self.workload, self.keys)
        if not skip:
            return local_stream(self.shape, specs, seed=cfg.seed, keys=self.keys, chars_per_block=cpb,
                                block_size=self.twin.block_size)
        timed = itertools.islice(timed_specs(self.shape, specs, cfg.seed), skip, None)
        return sim_requests(timed, KeyMaker(cpb, self.twin.block_size) if self.keys else None, first_rid=skip)

    def source(self) -> ArrivalSource:
        """The arrival source (the load's stop rules over :meth:`stream`)."""
        cfg = self.cfg
        reqs = self.stream()
        streams = self.shape.streams
        try:  # a source reads its first requests at once: a stream in a child process must not outlive a failure
            if streams is not None:
                return ClosedLoopSource(streams, reqs, requests=cfg.requests, duration_s=cfg.duration_s,
                                        warmup=cfg.warmup)
            return OpenLoopSource(reqs, requests=cfg.requests, duration_s=cfg.duration_s, warmup=cfg.warmup,
                                  max_concurrency=cfg.max_concurrency)
        except BaseException:
            close = getattr(reqs, "close", None)
            if close is not None:
                close()
            raise

    def run_header(self, label: str) -> dict[str, Any]:
        emulated = self.twin.describe()
        return build_header(self.cfg, self.shape, self.workload.describe(), source="simulated", label=label,
                            model=self.twin.served_model_name, hardware=self.twin.hardware,
                            target={"url": None, "embedded": False, "engine": "infermeter-twin", "emulated": emulated},
                            config_extra={"simulate": {"token_times": self.token_times,
                                                       **({"reasoning_tokens": self.thinking.describe()}
                                                          if self.thinking is not None else {}),
                                                       **({"speculative_prompts": self.speculative_prompts()}
                                                          if self.twin.speculative is not None else {}),
                                                       "prefix_key_chars_per_block": self.calibrate(),
                                                       "prefix_keys": "prompt text" if self.keys else
                                                       "none: no prompt shares a cache block with another",
                                                       **emulated}})

    def speculative_prompts(self) -> str:
        """What the prompts of a speculative-decoding run are (acceptance depends on text; random tokens misstate
        it)."""
        cfg = self.cfg
        if cfg.profile is None and cfg.dataset is None:
            what = "natural prose text (the synthetic profile's default, not random tokens)"
        else:
            chosen = f"--dataset {cfg.dataset}" if cfg.dataset else f"--profile {cfg.profile}"
            what = f"the chosen workload ({chosen})"
        return (f"{what}; the twin draws acceptance at the --speculative rate whatever the text, so give the rate "
                f"measured on traffic like yours (server_metrics.spec_decode.acceptance_rate)")

    def eta(self, say: Any) -> Any:
        """A progress callback printing the pace and the time left (:class:`~infermeter.measure.eta.Eta`)."""
        from infermeter.measure.eta import Eta

        cfg = self.cfg
        return Eta(say, virtual_s=cfg.duration_s if cfg.requests is None else None,
                   requests=self._expected_requests() if cfg.requests is not None else None)

    def out_dir(self) -> tuple[Path, str]:
        cfg = self.cfg
        kind = self.shape.describe().split(",")[0].replace(" ", "-")
        label = cfg.label or f"sim-{self.twin.model}-{self.twin.hardware}-{kind}"
        return (Path(cfg.out) if cfg.out else default_out_dir(label)), label

    def run(self, progress: Any = None, *, resume: dict[str, Any] | None = None) -> SimulationResult:
        """Simulate and write the run directory; ``resume``: a checkpoint of this plan to go on from."""
        out, label = self.out_dir()
        if resume is not None:
            return self._run(out, label, progress, resume)
        # writable, and one simulation per --out at a time (a default folder taken: the next free name)
        with claim_run_dir(out, files=(store.SUMMARY,), fresh=not self.cfg.out) as claimed:
            return self._run(claimed, label, progress, resume)

    def _run(self, out: Path, label: str, progress: Any, resume: dict[str, Any] | None) -> SimulationResult:
        cfg = self.cfg
        if self.fleet:
            from infermeter.measure.fleet import run_fleet

            return run_fleet(self, out, self.run_header(label), progress=progress)
        header = resume["run"] if resume is not None else self.run_header(label)
        extra = {"cfg": cfg, "spec": self.spec, "token_times": self.token_times, "run": header,
                 "twin": self._given_twin, "reasoning_tokens": self.reasoning_tokens}
        if resume is not None:  # (the source last: simulate() closes it, and its stream, however the run ends)
            source = resume["source"]
            source.attach(self.stream(skip=source.consumed))
        else:
            source = self.source()
        return simulate(self.twin, source, out_dir=out, run=header, warmup=cfg.warmup,
                        token_times=self.token_times, on_progress=progress, cancel_at=self.cancel_at,
                        timeouts=self.timeouts, checkpoint_s=cfg.checkpoint_s, checkpoint_extra=extra, resume=resume,
                        thinking=self.thinking)

    @classmethod
    def resume(cls, out_dir: Path) -> tuple[SimPlan, dict[str, Any]]:
        """The plan of an interrupted run in ``out_dir`` and its last checkpoint (``plan.run(resume=state)``)."""
        from infermeter.measure.simulate import load_checkpoint

        state = load_checkpoint(Path(out_dir))
        cfg = state["cfg"].model_copy(update={"out": str(out_dir)})
        plan = cls(cfg, state["spec"], token_times="on" if state["token_times"] else "off", twin=state["twin"],
                   reasoning_tokens=state.get("reasoning_tokens"))
        return plan, state
