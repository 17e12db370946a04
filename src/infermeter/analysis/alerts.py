"""Alert rules on a run's summary and on time windows of long runs (for CI gates).

Promise: :func:`parse_alert` turns ``"ttft_p95_ms>500"`` into an
:class:`Alert` (or raises :class:`~infermeter.errors.ConfigError` naming the
rule and the known names); :func:`evaluate_alerts` checks each alert on the
whole-run summary and on every window, and returns only what fired — an empty
list means all clear. A metric the run did not measure (``None``) never fires;
:func:`unavailable_alerts` lists those so the caller can warn.

    >>> from infermeter.analysis.results import Distribution
    >>> a = parse_alert("ttft_p95_ms>500")
    >>> evaluate_alerts([a], Summary(ttft_ms=Distribution(count=100, p95=612.0)), [])[0]["message"]
    'ttft_p95_ms = 612 > 500 (whole run)'

Names are the metric catalog's (:mod:`infermeter.analysis.catalog`, the grammar ``--slo``,
``compare --metric`` and ``history --trend`` share; old spellings such as ``ttft_ms.p95``,
``ttft_p95`` or ``output_throughput`` are aliases). See :func:`known_names` and docs/telemetry.md:

* ``<d>_<stat>_ms`` for ``d`` in ttft, tpot, itl, e2e, ttft_from_intended,
  e2e_from_intended, schedule_lag and ``stat`` in mean, stdev, min, max, p50,
  p90, p95, p99, p999 — from ``summary["<d>_ms"][stat]``;
* ``output_tps_per_user`` (mean output tokens/s of a request) and
  ``output_tps_per_user_<stat>``;
* run scalars: error_rate, failed, dropped, completed, requests_per_s,
  output_tokens_per_s, input_tokens_per_s, total_tokens_per_s (or their summary keys
  request_throughput, output_token_throughput, ...), goodput, achieved_rate, usage_mismatches;
* server: kv_cache_usage_max (alias kv_cache_usage), kv_cache_usage_mean,
  num_requests_waiting_max, num_requests_running_max (aliases without ``_max``),
  prefix_cache_hit_rate, num_preemptions;
* GPU: gpu_temperature_c (max), gpu_temperature_c_mean, gpu_throttled_fraction,
  gpu_thermal_throttled_fraction, gpu_power_throttled_fraction, gpu_power_w (max),
  gpu_utilization_pct (mean), energy_per_output_token_j.

A window is a dict shaped like the summary (only the keys it has are used)
plus ``start_s`` and ``end_s``; consecutive windows where an alert fires are
reported as one entry spanning them, with the worst value.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infermeter.analysis.catalog import ALIASES, MetricRef, refs
from infermeter.analysis.results import Summary
from infermeter.errors import ConfigError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq, "!=": operator.ne,
}
_RULE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")

def _alertable() -> dict[str, MetricRef]:
    """Every name an alert accepts: the catalog's alert metrics by canonical name and by alias."""
    out = {r.name: r for r in refs() if r.metric.shows("alert")}
    out.update({a: r for a, r in ALIASES.items() if r.metric.shows("alert")})
    return out


_NAMES = _alertable()


def known_names() -> list[str]:
    """Every metric name an alert may use (canonical names and their aliases)."""
    return sorted(_NAMES)


@dataclass(frozen=True)
class Alert:
    """One rule: ``metric op threshold`` as written by the user in ``text``."""

    text: str
    metric: str
    op: str
    threshold: float

    def value(self, data: Summary | Mapping[str, Any]) -> float | None:
        """The metric in a summary or a window's JSON; ``None`` when it was not measured (a window
        without ``error_rate`` has it computed from its counts)."""
        if isinstance(data, Mapping) and self.metric == "error_rate" and "error_rate" not in data and "completed" in data:
            done = (data.get("completed") or 0) + (data.get("failed") or 0)
            return (data.get("failed") or 0) / done if done else None
        return _NAMES[self.metric].value(data)

    def fires(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.threshold)

    def worse(self, a: float, b: float) -> float:
        """The value further past the threshold (max for > and >=, min for < and <=)."""
        return min(a, b) if self.op in ("<", "<=") else max(a, b)


def parse_alert(text: str) -> Alert:
    """``"name op number"`` -> :class:`Alert`; ``ConfigError`` names the rule on bad input."""
    m = _RULE.match(text or "")
    if not m:
        raise ConfigError(f"--alert {text!r}: expected NAME OP NUMBER, e.g. 'ttft_p95_ms>500' (OP: > >= < <= == !=)")
    name, op, num = m.group(1).lower(), m.group(2), float(m.group(3))
    if name not in _NAMES:
        close = difflib.get_close_matches(name, _NAMES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see docs/telemetry.md for the list"
        raise ConfigError(f"--alert {text!r}: unknown metric {name!r}{hint}")
    return Alert(text=text.strip(), metric=name, op=op, threshold=num)


def _fmt(v: float | None) -> str:
    return "?" if v is None else f"{v:.4g}"


def _entry(a: Alert, value: float, scope: str, start: float | None, end: float | None, n: int = 0) -> dict[str, Any]:
    where = "whole run" if scope == "run" else f"window {_fmt(start)}-{_fmt(end)} s" + (f" ({n} windows)" if n > 1 else "")
    return {
        "alert": a.text, "metric": a.metric, "op": a.op, "threshold": a.threshold, "value": value,
        "scope": scope, "start_s": start, "end_s": end, "windows": n if scope == "window" else None,
        "message": f"{a.metric} = {_fmt(value)} {a.op} {_fmt(a.threshold)} ({where})",
    }


def evaluate_alerts(alerts: Iterable[Alert], summary: Summary, windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fired alerts: one entry for the whole run and one per run of consecutive firing windows."""
    fired: list[dict[str, Any]] = []
    ordered = sorted(windows, key=lambda w: (w.get("start_s") or 0.0))
    for a in alerts:
        v = a.value(summary)
        if a.fires(v):
            assert v is not None
            fired.append(_entry(a, v, "run", None, None))
        span: list[Any] | None = None  # [start, end, worst, count]
        for w in ordered:
            wv = a.value(w)
            if a.fires(wv):
                assert wv is not None
                if span is None:
                    span = [w.get("start_s"), w.get("end_s"), wv, 1]
                else:
                    span[1], span[2], span[3] = w.get("end_s"), a.worse(span[2], wv), span[3] + 1
            elif span is not None:
                fired.append(_entry(a, span[2], "window", span[0], span[1], span[3]))
                span = None
        if span is not None:
            fired.append(_entry(a, span[2], "window", span[0], span[1], span[3]))
    return fired


def unavailable_alerts(alerts: Iterable[Alert], summary: Summary) -> list[str]:
    """Rules whose metric the run did not measure (they cannot fire): warn about these."""
    return [a.text for a in alerts if a.value(summary) is None]
