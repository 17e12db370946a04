"""Where a study cell's steps run: the twin (simulated) or a live endpoint (measured).

:func:`open_target` is a context manager that gives a :class:`Target` for one configuration:
the twin when the configuration names no ``target``/``engine``, the URL when it names one,
or an engine it launches on 127.0.0.1 (and stops afterwards); a configuration with ``target: {runs: ...}``
has no target (:mod:`infermeter.study.imported` makes its cells from those runs)::

    with open_target(study, conf) as target:
        target.source                       # "simulated" | "measured"
        summary = target.run_step(spec, "chat", out_dir=Path("cells/h100-sxm/chat/steps/0"),
                                  label="h100-sxm · chat · step 0")

Both write the same run directory (``run.json``, ``requests.parquet``, ``summary.json``): a
simulated step through the twin's offline simulator in virtual time, a measured one through
:class:`infermeter.measure.Measurement`. The study's ``profile_overrides`` and seed apply to
both, so every configuration sees the same request stream per profile (a measured run takes
only the overrides ``infermeter run``'s ``--input-tokens`` / ``--output-tokens`` can express;
:func:`override_flags` refuses the others before anything runs).
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from infermeter.analysis.results import Summary
from infermeter.engines.target import Target as EngineTarget
from infermeter.engines.target import running
from infermeter.errors import ConfigError
from infermeter.study.config import Configuration, StudyConfig
from infermeter.study.sweep import StepSpec
from infermeter.twin.disagg import DisaggTwin
from infermeter.twin.spec import TwinSpec

MEASURED_DEFAULT_CONCURRENCY = 16


class Target(Protocol):
    source: str

    def default_concurrency(self) -> int: ...

    def describe(self) -> dict[str, Any]: ...

    def run_step(self, spec: StepSpec, profile: str, *, out_dir: Path, label: str) -> Summary: ...


def _load_args(study: StudyConfig, conf: Configuration, spec: StepSpec, profile: str, out_dir: Path,
               label: str) -> dict[str, Any]:
    """RunConfig fields shared by simulated and measured steps."""
    plan = study.load_for(conf)
    args: dict[str, Any] = {"requests": spec.requests, "warmup": spec.warmup, "seed": study.seed,
                            "profile": profile, "slo": study.slo.limits, "out": str(out_dir), "label": label}
    if spec.kind == "rate":
        from infermeter.load.shapes import ConstantArrivalRate

        exact = spec.requests if plan.exact_rate and spec.requests >= 2 else None
        args["shape"] = ConstantArrivalRate(rate_per_s=spec.rate, arrival=plan.arrival, exact_over=exact,
                                            exact_after=spec.warmup if exact else 0)
    else:
        args["concurrency"] = spec.concurrency
    return args


class DoesNotFit(ConfigError):
    """The configuration cannot hold the model (weights, or not one KV block left): a row, not a crash."""


def twin_spec(study: StudyConfig, conf: Configuration) -> TwinSpec:
    """The twin's deployment of a simulated configuration: its model, dtype and engine knobs."""
    return study.sim_for(conf).spec(study.model_for(conf), conf.config)


def _calibrated(study: StudyConfig, conf: Configuration, calibration: Path) -> Any:
    """The twin of a configuration with a ``calibration`` file (``infermeter calibrate``'s): its fitted step time,
    scheduler and KV capacity, with the study's engine knobs on top."""
    from infermeter.twin.calibration import DeploymentCalibration, calibrated_twin

    sim = study.sim_for(conf)
    cal = DeploymentCalibration.read(Path(calibration))
    return calibrated_twin(cal, served_model_name=study.model_for(conf), max_num_seqs=sim.max_num_seqs,
                           max_num_batched_tokens=sim.max_num_batched_tokens,
                           enable_prefix_caching=sim.enable_prefix_caching)


def _disaggregated(spec: TwinSpec, conf: Configuration) -> DisaggTwin:
    """A configuration's ``disaggregate`` layout, which must use exactly its GPUs (so its price is theirs)."""
    from infermeter.perfmodel.configspec import parse_config
    from infermeter.twin.disagg import disagg_twin, parse_disaggregate

    ds = parse_disaggregate(str(conf.disaggregate), f"configuration {conf.label}: disaggregate")
    have, p, d = parse_config(conf.config), parse_config(ds.prefill), parse_config(ds.decode)
    if p.count + d.count != have.count or {p.hardware, d.hardware} != {have.hardware}:
        raise ConfigError(f"configuration {conf.label}: disaggregate {ds.text} uses {p.count} + {d.count} GPUs of "
                          f"{p.hardware}/{d.hardware}, not the configuration's {have.label} (its price)")
    return disagg_twin(spec, ds)


class SimulatedTarget:
    """The twin of the configuration's model on its hardware."""

    source = "simulated"

    def __init__(self, study: StudyConfig, conf: Configuration) -> None:
        self.study, self.conf = study, conf
        self.model = study.model_for(conf)
        self.spec = twin_spec(study, conf)
        self.dtwin: DisaggTwin | None = None
        try:
            if conf.disaggregate is not None:  # the split on the configuration's GPUs (twin.disagg)
                self.dtwin = _disaggregated(self.spec, conf)
                self.twin = self.dtwin.prefill
            else:
                self.twin = (_calibrated(study, conf, conf.calibration) if conf.calibration is not None
                             else self.spec.twin())
        except ConfigError as exc:
            text = str(exc)
            if "does not fit" in text or "no room for a single KV block" in text:
                raise DoesNotFit(text) from None
            raise ConfigError(f"configuration {conf.label}: {exc}") from None

    def default_concurrency(self) -> int:
        if self.dtwin is not None:
            return self.dtwin.decode.config.max_num_seqs * self.dtwin.decode.lanes
        return self.twin.config.max_num_seqs * self.twin.lanes

    def describe(self) -> dict[str, Any]:
        info = {**(self.dtwin or self.twin).describe(), "kind": "twin",
                "engine": "infermeter-twin (vLLM-like continuous batching)", "model": self.model}
        if self.conf.calibration is not None:
            info["calibration"] = {"file": str(self.conf.calibration), "applied": True,
                                   "note": "the twin's step time, scheduler and KV capacity come from this file"}
        return info

    def run_step(self, spec: StepSpec, profile: str, *, out_dir: Path, label: str) -> Summary:
        from infermeter.measure import RunConfig
        from infermeter.measure.simplan import SimPlan

        cfg = RunConfig(model=self.model, **_load_args(self.study, self.conf, spec, profile, out_dir, label),
                        profile_overrides=self.study.profile_overrides.get(profile) or {})
        if self.dtwin is not None:
            from infermeter.measure.disagg import DisaggPlan

            return Summary.from_json(DisaggPlan(cfg, self.spec, self.dtwin.spec, token_times="off").run().summary)
        plan = SimPlan(cfg, self.spec, token_times="off", twin=self.twin)
        return Summary.from_json(plan.run().summary)


class MeasuredTarget:
    """A live OpenAI-compatible endpoint serving the configuration."""

    source = "measured"

    def __init__(self, study: StudyConfig, conf: Configuration, url: str, model: str | None,
                 engine: str | None = None, engine_info: dict[str, Any] | None = None) -> None:
        self.study, self.conf, self.url, self.model = study, conf, url, model
        self.engine, self.engine_info = engine, engine_info or {}

    def default_concurrency(self) -> int:
        return MEASURED_DEFAULT_CONCURRENCY

    def describe(self) -> dict[str, Any]:
        return {"kind": "endpoint", "url": self.url, "engine": self.engine or "unknown (given as a URL)",
                "model": self.model, **self.engine_info}

    def run_step(self, spec: StepSpec, profile: str, *, out_dir: Path, label: str) -> Summary:
        from infermeter.measure import Measurement, RunConfig

        cfg = RunConfig(url=self.url, model=self.model, hardware=self.conf.config,
                        **_load_args(self.study, self.conf, spec, profile, out_dir, label),
                        **override_flags(profile, self.study.profile_overrides.get(profile)))
        return asyncio.run(Measurement(cfg, launch=self.engine_info.get("launch")).run()).summary


def override_flags(profile: str, overrides: dict[str, Any] | None) -> dict[str, str]:
    """A profile's overrides as ``infermeter run`` length flags (a measured run rebuilds its workload from
    them); ConfigError for a field no flag sets."""
    from infermeter.workload.profiles import FLAG_FIELDS

    if not overrides:
        return {}
    flag_of = {field: flag for flag, field in FLAG_FIELDS.get(profile, {}).items()
               if flag in ("input_tokens", "output_tokens")}
    bad = sorted(k for k in overrides if k not in flag_of)
    if bad:
        raise ConfigError(f"profile_overrides.{profile}: {', '.join(bad)} cannot be applied to a measured endpoint "
                          f"(its runs take only {', '.join(sorted(flag_of))}); drop them or simulate every cell")
    out = {}
    for k, v in overrides.items():
        if isinstance(v, dict):
            v = ",".join(str(v[x]) for x in ("mean", "stdev", "min", "max") if x in v)
        out[flag_of[k]] = str(v)
    return out


@contextmanager
def open_target(study: StudyConfig, conf: Configuration, log_dir: Path | None = None) -> Iterator[Target]:
    """The configuration's target, started for the ``with`` block when it is an engine to launch (the
    same :func:`infermeter.engines.target.running` as a campaign's; its log goes to ``log_dir``)."""
    if conf.imported is not None:
        raise ConfigError(f"configuration {conf.label}: its cells are existing runs (study.imported), not a target")
    if isinstance(conf.target, str):
        yield MeasuredTarget(study, conf, conf.target, conf.model)
        return
    if conf.engine:
        server = EngineTarget(name=re.sub(r"[^A-Za-z0-9._-]+", "-", conf.label).strip("-") or "engine",
                              engine=conf.engine, settings=dict(conf.engine_args), reset_prefix_cache=False)
        log = (log_dir or Path(tempfile.mkdtemp(prefix="infermeter-study-"))) / f"{server.name}.log"
        with running(server, log) as live:
            yield MeasuredTarget(study, conf, live.base_url, conf.model, engine=conf.engine,
                                 engine_info={"engine_args": dict(conf.engine_args), "timings": dict(live.timings),
                                              "log": str(log), "launch": dict(live.launch)})
        return
    yield SimulatedTarget(study, conf)
