"""The validation corpus: published measurements, one row each, with where they come from.

Promises: :func:`load_rows` parses a measurements CSV (``tests/data/published-measurements.csv``)
into frozen :class:`Row` objects and raises :class:`DataError` naming the file, line and column on
bad input. Required columns: id, model, hardware, gpus, tp, pp, weight_dtype, engine, scenario,
concurrency, input_tokens, output_tokens, metric, value. Optional: source, notes, date,
engine_version, source_url, conditions (free text for people) and settings (for the model:
``key=value`` pairs separated by ``;``, see :data:`SETTINGS`; ``lengths`` is the run's length distribution,
``fixed``, ``uniform`` or ``sharegpt`` (:mod:`perfmodel.lengths`; a row whose conditions name ShareGPT is
``sharegpt`` unless it says otherwise), ``requests`` the number of requests a saturated run sent at once, ``ep`` the expert-parallel degree a run states
(TensorRT-LLM's ``--ep_size``: whole experts per GPU, not the tensor-parallel shards the model costs; such rows are
predicted as TP but fit no MoE term, :mod:`perfmodel.fit`), ``attention_dp=1`` a run with attention data
parallelism (SGLang ``--enable-dp-attention``, TensorRT-LLM ``enable_attention_dp``; :mod:`perfmodel.memory`),
``enforce_eager=1`` a run without CUDA/HIP graphs (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``),
``max_output`` the output cap every request carried (``max_tokens``) when the lengths are a distribution: outputs
that would run longer stop there (:meth:`perfmodel.lengths.Lengths.of`; ``output_tokens`` is the measured mean, at most the cap),
``network`` the network between the nodes a run spans (``data/networks.yaml``; rows on more GPUs than one node holds are
predicted on ``ib-ndr400`` unless they name another))::

    >>> rows = load_rows("tests/data/published-measurements.csv")
    >>> r = next(r for r in rows if r.id == "trt061-h100-7b-bs768-128-128")
    >>> r.scenario, r.engine_spec, r.concurrency
    ('static_batch', 'trtllm@0.6.1', 768)

Scenarios: ``saturated`` (every request queued at once, steady state at the batch or KV limit),
``fixed_concurrency`` (a closed loop of ``concurrency`` users), ``static_batch`` (``concurrency``
requests start together and run to completion), ``request_rate`` (an open loop: ``requests`` requests sent at ``rate``
a second, Poisson, the client uncapped: ``concurrency`` is ``max``). :func:`publication` is the unit that
leave-one-publication-out holds out: the ``source_url`` (one edition of a document, its commit in
the URL; a page overwritten by each release is one publication per snapshot, the URL fragment
naming it), else the id up to its first ``-``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infermeter.errors import DataError
from infermeter.perfmodel.hardware import network_catalog
from infermeter.perfmodel.lengths import KINDS as LENGTH_KINDS

METRICS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "decode_tokens_per_s", "prefill_tokens_per_s")
SCENARIOS = ("saturated", "fixed_concurrency", "static_batch", "request_rate")
REQUIRED = ("id", "model", "hardware", "gpus", "tp", "pp", "weight_dtype", "engine", "scenario", "concurrency",
            "input_tokens", "output_tokens", "metric", "value")
PROVENANCE = ("date", "engine_version", "source_url", "conditions")
# what a row's `settings` may set: the conditions a publication states that change the prediction
SETTINGS: dict[str, type] = {"kv_dtype": str, "max_num_seqs": int, "max_batched_tokens": int, "gpu_memory_utilization": float,
                             "lengths": str, "requests": int, "ep": int,
                             "attention_dp": int, "vllm_use_v1": int, "rate": float, "enforce_eager": int,
                             "max_output": int, "network": str}


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    model: str
    hardware: str
    gpus: int
    tp: int
    pp: int
    weight_dtype: str
    engine: str
    scenario: str
    concurrency: int | None  # None for "max"
    input_tokens: int
    output_tokens: int
    metric: str
    value: float
    source: str = ""
    notes: str = ""
    date: str = ""
    engine_version: str = ""
    source_url: str = ""
    conditions: str = ""
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def config(self) -> str:
        return f"{self.gpus}x{self.hardware}:tp{self.tp},pp{self.pp}"

    @property
    def engine_spec(self) -> str:
        """``engine@version`` as the calibration reads it (``trtllm@0.6.1``), or the bare engine; a vLLM row that
        states ``vllm_use_v1=0`` (the V0 engine of vLLM 0.8-0.10) or ``=1`` (0.7's V1 alpha) gets the ``+v0``/``+v1``
        label that selects its generation."""
        spec = f"{self.engine}@{self.engine_version}" if self.engine_version else self.engine
        if self.engine == "vllm" and self.setting("vllm_use_v1") in (0, 1):
            tag = f"+v{self.setting('vllm_use_v1')}"
            spec = f"{spec.partition('+')[0]}{tag}" if "@" in spec else f"vllm@{tag}"
        return spec

    def setting(self, key: str, default: Any = None) -> Any:
        return dict(self.settings).get(key, default)

    @property
    def lengths(self) -> str:
        """The row's length distribution (:mod:`perfmodel.lengths`): its ``lengths`` setting; else ``sharegpt`` when its
        conditions name the ShareGPT dataset (the real lengths of a chat corpus, whose means the row carries); else fixed."""
        stated = self.setting("lengths")
        if stated:
            return str(stated)
        return "sharegpt" if "sharegpt" in self.conditions.lower() else "fixed"


def publication(row: Row) -> str:
    """The publication a row comes from: its source URL, else its id up to the first '-'."""
    return row.source_url or row.id.split("-", 1)[0]


def eager_engines() -> tuple[str, ...]:
    """The engines of the shipped table that capture CUDA/HIP graphs and can be told not to (a prior ``eager_layer_us``):
    the ones a row may mark ``enforce_eager``."""
    from infermeter.perfmodel.calibration import load_calibration

    return tuple(e.name for e in load_calibration().engines if e.eager_layer_us > 0)


def _settings(text: str, where: str) -> tuple[tuple[str, Any], ...]:
    out = []
    for part in (p.strip() for p in (text or "").split(";")):
        if not part:
            continue
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or key not in SETTINGS:
            raise DataError(f"{where}: column 'settings' item {part!r}: use key=value with key one of {', '.join(SETTINGS)}")
        if key == "lengths" and value.lower() not in LENGTH_KINDS:
            raise DataError(f"{where}: column 'settings' item {part!r}: lengths must be one of {', '.join(LENGTH_KINDS)}")
        try:
            out.append((key, SETTINGS[key](value.lower() if key == "lengths" else value)))
        except ValueError:
            raise DataError(f"{where}: column 'settings' item {part!r}: {key} must be {SETTINGS[key].__name__}") from None
    return tuple(out)


def _row(r: dict[str, str], where: str) -> Row:
    def text(k: str) -> str:
        return (r.get(k) or "").strip()

    try:
        conc = None if text("concurrency") in ("max", "") else int(text("concurrency"))
        row = Row(id=text("id"), model=text("model"), hardware=text("hardware"), gpus=int(text("gpus")), tp=int(text("tp")),
                  pp=int(text("pp")), weight_dtype=text("weight_dtype").lower(), engine=text("engine").lower(),
                  scenario=text("scenario"), concurrency=conc, input_tokens=int(text("input_tokens")),
                  output_tokens=int(text("output_tokens")), metric=text("metric"), value=float(text("value")),
                  source=text("source"), notes=text("notes"), date=text("date"), engine_version=text("engine_version"),
                  source_url=text("source_url"), conditions=text("conditions"), settings=_settings(text("settings"), where))
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: bad value ({exc})") from None
    if row.metric not in METRICS:
        raise DataError(f"{where}: column 'metric' {row.metric!r} unknown; use one of {', '.join(METRICS)}")
    if row.scenario not in SCENARIOS:
        raise DataError(f"{where}: column 'scenario' {row.scenario!r} unknown; use one of {', '.join(SCENARIOS)}")
    if row.setting("vllm_use_v1") is not None and (row.engine != "vllm" or row.setting("vllm_use_v1") not in (0, 1)):
        raise DataError(f"{where}: column 'settings' item vllm_use_v1={row.setting('vllm_use_v1')}: 0 or 1, on a vllm row only")
    if row.setting("enforce_eager") is not None and (row.engine not in (eager := eager_engines())
                                                     or row.setting("enforce_eager") not in (0, 1)):
        raise DataError(f"{where}: column 'settings' item enforce_eager={row.setting('enforce_eager')}: 0 or 1, on a "
                        f"{' or '.join(eager)} row only (the engines whose graphs a run can turn off)")
    if (cap := row.setting("max_output")) is not None:
        if not cap >= row.output_tokens:
            raise DataError(f"{where}: column 'settings' item max_output={cap}: the output cap must be >= the row's mean "
                            f"output_tokens {row.output_tokens}")
        if row.lengths == "fixed":
            raise DataError(f"{where}: column 'settings' item max_output={cap}: equal lengths have no tail to cap; the "
                            "setting needs lengths=uniform or sharegpt")
    if (net := row.setting("network")) is not None:
        if net not in network_catalog():
            raise DataError(f"{where}: column 'settings' item network={net}: unknown; use one of {', '.join(network_catalog())}")
    if row.scenario == "request_rate":
        if row.concurrency is not None:
            raise DataError(f"{where}: column 'concurrency' must be 'max' for scenario 'request_rate' (an uncapped client; "
                            "a run capped at N users is a closed loop: fixed_concurrency)")
        if not 0 < (row.setting("rate") or 0) < math.inf or not (row.setting("requests") or 0) > 0:
            raise DataError(f"{where}: scenario 'request_rate' needs settings rate=R (requests a second, > 0) and requests=N")
    elif row.scenario != "saturated" and not row.concurrency:
        raise DataError(f"{where}: column 'concurrency' must be a number of users (or the batch) for scenario {row.scenario!r}")
    if row.value <= 0:
        raise DataError(f"{where}: column 'value' must be > 0")
    if row.input_tokens < 1 or row.output_tokens < 1:
        raise DataError(f"{where}: columns 'input_tokens' and 'output_tokens' must be >= 1")
    return row


def load_rows(path: str | Path) -> list[Row]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"--validate {str(path)!r}: no such file")
    rows: list[Row] = []
    seen: dict[str, int] = {}
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{p}: missing column(s) {', '.join(missing)}")
        for line, r in enumerate(reader, start=2):
            row = _row(r, f"{p}:{line}")
            if row.id in seen:
                raise DataError(f"{p}:{line}: column 'id' {row.id!r} repeats line {seen[row.id]}")
            seen[row.id] = line
            rows.append(row)
    if not rows:
        raise DataError(f"{p}: no rows")
    return rows
