"""A run judges itself: one function turns a run's facts into its :class:`Verdict`.

``judge(facts)`` is the only place a rule lives; every summary path (offline, streaming soak,
simulated, workers, Ray) reaches it through :class:`~infermeter.analysis.accumulator.Accumulator`,
so a rule added here holds everywhere. Findings carry a code, a severity and the evidence:

invalid (the numbers do not measure the server under the load that was asked for):

- ``client_fd_limit``: requests failed because this client ran out of file descriptors (EMFILE):
  the load asked for was never offered, whatever the server could do;
- ``schedule_lag``: open loop, p99 of (sent_at - intended_at) over ``LAG_P99_LIMIT_MS``;
- ``achieved_rate``: open loop, send rate under ``MIN_RATE_RATIO`` of the rate this run's own
  schedule asked for (its intended send times, not the mean rate: a Poisson schedule of N
  requests differs from its mean by about 1/sqrt(N));
- ``cap_held``: ``--max-concurrency`` held requests back past their send time (the cap was
  reached and the request waited for a permit; a client that merely lagged is ``schedule_lag``);
- ``no_completed``: nothing completed.

``schedule_lag``, ``achieved_rate`` and ``cap_held`` (and the client's own resource limits, e.g. open
files, ``CLIENT_CODES``) say the *client* did not apply the load that was asked for: such a step
says nothing about the server, so a search (find-max, sweep, study) retries it once and then stops
with the reason instead of reading it as an SLO miss (:func:`client_limited`).

saturated (a warning that is never missed; docs/metrics.md "Saturation" says why a saturated
run stays *valid*: its throughput is the server's capacity, measured correctly, while its
latencies grow with the length of the run and describe no steady state). An open-loop run is
saturated when any of these holds:

- ``rate``: requests completed at under ``rate_ratio_limit`` of the offered rate (completions
  per second between the mean ends of the earliest- and the latest-intended completed requests,
  ``analysis.accumulator._Edges``, against the schedule's own rate; the limit is
  ``min(0.9, 1 - 3/sqrt(n))`` for n completions, so noise of small runs does not trip it);
- ``trend``: TTFT from the intended send grows through the run: the mean over ``TREND_BLOCKS``
  equal spans of intended send time rises with a one-sided Mann-Kendall p < ``TREND_P`` and a
  Theil-Sen growth over the run above the median block latency, above 50 ms and above
  ``TREND_MIN_SLOPE`` x the run's span (a queue that outgrows its server adds at least a few
  hundredths of a second per second; prompts that lengthen through a chat do not), over the
  requests that got a first token (those cancelled at the end are censored at one moment, and
  their waits would bend the series down where the queue is longest);
- ``queue``: the server's own waiting queue (scraped ``num_requests_waiting``, or the twin's)
  grew from the start of the run to its end by more than ``QUEUE_GROWTH`` requests.

A closed loop cannot outrun its server (each stream waits for its answer): it is not judged.

Warnings: errors returned, requests scheduled but never finished (``unfinished``: cancelled at
the end of ``--grace`` or never sent; they count against goodput and the SLO), percentiles
resting on too few samples, client CPU near one full core, ``usage_implausible`` (responses
whose server usage claimed more tokens than they could carry: their counts are the stream's),
runs that did not finish, and the run's own notices (``run.json`` ``notices``: client capacity,
worker merges). Scraping ``/metrics`` (``run.json`` ``server_metrics.scrape``,
:mod:`infermeter.telemetry.scraper`): ``scrape_heavy`` when its thread took over
``SCRAPE_CPU_SHARE`` of a core (it shares the client's interpreter), ``scrape_truncated`` when
scrapes hit the size or time cap, ``scrape_capped`` when series were dropped past the series caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infermeter.analysis.results import MIN_SAMPLES, Finding, Saturation, Summary

LAG_P99_LIMIT_MS = 10.0
MIN_RATE_RATIO = 0.95
CAP_HELD_LIMIT_MS = 10.0
CPU_WARN = 0.9
TREND_BLOCKS = 8
TREND_P = 0.01
TREND_MIN_SAMPLES = 20
TREND_FLOOR_S = 0.05
TREND_MIN_SLOPE = 0.02  # seconds of added latency per second of run
RATE_MIN_COMPLETED = 20
QUEUE_GROWTH = 5.0
SCRAPE_CPU_SHARE = 0.05


# Invalid findings that blame the client, not the server (a search must not read them as an SLO miss).
# ``client_cpu`` counts only together with one of the others (it is a warning on its own).
CLIENT_CODES = frozenset({"schedule_lag", "achieved_rate", "cap_held", "client_fd_limit", "fd_limit", "emfile",
                          "client_error", "client_limit", "client_capacity"})


def client_limited(summary: Summary) -> list[str]:
    """The reasons a run's numbers describe the client rather than the server: its invalid findings
    whose code is one of :data:`CLIENT_CODES` (``code: message`` lines); empty when the client kept up.

    Reads the summary's ``findings``, else (a schema 1 file has none) its ``invalid_reasons``."""
    if summary.findings:
        return [f.line() for f in summary.findings if f.severity == "invalid" and f.code in CLIENT_CODES]
    return [str(r) for r in summary.invalid_reasons if str(r).partition(":")[0].strip() in CLIENT_CODES]


@dataclass(frozen=True)
class Facts:
    """What the verdict needs to know about a run (the accumulator fills it)."""

    open_loop: bool = False
    scheduled: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    dropped: int = 0
    lag_p99_ms: float | None = None
    lag_stat: str = "p99"  # "max" where fewer sends than a p99 needs (100): the max stands in for it
    scheduled_rate: float | None = None  # the schedule's own rate over the requests it sent
    offered_rate: float | None = None  # the schedule's rate over every scheduled request
    achieved_rate: float | None = None
    completion_rate: float | None = None
    cap_held: int = 0
    ttft_count: int = 0
    client_cpu: float | None = None
    not_streamed: int = 0
    usage_implausible: int = 0  # records whose usage the client rejected (usage_source "rejected")
    grace_s: float | None = None
    trend: tuple[tuple[float, float], ...] = ()  # (block middle s, mean TTFT from intended s)
    trend_samples: int = 0
    span_s: float = 0.0  # intended span the trend covers
    waiting_start: float | None = None
    waiting_end: float | None = None
    errors: dict[str, int] = field(default_factory=dict)  # failed requests per error class
    run: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]
    saturation: Saturation

    @property
    def valid(self) -> bool:
        return not any(f.severity == "invalid" for f in self.findings)

    @property
    def invalid_reasons(self) -> list[str]:
        return [f.line() for f in self.findings if f.severity == "invalid"]

    @property
    def warnings(self) -> list[str]:
        return [f.line() for f in self.findings if f.severity == "warning"]


def judge(f: Facts) -> Verdict:
    """The verdict of a run from its facts; see the module docstring for every rule."""
    out: list[Finding] = []
    if f.completed == 0:
        out.append(Finding(code="no_completed", severity="invalid", message="no request completed successfully"))
    fd = f.errors.get("client_fd_limit", 0)
    if fd:
        out.append(Finding(code="client_fd_limit", severity="invalid",
                           message=f"{fd} requests failed in this client, which ran out of file descriptors "
                                   "(EMFILE, 'Too many open files'): not the server's failure",
                           evidence={"client_fd_limit": fd},
                           fix="raise the open-file limit (ulimit -n), lower the concurrency, or use --workers N"))
    if f.open_loop:
        if f.lag_p99_ms is not None and f.lag_p99_ms > LAG_P99_LIMIT_MS:
            out.append(Finding(code="schedule_lag", severity="invalid",
                               message=f"{f.lag_stat} schedule lag {f.lag_p99_ms:.1f} ms > {LAG_P99_LIMIT_MS:g} ms "
                                       + ("(the client fell behind)" if f.lag_stat == "p99" else
                                          "(the client fell behind; fewer than 100 sends, so the max stands for p99)"),
                               evidence={"lag_p99_ms": f.lag_p99_ms}, fix="use --workers N, or a lower --rate"))
        tr, ar = f.scheduled_rate, f.achieved_rate
        if tr and ar is not None and ar < MIN_RATE_RATIO * tr:
            out.append(Finding(code="achieved_rate", severity="invalid",
                               message=f"achieved {ar:.2f} req/s < {MIN_RATE_RATIO:.0%} of the scheduled {tr:.2f} req/s",
                               evidence={"achieved_rate": ar, "scheduled_rate": tr}))
        if f.cap_held:
            out.append(Finding(code="cap_held", severity="invalid",
                               message=f"--max-concurrency held {f.cap_held} requests back more than "
                                       f"{CAP_HELD_LIMIT_MS:g} ms past their send time",
                               evidence={"cap_held": f.cap_held}))
    sat = saturation(f)
    if sat.saturated:
        out.append(Finding(code="saturated", severity="warning",
                           message="the server could not keep up with the offered load: " + "; ".join(sat.evidence),
                           evidence={"offered_rate": sat.offered_rate, "completion_rate": sat.completion_rate,
                                     "latency_growth_s": sat.latency_growth_s, "unfinished": sat.unfinished},
                           fix="latency percentiles grow with the run's length here; lower the rate or find the "
                               "capacity with --load find-max"))
    unfinished = f.cancelled + f.dropped
    if unfinished:
        parts = [f"{f.cancelled} cancelled" + (f" at the end of --grace {f.grace_s:g} s" if f.grace_s is not None else "")
                 if f.cancelled else "", f"{f.dropped} never sent" if f.dropped else ""]
        out.append(Finding(code="unfinished", severity="warning",
                           message=f"{unfinished} of {f.scheduled} scheduled requests ({unfinished / max(1, f.scheduled):.0%}) "
                                   f"did not finish ({', '.join(p for p in parts if p)}); they count against goodput and the SLO",
                           evidence={"cancelled": f.cancelled, "dropped": f.dropped, "scheduled": f.scheduled}))
    if f.failed:
        out.append(Finding(code="errors", severity="warning", message=f"{f.failed} requests failed",
                           evidence={"failed": f.failed}))
    if 0 < f.ttft_count < MIN_SAMPLES["p999"]:
        need = "p99 needs >= 100 and p99.9 >= 1,000" if f.ttft_count < MIN_SAMPLES["p99"] else "p99.9 needs >= 1,000"
        out.append(Finding(code="few_samples", severity="warning" if f.ttft_count < MIN_SAMPLES["p99"] else "note",
                           message=f"{f.ttft_count} requests with a first token: {need} samples (shown as –)",
                           evidence={"samples": f.ttft_count}))
    if f.client_cpu is not None and f.client_cpu > CPU_WARN:
        out.append(Finding(code="client_cpu", severity="warning",
                           message=f"the client used {f.client_cpu:.0%} of a core; it may be the bottleneck",
                           evidence={"client_cpu": f.client_cpu}, fix="use --workers N"))
    if f.not_streamed:
        out.append(Finding(code="not_streamed", severity="warning",
                           message=f"{f.not_streamed} responses came as one JSON body; their TTFT/TPOT/ITL are undefined",
                           evidence={"not_streamed": f.not_streamed}))
    if f.usage_implausible:
        out.append(Finding(code="usage_implausible", severity="warning",
                           message=f"{f.usage_implausible} responses reported usage their stream could not carry "
                                   "(or not counts at all); their token counts are the stream's",
                           evidence={"usage_implausible": f.usage_implausible}))
    out.extend(completeness(f.run, f.scheduled))
    out.extend(scrape_findings(f.run))
    for notice in f.run.get("notices") or []:  # what the run noticed about itself (client capacity, merges)
        code, sep, rest = str(notice).partition(": ")
        named = bool(sep) and code.replace("_", "").isalnum() and " " not in code
        out.append(Finding(code=code if named else "notice", severity="warning", message=rest if named else str(notice)))
    return Verdict(findings=tuple(out), saturation=sat)


def saturation(f: Facts) -> Saturation:
    """Saturation with its evidence (see the module docstring)."""
    unfinished = f.cancelled + f.dropped
    base: dict[str, Any] = {"unfinished": unfinished, "unfinished_rate": unfinished / f.scheduled if f.scheduled else None,
                            "waiting_start": f.waiting_start, "waiting_end": f.waiting_end, "offered_rate": f.offered_rate,
                            "completion_rate": f.completion_rate}
    if not f.open_loop:
        return Saturation(saturated=False, basis="closed loop: each stream waits for its answer, so the load "
                                                 "follows the server", **base)
    evidence: list[str] = []
    # completed vs offered
    ratio = limit = None
    if f.offered_rate and f.completion_rate is not None and f.completed >= RATE_MIN_COMPLETED:
        ratio = f.completion_rate / f.offered_rate
        limit = min(0.9, 1.0 - 3.0 / math.sqrt(f.completed))
        if ratio < limit:
            evidence.append(f"completed {f.completion_rate:.3g} req/s of {f.offered_rate:.3g} offered ({ratio:.0%})")
    # latency trend
    tr = trend(f.trend, f.span_s) if f.trend_samples >= TREND_MIN_SAMPLES else None
    if tr is not None and tr["p"] < TREND_P and tr["growth"] > max(tr["median"], TREND_FLOOR_S,
                                                                   TREND_MIN_SLOPE * f.span_s):
        evidence.append(f"TTFT from the intended send grew {_s(tr['start'])} -> {_s(tr['end'])} across the run "
                        f"(Mann-Kendall p={tr['p']:.2g})")
    # the server's own queue
    if f.waiting_start is not None and f.waiting_end is not None and f.waiting_end - f.waiting_start > QUEUE_GROWTH:
        evidence.append(f"the server's waiting queue grew {f.waiting_start:.0f} -> {f.waiting_end:.0f}")
    if evidence and unfinished:
        evidence.append(f"{unfinished} requests never finished")
    judged = ratio is not None or tr is not None or f.waiting_end is not None
    basis = ("open loop: completion rate vs offered rate, TTFT trend over the run, server queue" if judged
             else f"not judged: too few requests ({f.completed} completed)")
    return Saturation(saturated=bool(evidence) if judged or evidence else None, basis=basis,
                      rate_ratio=ratio, rate_ratio_limit=limit,
                      latency_start_s=None if tr is None else tr["start"], latency_end_s=None if tr is None else tr["end"],
                      latency_growth_s=None if tr is None else tr["growth"], trend_p=None if tr is None else tr["p"],
                      trend_blocks=None if tr is None else len(f.trend), evidence=tuple(evidence), **base)


def trend(points: tuple[tuple[float, float], ...], span_s: float) -> dict[str, float] | None:
    """Mann-Kendall trend test and Theil-Sen growth of a short series of (t, y) block means."""
    if len(points) < 5:
        return None
    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    n = len(y)
    i, j = np.triu_indices(n, 1)
    s = float(np.sign(y[j] - y[i]).sum())
    var = n * (n - 1) * (2 * n + 5) / 18.0
    z = (s - 1.0) / math.sqrt(var) if s > 0 else 0.0
    p = 0.5 * math.erfc(z / math.sqrt(2.0))
    dt = t[j] - t[i]
    slopes = (y[j] - y[i])[dt > 0] / dt[dt > 0]
    slope = float(np.median(slopes)) if slopes.size else 0.0
    return {"p": p, "growth": slope * span_s, "median": float(np.median(y)), "start": float(y[0]), "end": float(y[-1])}


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def scrape_findings(run: dict[str, Any]) -> list[Finding]:
    """Where scraping ``/metrics`` could have slowed the client, or left its server metrics partial."""
    sm = run.get("server_metrics") if isinstance(run, dict) else None
    c = sm.get("scrape") if isinstance(sm, dict) else None
    if not isinstance(sm, dict) or not isinstance(c, dict) or not c.get("count"):
        return []
    out: list[Finding] = []
    share, cpu, size = c.get("cpu_share"), c.get("cpu_ms_mean"), c.get("bytes_max") or 0
    if isinstance(share, (int, float)) and share > SCRAPE_CPU_SHARE:
        out.append(Finding(code="scrape_heavy", severity="warning",
                           message=f"scraping /metrics took {share:.0%} of a core ({cpu:.0f} ms CPU per scrape, up to "
                                   f"{size / 2**20:.1f} MiB, every {sm.get('interval_s')} s) on a thread of the client's "
                                   "interpreter; client latencies may include it",
                           evidence={"cpu_share": share, "cpu_ms_mean": cpu, "bytes_max": size},
                           fix="raise --scrape-interval, or --no-scrape"))
    cut, late = int(c.get("truncated") or 0), int(c.get("timed_out") or 0)
    if cut or late:
        parts = [f"{cut} stopped at the {int(c.get('max_bytes') or 0) / 2**20:g} MiB cap" if cut else "",
                 f"{late} dropped after {c.get('timeout_s')} s" if late else ""]
        out.append(Finding(code="scrape_truncated", severity="warning",
                           message=f"{cut + late} of {c['count']} /metrics scrapes incomplete "
                                   f"({', '.join(p for p in parts if p)}); server metrics are partial",
                           evidence={"truncated": cut, "timed_out": late}, fix="--scrape-max-mb"))
    if c.get("series_dropped_max"):
        out.append(Finding(code="scrape_capped", severity="warning",
                           message=f"the server exposed more series than kept: up to {c['series_dropped_max']} per "
                                   f"scrape dropped ({c.get('series_kept')} kept; engine metrics first, at most "
                                   f"{c.get('max_labelsets')} label sets per name)",
                           evidence={"series_dropped_max": c["series_dropped_max"], "series_kept": c.get("series_kept")}))
    return out


def completeness(run: dict[str, Any], records: int) -> list[Finding]:
    """A measured run without a runtime block never finished (killed): say so, with how far it got."""
    if not run:
        return []
    load = run.get("load") or {}
    planned = (load.get("limits") or {}).get("requests") if isinstance(load, dict) else None
    of = f"; {records} of {planned} requests" if planned else ""
    runtime = run.get("runtime")
    if not runtime and run.get("source", "measured") in ("measured", "emulated") and "load" in run:
        return [Finding(code="incomplete", severity="warning",
                        message="the run did not finish (killed?); this summary covers the records on disk" + of)]
    if isinstance(runtime, dict) and runtime.get("interrupted"):
        return [Finding(code="interrupted", severity="warning", message="stopped before its end" + of)]
    return []
