"""Summaries in bounded memory, and per-window series, from record batches.

For soak runs (hours to days, millions of requests) the records never sit in
memory together. :class:`RecordAggregator` is fed record tables batch by
batch (one part file at a time) and answers with a ``summary.json`` dict of
the same keys as :func:`infermeter.analysis.summary.build_summary` plus
``windows``: a series of fixed windows (e.g. hourly p99 TTFT, error rate and
throughput) so that degradation over time is visible::

    agg = RecordAggregator(window_s=3600, slo={"ttft_ms": 500})
    for table in part_tables:          # pyarrow tables in records.ARROW_SCHEMA
        agg.add(table)
    summary = agg.summary(run=run_json)
    summary["windows"]["series"][0]["ttft_ms"]["p99"]

Counts, sums, means, min and max are exact; percentiles come from log-bucket
histograms (within 0.5% of the exact value, see ``analysis.sketch``). A finished
request (ok or error) belongs to the window in which it *ended*, so a window's
throughput is what completed in it; cancelled and dropped requests belong to no
window (and, as in ``build_summary``, do not stretch the measured span). Windows are closed
(reduced to their statistics) once records two windows later arrive; records
arriving for a closed window still count in its totals. Resumed runs subtract
their downtime (``run["segments"]``) from the measured duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.analysis.metrics import col, inter_token_latencies, not_streamed, request_metrics
from infermeter.analysis.summary import MS, build_summary
from infermeter.analysis.verdict import verdict
from infermeter.records.record import ARROW_SCHEMA
from infermeter.analysis.sketch import LogHistogram

WINDOW_STATS = ("mean", "p50", "p90", "p99")


def _strings(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


@dataclass
class _Window:
    index: int
    completed: int = 0
    failed: int = 0
    out_tokens: float = 0.0
    last_t: float = -math.inf
    hists: dict[str, LogHistogram] = field(default_factory=lambda: {k: LogHistogram() for k in
                                                                    ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")})

    def close(self, window_s: float, run_start: float = -math.inf, run_end: float = math.inf) -> dict[str, Any]:
        """Statistics of the window; the run's first and last windows count only the time the run covered."""
        start = self.index * window_s
        span = max(min(start + window_s, run_end) - max(start, run_start), 1e-9)
        out: dict[str, Any] = {
            "index": self.index, "start_s": start, "end_s": start + window_s, "span_s": span, "completed": self.completed,
            "failed": self.failed, "error_rate": self.failed / max(1, self.completed + self.failed),
            "request_throughput": self.completed / span, "output_token_throughput": self.out_tokens / span,
        }
        for key, h in self.hists.items():
            d = h.distribution(MS)
            out[key] = {s: d[s] for s in WINDOW_STATS}
        return out


class RecordAggregator:
    """Streaming summary of record batches; see the module docstring."""

    def __init__(self, window_s: float | None = None, slo: dict[str, float] | None = None) -> None:
        self.window_s = window_s
        self.slo = slo or {}
        self.rows = 0
        self.completed = self.failed = self.dropped = self.cancelled = 0
        self.errors: dict[str, int] = {}
        self.first_intended, self.last_end = math.inf, -math.inf
        self.sent = 0
        self.sent_span = [math.inf, -math.inf]
        self.intended_span = [math.inf, -math.inf]
        self.n_in = self.n_out = 0.0
        self.n_in_rows = self.n_out_rows = 0
        self.n_server = self.mismatches = self.not_streamed = 0
        self.cached: float | None = None
        self.good = 0
        self.hists = {k: LogHistogram() for k in ("ttft", "ttft_intended", "tpot", "itl", "e2e", "e2e_intended",
                                                  "lag", "out_tps")}
        self._open: dict[int, _Window] = {}
        self._closed: dict[int, dict[str, Any]] = {}

    # -- feeding -------------------------------------------------------------------------------
    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if "phase" in table.column_names:
            table = table.filter(pc.equal(table.column("phase"), "measure"))
            if table.num_rows == 0:
                return
        self.rows += table.num_rows
        outcome = _strings(table, "outcome")
        ok, err = outcome == "ok", outcome == "error"
        self.completed += int(ok.sum())
        self.failed += int(err.sum())
        self.dropped += int((outcome == "dropped").sum())
        self.cancelled += int((outcome == "cancelled").sum())
        for cls in _strings(table, "error_class")[err]:
            self.errors[str(cls)] = self.errors.get(str(cls), 0) + 1
        intended, sent, ended = col(table, "intended_at"), col(table, "sent_at"), col(table, "ended_at")
        self.first_intended = min(self.first_intended, float(np.nanmin(intended)))
        fin = ended[ok | err]  # cancelled requests end when the run gave up on them: not part of the window
        if np.isfinite(fin).any():
            self.last_end = max(self.last_end, float(np.nanmax(fin)))
        was_sent = np.isfinite(sent)
        if was_sent.any():
            self.sent += int(was_sent.sum())
            self.sent_span = [min(self.sent_span[0], float(sent[was_sent].min())), max(self.sent_span[1], float(sent[was_sent].max()))]
            iw = intended[was_sent]
            self.intended_span = [min(self.intended_span[0], float(iw.min())), max(self.intended_span[1], float(iw.max()))]
            self.hists["lag"].add(sent[was_sent] - intended[was_sent])
        okt = table.filter(pa.array(ok))
        m = request_metrics(okt)
        for name in ("ttft", "ttft_intended", "tpot", "e2e", "e2e_intended", "out_tps"):
            self.hists[name].add(getattr(m, name))
        self.hists["itl"].add(inter_token_latencies(okt))
        self.n_in += float(np.nansum(m.n_in))
        self.n_out += float(np.nansum(m.n_out))
        self.n_in_rows += int(np.isfinite(m.n_in).sum())
        self.n_out_rows += int(np.isfinite(m.n_out).sum())
        src = _strings(okt, "usage_source")
        self.n_server += int((src == "server").sum())
        self.not_streamed += not_streamed(okt)
        stream_tok = col(okt, "stream_tokens")
        self.mismatches += int(np.sum((src == "server") & np.isfinite(m.n_out) & (stream_tok != m.n_out)))
        cached = okt.column("cached_tokens")
        if cached.null_count < okt.num_rows:
            self.cached = (self.cached or 0.0) + float(pc.sum(cached).as_py() or 0)
        if self.slo:
            self.good += int(self._meets(m).sum())
        if self.window_s:
            self._add_windows(table, outcome, intended, ended, okt, m)

    def _meets(self, m: Any) -> np.ndarray:
        meets = np.ones(m.ttft.size, dtype=bool)
        for key, limit in self.slo.items():
            if key == "ttft_ms":
                meets &= m.ttft_intended * MS <= limit
            elif key == "tpot_ms":
                meets &= ~(m.tpot * MS > limit)
            elif key == "e2e_ms":
                meets &= m.e2e_intended * MS <= limit
        return meets

    def _add_windows(self, table: pa.Table, outcome: np.ndarray, intended: np.ndarray, ended: np.ndarray,
                     okt: pa.Table, m: Any) -> None:
        assert self.window_s
        t = np.where(np.isfinite(ended), ended, intended)
        w_all = np.floor(t / self.window_s).astype(np.int64)
        ok = outcome == "ok"
        w_ok = w_all[ok]
        for w in np.unique(w_all[ok | (outcome == "error")]):  # cancelled / dropped rows belong to no window
            sel = w_all == w
            win = self._window(int(w))
            n_ok = int((ok & sel).sum())
            n_err = int(((outcome == "error") & sel).sum())
            if isinstance(win, dict):  # already closed: count only
                win["completed"] += n_ok
                win["failed"] += n_err
                continue
            win.completed += n_ok
            win.failed += n_err
            win.last_t = max(win.last_t, float(t[sel].max()))
            mine = w_ok == w
            win.out_tokens += float(np.nansum(m.n_out[mine]))
            win.hists["ttft_ms"].add(m.ttft[mine])
            win.hists["tpot_ms"].add(m.tpot[mine])
            win.hists["e2e_ms"].add(m.e2e[mine])
            win.hists["itl_ms"].add(inter_token_latencies(okt.filter(pa.array(mine))))
        newest = max(self._open, default=None)
        if newest is not None:
            for w in [w for w in self._open if w < newest - 1]:
                self._closed[w] = self._open.pop(w).close(self.window_s, self.first_intended)

    def _window(self, w: int) -> _Window | dict[str, Any]:
        if w in self._closed:
            return self._closed[w]
        if w not in self._open:
            self._open[w] = _Window(w)
        return self._open[w]

    # -- answers -------------------------------------------------------------------------------
    def windows(self) -> list[dict[str, Any]]:
        """Every window from the first to the last, empty ones (downtime) included."""
        assert self.window_s
        done = dict(self._closed)
        last = max(self._open, default=None)
        done.update({w: win.close(self.window_s, self.first_intended, win.last_t if w == last else math.inf)
                     for w, win in self._open.items()})
        if not done:
            return []
        return [done.get(w) or _Window(w).close(self.window_s) for w in range(min(done), max(done) + 1)]

    def summary(self, run: dict[str, Any] | None = None) -> dict[str, Any]:
        run = run or {}
        out = build_summary(pa.Table.from_pylist([], schema=ARROW_SCHEMA), run=run)
        gap = sum(float(s.get("gap_s") or 0.0) for s in run.get("segments") or [])
        duration = 0.0
        if math.isfinite(self.first_intended) and math.isfinite(self.last_end):
            duration = max(0.0, self.last_end - self.first_intended - gap)

        def per_s(x: float) -> float | None:
            return x / duration if duration > 0 else None

        load = run.get("load") or {}
        open_loop = bool(load.get("open_loop"))
        achieved = target = None
        if self.sent >= 2:
            span_s = self.sent_span[1] - self.sent_span[0] - gap
            span_i = self.intended_span[1] - self.intended_span[0] - gap
            achieved = (self.sent - 1) / span_s if span_s > 0 else None
            if open_loop and span_i > 0:
                target = (self.sent - 1) / span_i  # the schedule's own rate (see analysis.verdict)
        scheduled = target
        if open_loop and load.get("target_rate"):
            target = float(load["target_rate"])
        lag = self.hists["lag"].distribution(MS)
        runtime = run.get("runtime") or {}
        v = verdict({"open_loop": open_loop, "lag_p99_ms": lag["p99"], "target_rate": scheduled, "achieved_rate": achieved,
                     "cap_held": runtime.get("cap_held", 0), "completed": self.completed, "failed": self.failed,
                     "ttft_count": int(self.hists["ttft"].n), "client_cpu": runtime.get("client_cpu"),
                     "run": run, "records": self.completed + self.failed + self.dropped + self.cancelled})
        if self.not_streamed:
            v.warnings.append(f"not_streamed: {self.not_streamed} responses came as one JSON body; "
                              "their TTFT/TPOT/ITL are undefined")
        source = "server" if self.n_server == self.completed and self.completed else ("stream" if self.n_server == 0 else "mixed")
        h = self.hists
        out.update({
            "completed": self.completed, "failed": self.failed, "dropped": self.dropped, "cancelled": self.cancelled,
            "duration_s": duration, "request_throughput": per_s(self.completed), "input_token_throughput": per_s(self.n_in),
            "output_token_throughput": per_s(self.n_out), "total_token_throughput": per_s(self.n_in + self.n_out),
            "goodput": per_s(self.good) if self.slo else None, "valid": v.valid, "invalid_reasons": v.invalid_reasons,
            "warnings": v.warnings, "ttft_ms": h["ttft"].distribution(MS), "tpot_ms": h["tpot"].distribution(MS),
            "itl_ms": h["itl"].distribution(MS), "e2e_ms": h["e2e"].distribution(MS),
            "ttft_from_intended_ms": h["ttft_intended"].distribution(MS),
            "e2e_from_intended_ms": h["e2e_intended"].distribution(MS), "schedule_lag_ms": lag,
            "output_tokens_per_s_per_request": h["out_tps"].distribution(), "errors": dict(self.errors),
            "error_rate": self.failed / max(1, self.completed + self.failed), "target_rate": target, "scheduled_rate": scheduled,
            "achieved_rate": achieved,
            "mean_input_tokens": self.n_in / self.n_in_rows if self.completed and self.n_in_rows else None,
            "mean_output_tokens": self.n_out / self.n_out_rows if self.completed and self.n_out_rows else None,
            "total_input_tokens": int(self.n_in), "total_output_tokens": int(self.n_out), "token_count_source": source,
            "usage_mismatches": self.mismatches,
            "cached_prompt_tokens": None if self.cached is None else int(self.cached),
            "percentiles": "log-bucket histograms (within 0.5%)",
        })
        if self.window_s:
            out["windows"] = {"window_s": self.window_s, "assigned_by": "end time", "series": self.windows()}
        return out
