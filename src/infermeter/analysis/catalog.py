"""The metric catalog: every figure of a run declared once, and the one grammar that names it.

Promise: :data:`CATALOG` lists each figure a run reports once -- its key, label, unit, format,
direction, where it lives in ``summary.json``, which statistics it has and the views that show
it -- and every consumer (console summary, HTML/Markdown report, ``summary.csv``, history,
``compare``, campaign spread, ``--alert``, ``--slo``, prediction intervals, calibration checks)
reads its rows from here. :func:`resolve` turns a name of the one grammar into a
:class:`MetricRef`, which reads the value from a summary (a :class:`~infermeter.analysis.results.Summary`
or its JSON)::

    >>> resolve("ttft_p95_ms").value({"ttft_ms": {"p95": 612.0}})
    612.0
    >>> resolve("output_throughput").name          # an old spelling: a documented alias
    'output_tokens_per_s'

The grammar (docs/metrics.md, "Metric names"):

* a distribution's statistic is ``<stem>_<stat>[_<unit>]``: ``ttft_p95_ms``, ``e2e_mean_ms``,
  ``output_tps_per_user_p50`` (``stat``: mean, stdev, min, max, p50, p90, p95, p99, p999);
* a run figure is its name: ``output_tokens_per_s``, ``requests_per_s``, ``error_rate``,
  ``kv_cache_usage_max``, ``gpu_temperature_c``.

Old spellings stay accepted as aliases: ``ttft_ms.p95`` (the summary path), ``ttft_p95``
(``compare --metric``), ``output_token_throughput`` and the other summary keys,
``output_throughput``, ``kv_cache_usage`` (= ``kv_cache_usage_max``) ... (:func:`aliases`).

Adding a metric: one :class:`Metric` row here, plus computing it where the summary is built
(``analysis/accumulator.py``) and its ``Summary`` field (``analysis/results.py``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from infermeter.analysis.results import MIN_SAMPLES, PERCENTILE_LABELS, STAT_KEYS

Better = Literal["lower", "higher"]
View = Literal["console", "report", "csv", "history", "alert", "compare", "campaign", "banded"]
STATS = tuple(k for k in STAT_KEYS if k != "count")  # what a distribution name may end in
SUMMARY_STATS = ("count", "mean", "p50", "p90", "p95", "p99", "p999", "max")  # a report's latency columns
CONSOLE_STATS = ("mean", "p50", "p90", "p95", "p99", "p999")


@dataclass(frozen=True)
class Metric:
    """One figure of a run. ``stats`` non-empty: a distribution (``summary[key][stat]``)."""

    name: str  # canonical name (a distribution: its stem, e.g. "ttft")
    key: str  # where it lives: the summary key, or the key inside ``block``
    label: str  # short label ("TTFT", "output tok/s")
    unit: str  # "ms", "tok/s", "req/s", "fraction", "count", "s", "tokens", "" (text)
    fmt: str = ".2f"  # console format of one value
    better: Better | None = "lower"
    block: Literal["server_metrics", "gpu"] | None = None
    stats: tuple[str, ...] = ()
    suffix: str = ""  # unit suffix of a distribution's names: "ms" -> ttft_p95_ms
    bare: str | None = None  # the stat a distribution's bare stem means (output_tps_per_user -> mean)
    views: frozenset[str] = frozenset()
    console_label: str | None = None
    history_stats: tuple[str, ...] = ()  # distributions: the history columns <stem>_<stat>_<suffix>
    compare_stats: tuple[str, ...] = ()  # distributions: default `compare` metrics
    campaign_stats: tuple[str, ...] = ()  # distributions: the campaign's spread figures
    per_request: str | None = None  # analysis.metrics.RequestMetrics attribute (seconds unless ``unit`` says)
    aliases: tuple[str, ...] = ()
    definition: str = ""

    @property
    def distribution(self) -> bool:
        return bool(self.stats)

    def shows(self, view: str) -> bool:
        return view in self.views

    def stat_name(self, stat: str) -> str:
        return "_".join(p for p in (self.name, stat, self.suffix) if p)

    def ref(self, stat: str | None = None) -> MetricRef:
        if self.distribution and stat is None:
            stat = self.bare or "p50"
        return MetricRef(self, stat if self.distribution else None)

    def block_of(self, summary: Any) -> Any:
        """The distribution (or the raw value) of this metric in ``summary``; None when absent."""
        cur = _get(summary, self.block) if self.block else summary
        return _get(cur, self.key)


@dataclass(frozen=True)
class MetricRef:
    """A metric and, for a distribution, one statistic: what a name of the grammar denotes."""

    metric: Metric
    stat: str | None = None

    @property
    def name(self) -> str:
        return self.metric.stat_name(self.stat) if self.stat else self.metric.name

    @property
    def label(self) -> str:
        m = self.metric
        if not self.stat:
            return m.label
        return f"{m.label} {PERCENTILE_LABELS.get(self.stat, self.stat)}"

    @property
    def title(self) -> str:
        """``label (unit)``, e.g. "TTFT p95 (ms)"; a figure whose label carries its unit is left as is."""
        unit = self.metric.unit
        if unit in ("", "count", "fraction") or unit in self.metric.label:
            return self.label
        return f"{self.label} ({unit})"

    @property
    def path(self) -> tuple[str, ...]:
        m = self.metric
        return tuple(p for p in (m.block, m.key, self.stat) if p)

    @property
    def column(self) -> str:
        """Its column in the history database (the summary key of a figure, the name of a statistic)."""
        return self.name if self.stat else self.metric.key

    @property
    def min_samples(self) -> int:
        return MIN_SAMPLES.get(self.stat or "", 1)

    def raw(self, summary: Any) -> Any:
        """The value as summary.json holds it (an int stays an int, a text a text); None when absent."""
        v = self.metric.block_of(summary)
        return _get(v, self.stat) if self.stat else (None if isinstance(v, Mapping) else v)

    def value(self, summary: Any) -> float | None:
        """The number in a summary, a window or summary.json; None when not measured (or not a number)."""
        v = self.metric.block_of(summary)
        if self.stat:
            v = _get(v, self.stat)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            return None
        return float(v)

    def format(self, summary: Any, missing: str = "–") -> str:
        v = self.value(summary)
        return missing if v is None else format(v, self.metric.fmt)


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    getter = getattr(obj, "get", None)
    return getter(key) if callable(getter) else getattr(obj, key, None)


_ALL: frozenset[str] = frozenset(("console", "report", "csv", "history", "alert"))
_LAT = STATS


def _v(*views: str) -> frozenset[str]:
    return frozenset(views)


CATALOG: tuple[Metric, ...] = (
    # -- latency distributions (ms) -------------------------------------------------------------
    Metric("ttft", "ttft_ms", "TTFT", "ms", stats=_LAT, suffix="ms", views=_ALL | {"compare", "campaign", "banded"},
           history_stats=("p50", "p95", "p99"), compare_stats=("p50", "p95", "p99"), campaign_stats=("p50", "p99"),
           per_request="ttft", fmt=".1f",
           definition="first_token_at − sent_at"),
    Metric("ttfo", "ttfo_ms", "TTFO", "ms", stats=_LAT, suffix="ms", views=_v("console", "report", "alert"),
           console_label="TTFO (first answer token)", definition="first_answer_at − sent_at"),
    Metric("ttft_from_intended", "ttft_from_intended_ms", "TTFT from intended send", "ms", stats=_LAT, suffix="ms",
           views=_v("console", "report", "csv", "alert"), per_request="ttft_intended",
           definition="first_token_at − intended_at"),
    Metric("tpot", "tpot_ms", "TPOT", "ms", stats=_LAT, suffix="ms", views=_ALL | {"compare", "campaign", "banded"},
           history_stats=("p50", "p95", "p99"), compare_stats=("p50", "p95"), campaign_stats=("p50",), per_request="tpot",
           definition="(ended_at − first_token_at) / (output tokens − 1)"),
    Metric("itl", "itl_ms", "ITL", "ms", stats=_LAT, suffix="ms", views=_ALL, history_stats=("p50", "p95", "p99"),
           definition="gaps between token-bearing chunks, pooled"),
    Metric("e2e", "e2e_ms", "E2E", "ms", stats=_LAT, suffix="ms", views=_ALL | {"compare", "campaign"},
           history_stats=("p50", "p95", "p99"), compare_stats=("p50", "p95"), campaign_stats=("p50",), per_request="e2e",
           fmt=".1f",
           definition="ended_at − sent_at"),
    Metric("e2e_from_intended", "e2e_from_intended_ms", "E2E from intended send", "ms", stats=_LAT, suffix="ms",
           views=_v("alert"), per_request="e2e_intended", definition="ended_at − intended_at"),
    Metric("schedule_lag", "schedule_lag_ms", "schedule lag", "ms", stats=_LAT, suffix="ms",
           views=_v("console", "csv", "alert"), per_request="schedule_lag", definition="sent_at − intended_at"),
    Metric("output_tps_per_user", "output_tokens_per_s_per_request", "output tok/s per request", "tok/s",
           better="higher", stats=_LAT, bare="mean", views=_v("alert"), per_request="out_tps",
           definition="output tokens / e2e, per request"),
    # -- run figures (summary scalars) --------------------------------------------------------
    Metric("completed", "completed", "completed", "count", ".0f", "higher", views=_v("csv", "history", "alert")),
    Metric("failed", "failed", "failed", "count", ".0f", views=_v("csv", "history", "alert")),
    Metric("dropped", "dropped", "dropped", "count", ".0f", views=_v("csv", "history", "alert")),
    Metric("duration_s", "duration_s", "duration (s)", "s", ".2f", None, views=_v("csv", "history")),
    Metric("requests_per_s", "request_throughput", "req/s", "req/s", ".2f", "higher",
           views=_ALL | {"compare", "campaign"}, aliases=("request_throughput",), per_request="ok",
           console_label="req/s", definition="completed requests / duration"),
    Metric("input_tokens_per_s", "input_token_throughput", "input tok/s", "tok/s", ".0f", "higher", views=_ALL,
           aliases=("input_token_throughput",)),
    Metric("output_tokens_per_s", "output_token_throughput", "output tok/s", "tok/s", ".0f", "higher",
           views=_ALL | {"compare", "campaign", "banded"}, aliases=("output_token_throughput", "output_throughput"),
           per_request="n_out", definition="output tokens / duration"),
    Metric("total_tokens_per_s", "total_token_throughput", "total tok/s", "tok/s", ".0f", "higher", views=_ALL,
           aliases=("total_token_throughput",)),
    Metric("goodput", "goodput", "goodput req/s", "req/s", ".2f", "higher", views=_ALL),
    Metric("error_rate", "error_rate", "error rate", "fraction", ".1%",
           views=_v("report", "csv", "history", "alert", "compare"),
           per_request="error", definition="failed / (completed + failed)"),
    Metric("target_rate", "target_rate", "target rate (req/s)", "req/s", ".2f", None, views=_v("report", "csv", "history")),
    Metric("achieved_rate", "achieved_rate", "achieved rate (req/s)", "req/s", ".2f", "higher",
           views=_v("report", "csv", "history", "alert")),
    Metric("mean_input_tokens", "mean_input_tokens", "mean input tokens", "tokens", ".1f", None, views=_v("csv")),
    Metric("mean_output_tokens", "mean_output_tokens", "mean output tokens", "tokens", ".1f", None, views=_v("csv")),
    Metric("token_count_source", "token_count_source", "token counts", "", "", None, views=_v("csv")),
    Metric("usage_mismatches", "usage_mismatches", "usage mismatches", "count", ".0f", views=_v("csv", "alert")),
    # -- the server's /metrics (or the twin's), summary["server_metrics"] ----------------------
    Metric("kv_cache_usage_mean", "kv_cache_usage_mean", "KV usage mean", "fraction", ".1%", block="server_metrics",
           views=_v("console", "report", "csv", "alert"), console_label="KV mean"),
    Metric("kv_cache_usage_max", "kv_cache_usage_max", "KV usage max", "fraction", ".1%", block="server_metrics",
           views=_v("console", "report", "csv", "alert"), console_label="KV max", aliases=("kv_cache_usage",)),
    Metric("num_requests_waiting_max", "num_requests_waiting_max", "waiting max", "count", ".0f", block="server_metrics",
           views=_v("console", "report", "csv", "alert"), aliases=("num_requests_waiting",)),
    Metric("num_requests_running_max", "num_requests_running_max", "running max", "count", ".0f", better=None,
           block="server_metrics", views=_v("console", "report", "csv", "alert"), aliases=("num_requests_running",)),
    Metric("prefix_cache_hit_rate", "prefix_cache_hit_rate", "prefix-cache hit rate", "fraction", ".1%", "higher",
           block="server_metrics", views=_v("console", "report", "csv", "alert"), console_label="prefix hit rate"),
    Metric("num_preemptions", "num_preemptions", "preemptions", "count", ".0f", block="server_metrics",
           views=_v("console", "report", "csv", "alert")),
    # -- GPU telemetry, summary["gpu"] --------------------------------------------------------
    Metric("gpu_temperature_c", "temperature_c_max", "GPU temperature max (°C)", "°C", ".1f", block="gpu", views=_v("alert")),
    Metric("gpu_temperature_c_mean", "temperature_c_mean", "GPU temperature mean (°C)", "°C", ".1f", block="gpu",
           views=_v("alert")),
    Metric("gpu_throttled_fraction", "throttled_fraction", "GPU throttled", "fraction", ".0%", block="gpu",
           views=_v("alert")),
    Metric("gpu_thermal_throttled_fraction", "thermal_throttled_fraction", "GPU thermal throttled", "fraction", ".0%",
           block="gpu", views=_v("alert")),
    Metric("gpu_power_throttled_fraction", "power_throttled_fraction", "GPU power throttled", "fraction", ".0%",
           block="gpu", views=_v("alert")),
    Metric("gpu_power_w", "power_w_max", "GPU power max (W)", "W", ".0f", None, block="gpu", views=_v("alert")),
    Metric("gpu_utilization_pct", "utilization_pct_mean", "GPU utilization mean (%)", "%", ".0f", None, block="gpu",
           views=_v("alert")),
    Metric("energy_per_output_token_j", "energy_per_output_token_j", "energy per output token (J)", "J", ".3f",
           block="gpu", views=_v("alert")),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOG}


def metrics(view: str, *, block: str | None | Literal["any"] = "any") -> list[Metric]:
    """The catalog's metrics a view shows, in catalog order (``block``: only those of one block)."""
    return [m for m in CATALOG if m.shows(view) and (block == "any" or m.block == block)]


def refs() -> Iterator[MetricRef]:
    """Every name of the grammar: each run figure, and each statistic of each distribution."""
    for m in CATALOG:
        if m.distribution:
            yield from (MetricRef(m, s) for s in m.stats)
        else:
            yield MetricRef(m)


def _names() -> dict[str, MetricRef]:
    out: dict[str, MetricRef] = {}
    for r in refs():
        out[r.name] = r
    return out


NAMES: dict[str, MetricRef] = _names()


def _alias_table() -> dict[str, MetricRef]:
    out: dict[str, MetricRef] = {}
    for m in CATALOG:
        for a in m.aliases:
            out[a] = MetricRef(m)
        if m.distribution:
            if m.bare:
                out[m.name] = MetricRef(m, m.bare)
            for s in m.stats:
                out[f"{m.key}.{s}"] = MetricRef(m, s)  # the summary path: ttft_ms.p95
                if m.suffix:
                    out[f"{m.name}_{s}"] = MetricRef(m, s)  # compare's old spelling: ttft_p95
    return {k: v for k, v in out.items() if k not in NAMES}


ALIASES: dict[str, MetricRef] = _alias_table()


def aliases() -> dict[str, str]:
    """Old spelling -> canonical name (documented in docs/metrics.md)."""
    return {a: r.name for a, r in ALIASES.items()}


def find(name: str) -> MetricRef | None:
    key = (name or "").strip().lower()
    return NAMES.get(key) or ALIASES.get(key)


def resolve(name: str, flag: str = "metric", among: list[str] | None = None) -> MetricRef:
    """The metric a name denotes (canonical or alias); ValueError naming ``flag`` and the close names.

    ``among``: the canonical names this use accepts (e.g. what compare can bootstrap)."""
    ref = find(name)
    allowed = among if among is not None else list(NAMES)
    if ref is None or ref.name not in allowed:
        close = difflib.get_close_matches((name or "").strip().lower(), allowed, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; choose one of {', '.join(allowed)}"
        raise ValueError(f"{flag} {name!r}: unknown metric{hint}")
    return ref


@dataclass(frozen=True)
class Column:
    """One column of a flat table (CSV, history): its name and the value it reads."""

    name: str
    ref: MetricRef = field(compare=False)


def csv_columns() -> list[Column]:
    """summary.csv's figure columns: run figures by summary key, then ``<key>_<stat>`` of each distribution,
    then the server's figures."""
    cols = [Column(m.key, m.ref()) for m in metrics("csv", block=None) if not m.distribution]
    cols += [Column(f"{m.key}_{s}", MetricRef(m, s)) for m in metrics("csv", block=None) if m.distribution
             for s in STAT_KEYS]
    cols += [Column(m.key, m.ref()) for m in metrics("csv", block="server_metrics")]
    return cols


def history_columns() -> list[MetricRef]:
    """The history database's figure columns (scalars, then the percentiles ``history_stats`` names)."""
    out = [m.ref() for m in metrics("history", block=None) if not m.distribution]
    out += [MetricRef(m, s) for m in metrics("history", block=None) if m.distribution for s in m.history_stats]
    return out


COMPARE_ORDER = ("ttft", "tpot", "e2e", "output_tokens_per_s", "requests_per_s", "error_rate")  # compare's table


def compare_refs() -> list[MetricRef]:
    """The metrics ``compare`` bootstraps by default: latencies, then throughput, then the error rate."""
    out: list[MetricRef] = []
    rank = {n: i for i, n in enumerate(COMPARE_ORDER)}
    for m in sorted(metrics("compare"), key=lambda m: rank.get(m.name, len(rank))):
        out += [MetricRef(m, s) for s in m.compare_stats] if m.distribution else [m.ref()]
    return out


def campaign_refs() -> list[MetricRef]:
    """The figures a campaign spreads over its repeats, run figures first (the capacity is the campaign's own)."""
    ms = metrics("campaign")
    return [m.ref() for m in ms if not m.distribution] + [MetricRef(m, s) for m in ms if m.distribution
                                                           for s in m.campaign_stats]


def banded() -> list[MetricRef]:
    """The simulated run's headline figures with 80% prediction intervals: TTFT p50, TPOT p50, output tok/s."""
    return [m.ref("p50") if m.distribution else m.ref() for m in metrics("banded")]
