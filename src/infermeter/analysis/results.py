"""The typed results of a run: ``Summary`` and what it is made of, one schema for every source.

A measured, emulated or simulated run, a soak, a worker or a Ray run all end in one
:class:`Summary` (``summary.json``), built by :class:`infermeter.analysis.accumulator.Accumulator`
and judged by :func:`infermeter.analysis.verdict.judge`. Readers load it with
:meth:`Summary.read`, which also reads older files (schema 1) and upgrades them::

    s = Summary.read(Path("results/demo/summary.json"))
    s.ttft_ms.p99, s.saturated, [f.code for f in s.findings]
    s.to_json()                       # what summary.json holds

Every model is frozen. A percentile needs a minimum number of samples (``MIN_SAMPLES``: p90
10, p95 20, p99 100, p99.9 1,000); with fewer it is ``None`` and shown as "–", never a
number resting on a handful of requests (see docs/metrics.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infermeter.errors import DataError

SCHEMA_VERSION = 2
STAT_KEYS = ("count", "mean", "stdev", "min", "max", "p50", "p90", "p95", "p99", "p999")
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
# The fewest samples a percentile may rest on (a p99 of 36 values is their maximum, not a p99).
MIN_SAMPLES = {"p50": 1, "p90": 10, "p95": 20, "p99": 100, "p999": 1000}
PERCENTILE_LABELS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9"}

# Summary keys of reasoning runs only: absent from the summary.json of a run without thinking
REASONING_KEYS = ("ttfo_ms", "reasoning_requests", "total_reasoning_tokens", "total_answer_tokens",
                  "mean_reasoning_tokens", "mean_answer_tokens")

DISAGG_KEYS = ("kv_transfer_ms", "disaggregation")  # only in a disaggregated run's summary.json

Severity = Literal["invalid", "warning", "note"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Distribution(_Frozen):
    """count, mean, stdev (population), min, max and percentiles of one metric (``None``: undefined)."""

    count: int = 0
    mean: float | None = None
    stdev: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """Dict-style access for readers written against summary.json (``d.get("p99")``)."""
        return getattr(self, key, default) if key in STAT_KEYS else default

    def __getitem__(self, key: str) -> Any:
        if key not in STAT_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def missing_reason(self, key: str) -> str | None:
        """Why ``key`` is None: no samples, or fewer than the percentile needs."""
        if self.get(key) is not None:
            return None
        if self.count == 0:
            return "no samples"
        need = MIN_SAMPLES.get(key)
        if need and self.count < need:
            return f"{PERCENTILE_LABELS[key]} needs >= {need:,} samples, has {self.count:,}"
        return None


def percentile_floor(key: str, count: int) -> bool:
    """Whether ``count`` samples are enough for percentile ``key``."""
    return count >= MIN_SAMPLES.get(key, 1)


class Finding(_Frozen):
    """One thing the verdict found: ``invalid`` (the numbers cannot be trusted as asked), ``warning``
    (trust them with care) or ``note``. ``evidence`` holds the figures it rests on."""

    code: str
    severity: Severity
    message: str
    evidence: dict[str, float | int | str | bool | None] = {}
    fix: str | None = None

    def line(self) -> str:
        return f"{self.code}: {self.message}"


class Saturation(_Frozen):
    """Could the server keep up with the offered load? ``saturated`` is None when not judged."""

    saturated: bool | None = None
    basis: str = "not judged"
    offered_rate: float | None = None  # req/s the schedule offered (its own send times)
    completion_rate: float | None = None  # req/s completed, between the earliest- and latest-intended completions
    rate_ratio: float | None = None
    rate_ratio_limit: float | None = None
    latency_start_s: float | None = None  # TTFT from the intended send, first block of the run
    latency_end_s: float | None = None  # the same, last block
    latency_growth_s: float | None = None  # Theil-Sen slope x span
    trend_p: float | None = None  # Mann-Kendall one-sided p-value of the block series
    trend_blocks: int | None = None
    unfinished: int | None = None
    unfinished_rate: float | None = None
    waiting_start: float | None = None  # server queue (scraped or simulated), start and end of the run
    waiting_end: float | None = None
    evidence: tuple[str, ...] = ()


class Window(_Frozen):
    """One fixed window of a run (finished requests belong to the window in which they ended)."""

    index: int
    start_s: float
    end_s: float
    span_s: float
    completed: int = 0
    failed: int = 0
    error_rate: float = 0.0
    request_throughput: float = 0.0
    output_token_throughput: float = 0.0
    ttft_ms: Distribution = Distribution()
    tpot_ms: Distribution = Distribution()
    itl_ms: Distribution = Distribution()
    e2e_ms: Distribution = Distribution()
    server_metrics: dict[str, Any] | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


class Windows(_Frozen):
    window_s: float
    assigned_by: str = "end time"
    series: tuple[Window, ...] = ()


class ModelResult(_Frozen):
    """One model's figures in a multi-model fleet (``summary.json`` ``models``, keyed by model id; each request
    judged by its pool's SLO; docs/metrics.md "Fleets")."""

    pools: tuple[str, ...] = ()
    scheduled: int = 0
    completed: int = 0
    failed: int = 0
    request_throughput: float | None = None
    output_token_throughput: float | None = None
    ttft_ms: Distribution = Distribution()
    tpot_ms: Distribution = Distribution()
    e2e_ms: Distribution = Distribution()
    slo: dict[str, float] | None = None
    slo_attainment: float | None = None
    goodput: float | None = None
    utilisation: float | None = None  # busy engine-seconds / provisioned engine-seconds of its pools
    gpu_hours: float | None = None
    cost_usd: float | None = None


class Summary(BaseModel):
    """``summary.json``: every figure of a run and its verdict (docs/metrics.md defines each).

    Readers take this model and read its attributes (``s.ttft_ms.p95``), so a renamed figure is a type
    error. ``extra="allow"``, not ``"forbid"``: the summary.json of a plan (``load.steps.plan_summary``:
    ``steps``, ``capacity``, ``plan``, ``head_step``, ``slo_judge``, ``interrupted``, the head step's plan
    columns) and of a study cell (``study.cells.write_cell``: ``study_cell``, ``capacity_search``...) carry
    their own sections beside the run's figures, read with :meth:`get` and kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")

    schema_version: int = SCHEMA_VERSION
    source: str = "measured"  # measured | emulated | simulated
    label: str | None = None
    model: str | None = None
    hardware: str | None = None
    profile: str | None = None
    load: str | None = None
    # what happened to every scheduled request
    scheduled: int = 0
    completed: int = 0
    failed: int = 0
    dropped: int = 0
    cancelled: int = 0
    unfinished: int = 0
    duration_s: float = 0.0
    request_throughput: float | None = None
    input_token_throughput: float | None = None
    output_token_throughput: float | None = None
    total_token_throughput: float | None = None
    goodput: float | None = None
    slo: dict[str, float] | None = None
    slo_attainment: float | None = None
    # the verdict
    valid: bool = True
    saturated: bool | None = None
    invalid_reasons: list[str] = []
    warnings: list[str] = []
    findings: tuple[Finding, ...] = ()
    saturation: Saturation = Saturation()
    # distributions (ms unless named otherwise)
    ttft_ms: Distribution = Distribution()
    tpot_ms: Distribution = Distribution()
    itl_ms: Distribution = Distribution()
    e2e_ms: Distribution = Distribution()
    ttft_from_intended_ms: Distribution = Distribution()
    e2e_from_intended_ms: Distribution = Distribution()
    schedule_lag_ms: Distribution = Distribution()
    output_tokens_per_s_per_request: Distribution = Distribution()
    itl_source: str | None = None
    percentiles: dict[str, Any] = Field(default_factory=dict)
    # rates and failures
    errors: dict[str, int] = {}
    error_messages: dict[str, str] = {}
    error_rate: float = 0.0
    unfinished_rate: float = 0.0
    target_rate: float | None = None
    scheduled_rate: float | None = None
    achieved_rate: float | None = None
    # tokens
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    token_count_source: str | None = None
    usage_mismatches: int = 0
    usage_implausible: int = 0  # requests whose server usage claimed more than the response carried
    cached_prompt_tokens: int | None = None
    # reasoning models (only when some request thought: REASONING_KEYS are left out of summary.json otherwise)
    ttfo_ms: Distribution | None = None  # time to first output token: the first answer token, from the send
    reasoning_requests: int | None = None  # completed requests that streamed thinking
    total_reasoning_tokens: int | None = None
    total_answer_tokens: int | None = None
    mean_reasoning_tokens: float | None = None
    mean_answer_tokens: float | None = None
    # beside the records
    server_metrics: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None
    alerts: list[dict[str, Any]] = []
    client: dict[str, Any] | None = None
    summary_method: str = "exact"
    windows: Windows | None = None
    prediction_intervals: dict[str, Any] | None = None
    # multi-model fleets (simulate --fleet): per model, and per pool (its model, hardware, utilisation, autoscaling)
    models: dict[str, ModelResult] | None = None
    pools: dict[str, dict[str, Any]] | None = None
    # disaggregated prefill/decode (simulate --disaggregate; left out of summary.json otherwise): the KV
    # transfer per request (end of prefill -> KV at the decode instance, link queueing included) and per pool
    kv_transfer_ms: Distribution | None = None
    disaggregation: dict[str, Any] | None = None
    run_dir: str | None = None

    # -- access ---------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        """Dict-style access (``s.get("ttft_ms")``), also for keys a plan or study adds."""
        if key in type(self).model_fields:
            return getattr(self, key)
        return (self.model_extra or {}).get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields or key in (self.model_extra or {}):
            return self.get(key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in type(self).model_fields or key in (self.model_extra or {}))

    def distribution(self, key: str) -> Distribution:
        d = self.get(key)
        return d if isinstance(d, Distribution) else Distribution()

    def with_(self, **changes: Any) -> Summary:
        """A copy with ``changes`` (validated again, so nested dicts become models)."""
        return Summary.from_json({**self.to_json(), **changes})

    # -- files ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        for k in (*REASONING_KEYS, *DISAGG_KEYS):
            if d.get(k) is None:
                d.pop(k, None)
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "summary") -> Summary:
        """A summary from its JSON (schema 1 files are upgraded); DataError naming ``where``."""
        if not isinstance(data, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version", 1)
        if version not in (1, SCHEMA_VERSION):
            raise DataError(f"{where}: schema_version {version!r} is not supported "
                            f"(this infermeter reads 1 and {SCHEMA_VERSION})")
        if version == 1:
            data = upgrade_v1(data)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])
            raise DataError(f"{where}: {loc}: {e['msg']}") from None

    @classmethod
    def read(cls, path: Path) -> Summary:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path}: file not found") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{path}: not readable JSON ({exc})") from None
        return cls.from_json(data, str(path))


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2: the same figures; requests that were scheduled but not finished are counted,
    and the verdict's strings are kept (a v1 file has no structured findings)."""
    d = dict(data)
    d["schema_version"] = SCHEMA_VERSION
    unfinished = int(d.get("cancelled") or 0) + int(d.get("dropped") or 0)
    d.setdefault("unfinished", unfinished)
    scheduled = int(d.get("completed") or 0) + int(d.get("failed") or 0) + unfinished
    d.setdefault("scheduled", scheduled)
    d.setdefault("unfinished_rate", unfinished / scheduled if scheduled else 0.0)
    if isinstance(d.get("windows"), dict):
        w = dict(d["windows"])
        w["series"] = [_upgrade_window(x) for x in w.get("series") or []]
        d["windows"] = w
    if isinstance(d.get("percentiles"), str):
        d["percentiles"] = {"method": d["percentiles"]}
    for key, value in list(d.items()):  # v1 distributions may lack keys: fill with None
        if isinstance(value, dict) and "count" in value and set(value) <= set(STAT_KEYS):
            d[key] = {k: value.get(k) for k in STAT_KEYS} | {"count": int(value.get("count") or 0)}
    return d


def _upgrade_window(w: dict[str, Any]) -> dict[str, Any]:
    out = dict(w)
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        if isinstance(out.get(k), dict):
            out[k] = {s: v for s, v in out[k].items() if s in STAT_KEYS} | {"count": int(out[k].get("count") or 0)}
    return out
