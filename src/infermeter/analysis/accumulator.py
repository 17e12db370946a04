"""The one summary builder: record tables in (any batching), one :class:`Summary` out.

Every path that summarizes records uses it: a finished run (one table), ``infermeter
summarize``, a soak (part by part, with windows), a resumed soak (its parts replayed), worker
and Ray runs (merged records) and the twin's simulated runs (batch by batch as they finish)::

    acc = Accumulator.for_run(run_json)       # SLO, windows and ITL rule from run.json
    for table in tables:                      # pyarrow tables in records.ARROW_SCHEMA
        acc.add(table)
    summary = acc.summary(run_json)           # Summary; summary.to_json() is summary.json

Only ``phase == "measure"`` rows count. The measured window runs from the first measured
request's intended send to the last finished one (ok or error; cancelled requests end when the
run gave up on them and do not stretch it); resumed runs subtract their downtime
(``run["segments"]``). Distributions are exact (numpy's linear interpolation) while a metric
holds at most ``exact_limit`` samples; beyond that they continue in a log-bucket histogram
(exact counts, means, min and max; percentiles within 0.5 %, :mod:`infermeter.analysis.sketch`),
and ``summary_method`` says so. The result does not depend on how the records were batched.
Windows: a finished request belongs to the window in which it ended.

Token accounting: counts come from server usage when present, else from the stream
(``token_count_source``); ``usage_mismatches`` counts requests whose usage and stream chunk
count differ, except a normal end on EOS (``finish_reason == "stop"``, usage one more than the
stream: the EOS token streams no text); ``usage_implausible`` counts requests whose usage the
client set aside as more than the response could carry (``usage_source == "rejected"``, their
counts are the stream's). Reasoning models (some completed request with ``reasoning_tokens > 0``)
add ``ttfo_ms`` (time to the first answer token, every completed request, the shape of
``ttft_ms``), ``reasoning_requests`` and the thinking and answer token totals and per-request
means; a run without thinking has none of these keys. ITL pools the gaps between token-bearing chunks (a
chunk of k tokens gives k gaps of gap/k); records without chunk times (simulated runs that
did not keep them) give each request ``n - 1`` gaps of its TPOT when ``derive_itl`` is set.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.analysis import catalog
from infermeter.analysis.metrics import RequestMetrics, col, itl_samples, not_streamed, request_metrics
from infermeter.analysis.results import MIN_SAMPLES, SCHEMA_VERSION, Distribution, Summary, Window, Windows
from infermeter.analysis.sketch import LogHistogram
from infermeter.analysis.verdict import TREND_BLOCKS, Facts, judge
from infermeter.redact import clip

MS = 1000.0
EXACT_LIMIT = 2_000_000  # samples per metric kept exactly
SKETCH_METHOD = "log-bucket histograms (exact counts, means, min, max; percentiles within 0.5%)"
_MAX_MESSAGES = 32  # distinct error messages remembered per class

# the summary distributions of completed requests, one per catalog metric with a per-request formula:
# RequestMetrics attribute -> summary key (schedule lag covers every sent request, ITL pools chunk gaps: apart)
_PER_REQUEST = {m.per_request: m.key for m in catalog.CATALOG
                if m.distribution and m.per_request and m.per_request != "schedule_lag"}
_UNITS = {m.per_request: m.unit for m in catalog.CATALOG if m.per_request}

class Samples:
    """One metric's samples: exact while at most ``limit``, then a :class:`LogHistogram`."""

    __slots__ = ("limit", "_chunks", "_n", "_hist")

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.limit = limit
        self._chunks: list[np.ndarray] = []
        self._n = 0
        self._hist: LogHistogram | None = None

    @property
    def n(self) -> int:
        return self._n if self._hist is None else int(round(self._hist.n))

    @property
    def exact(self) -> bool:
        return self._hist is None

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        v = np.asarray(values, dtype=np.float64)
        if weights is not None:
            w = np.asarray(weights, dtype=np.int64)
            keep = np.isfinite(v) & (w > 0)
            v, w = v[keep], w[keep]
            if self._hist is None and self._n + int(w.sum()) <= self.limit:
                self._store(np.repeat(v, w))
            else:
                self._to_hist().add(v, w.astype(np.float64))
            return
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        if self._hist is None and self._n + v.size <= self.limit:
            self._store(v)
        else:
            self._to_hist().add(v)

    def _store(self, v: np.ndarray) -> None:
        if v.size:
            self._chunks.append(v)
            self._n += int(v.size)

    def _to_hist(self) -> LogHistogram:
        if self._hist is None:
            self._hist = LogHistogram()
            for c in self._chunks:
                self._hist.add(c)
            self._chunks = []
        return self._hist

    def values(self) -> np.ndarray:
        if not self._chunks:
            return np.empty(0)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]

    def distribution(self, scale: float = 1.0) -> Distribution:
        if self._hist is not None:
            return self._hist.distribution(scale)
        return exact_distribution(self.values(), scale)


def exact_distribution(values: Any, scale: float = 1.0) -> Distribution:
    """count, mean, stdev (population), min, max and percentiles of the finite values x scale;
    a percentile is None below its minimum sample count (``results.MIN_SAMPLES``)."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return Distribution()
    a = a * scale
    p = np.percentile(a, (50, 90, 95, 99, 99.9))
    pct = {k: float(v) if a.size >= MIN_SAMPLES[k] else None for k, v in zip(("p50", "p90", "p95", "p99", "p999"), p)}
    return Distribution(count=int(a.size), mean=float(a.mean()), stdev=float(a.std()), min=float(a.min()),
                        max=float(a.max()), **pct)


class _Trend:
    """TTFT from the intended send, bucketed by intended time (adaptive width, bounded memory)."""

    __slots__ = ("width", "buckets", "n")
    MAX_BUCKETS = 2048

    def __init__(self) -> None:
        self.width = 1.0 / 16
        self.buckets: dict[int, list[float]] = {}
        self.n = 0

    def add(self, t: np.ndarray, y: np.ndarray) -> None:
        keep = np.isfinite(t) & np.isfinite(y)
        t, y = t[keep], y[keep]
        if t.size == 0:
            return
        self.n += int(t.size)
        idx = np.floor(t / self.width).astype(np.int64)
        uniq, inv = np.unique(idx, return_inverse=True)
        sums = np.bincount(inv, weights=y)
        counts = np.bincount(inv)
        for k, s, c in zip(uniq.tolist(), sums.tolist(), counts.tolist()):
            b = self.buckets.setdefault(k, [0.0, 0.0])
            b[0] += c
            b[1] += s
        while len(self.buckets) > self.MAX_BUCKETS:
            merged: dict[int, list[float]] = {}
            for k, (c, s) in self.buckets.items():
                m = merged.setdefault(k // 2, [0.0, 0.0])
                m[0] += c
                m[1] += s
            self.buckets = merged
            self.width *= 2

    def blocks(self) -> tuple[tuple[tuple[float, float], ...], float]:
        """(middle, mean) of TREND_BLOCKS equal spans of intended time, and the span."""
        if not self.buckets:
            return (), 0.0
        keys = np.array(sorted(self.buckets))
        mids = (keys + 0.5) * self.width
        cs = np.array([self.buckets[k][0] for k in keys.tolist()])
        ss = np.array([self.buckets[k][1] for k in keys.tolist()])
        lo, hi = keys[0] * self.width, (keys[-1] + 1) * self.width
        span = hi - lo
        if span <= 0:
            return (), 0.0
        b = np.minimum(((mids - lo) / span * TREND_BLOCKS).astype(np.int64), TREND_BLOCKS - 1)
        out = []
        for k in range(TREND_BLOCKS):
            sel = b == k
            n = cs[sel].sum()
            if n >= 2:
                out.append((float(lo + (k + 0.5) * span / TREND_BLOCKS), float(ss[sel].sum() / n)))
        return tuple(out), float(span)


class _Edges:
    """The ``K`` earliest- and ``K`` latest-intended completed requests: (intended, ended) pairs.

    The completion rate is measured between them (:meth:`completion_rate`): the mean end of the
    latest group minus the mean end of the earliest, for the completions in between. Means over ``K``
    requests, not the extreme ends: the first and last *completion* times carry the whole spread of
    request lengths (a healthy 10 s run of 0.5-4 s requests completes over 13.5 s, which would read as
    74% of the offered rate), while a mean over the ends of requests sent together moves only with
    the server's backlog."""

    __slots__ = ("early", "late")
    K = 32

    def __init__(self) -> None:
        self.early: list[tuple[float, int, float]] = []  # (intended, request id, ended)
        self.late: list[tuple[float, int, float]] = []

    def add(self, intended: np.ndarray, ended: np.ndarray, rid: np.ndarray) -> None:
        keep = np.isfinite(intended) & np.isfinite(ended)
        if not keep.any():
            return
        i, e, r = intended[keep], ended[keep], rid[keep]
        k = self.K
        if i.size > k:  # only a batch's own K earliest and K latest can enter, and every value tied with them
            lo = np.flatnonzero(i <= np.partition(i, k - 1)[k - 1])
            hi = np.flatnonzero(i >= np.partition(i, i.size - k)[i.size - k])
        else:
            lo = hi = np.arange(i.size)
        # ordered by intended time, ties by request id (not by end: that would favour the fastest of a tied wave),
        # so that the kept sets do not depend on how the records were batched
        self.early = sorted(self.early + list(zip(i[lo].tolist(), r[lo].tolist(), e[lo].tolist())))[:k]
        self.late = sorted(self.late + list(zip(i[hi].tolist(), r[hi].tolist(), e[hi].tolist())))[-k:]

    def completion_rate(self, completed: int, gap_s: float = 0.0) -> float | None:
        k = max(1, min(self.K, completed // 4))
        if completed < 2 or not self.early:
            return None
        first, last = self.early[:k], self.late[-k:]
        span = sum(e for _, _, e in last) / k - sum(e for _, _, e in first) / k - gap_s
        return (completed - k) / span if span > 0 and completed > k else None


class _Window:
    __slots__ = ("index", "completed", "failed", "out_tokens", "last_t", "dists")

    def __init__(self, index: int) -> None:
        self.index = index
        self.completed = self.failed = 0
        self.out_tokens = 0.0
        self.last_t = -math.inf
        self.dists = {k: Samples(limit=200_000) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}

    def close(self, window_s: float, run_start: float = -math.inf, run_end: float = math.inf) -> Window:
        """The window's statistics; the run's first and last windows count only the time the run covered."""
        start = self.index * window_s
        span = max(min(start + window_s, run_end) - max(start, run_start), 1e-9)
        return Window(index=self.index, start_s=start, end_s=start + window_s, span_s=span, completed=self.completed,
                      failed=self.failed, error_rate=self.failed / max(1, self.completed + self.failed),
                      request_throughput=self.completed / span, output_token_throughput=self.out_tokens / span,
                      **{k: d.distribution(MS) for k, d in self.dists.items()})


class _Reasoning:
    """Reasoning models: time to first output (answer) token and thinking vs answer tokens, over the
    completed requests; reported only when some request thought (``reasoning_tokens > 0``)."""

    __slots__ = ("ttfo", "requests", "known", "n_reasoning", "n_answer", "answer_rows")

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.ttfo = Samples(limit)
        self.requests = 0  # completed requests that thought
        self.known = 0  # completed requests whose thinking count is known (0 included)
        self.n_reasoning = self.n_answer = 0.0
        self.answer_rows = 0

    def add(self, m: RequestMetrics) -> None:
        self.ttfo.add(m.ttfo)
        r = m.n_reasoning
        self.requests += int(np.sum(r > 0))
        self.known += int(np.isfinite(r).sum())
        self.n_reasoning += float(np.nansum(r))
        self.n_answer += float(np.nansum(m.n_answer))
        self.answer_rows += int(np.isfinite(m.n_answer).sum())

    def figures(self) -> dict[str, Any]:
        """The summary's reasoning keys (none for a run without thinking: its summary keeps its keys)."""
        if not self.requests:
            return {}
        return {"ttfo_ms": self.ttfo.distribution(MS), "reasoning_requests": self.requests,
                "total_reasoning_tokens": int(self.n_reasoning), "total_answer_tokens": int(self.n_answer),
                "mean_reasoning_tokens": self.n_reasoning / self.known if self.known else None,
                "mean_answer_tokens": self.n_answer / self.answer_rows if self.answer_rows else None}


def _strings(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, None, dtype=object)
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


def _equals(table: pa.Table, name: str, value: str) -> np.ndarray:
    """Rows whose string column ``name`` is ``value``, as booleans (a null or a missing column: False); compared
    in Arrow, without a Python string per row."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return np.asarray(pc.fill_null(pc.equal(table.column(name), value), False).to_numpy(zero_copy_only=False),
                      dtype=bool)


class Accumulator:
    """Streaming summary of record batches; see the module docstring."""

    def __init__(self, *, slo: dict[str, float] | None = None, window_s: float | None = None,
                 exact_limit: int = EXACT_LIMIT, derive_itl: bool = False) -> None:
        self.slo = dict(slo or {})
        self.window_s = window_s
        self.derive_itl = derive_itl
        self.rows = 0
        self.completed = self.failed = self.dropped = self.cancelled = 0
        self.errors: Counter[str] = Counter()
        self.messages: dict[str, Counter[str]] = {}
        self.first_intended, self.last_end = math.inf, -math.inf
        self.intended_all = [math.inf, -math.inf]
        self.sent = 0
        self.sent_span = [math.inf, -math.inf]
        self.intended_span = [math.inf, -math.inf]
        self.n_in = self.n_out = 0.0
        self.n_in_rows = self.n_out_rows = 0
        self.n_server = self.mismatches = self.not_streamed = self.usage_implausible = 0
        self.cached: float | None = None
        self.good = 0
        self.dists = {k: Samples(exact_limit) for k in (*_PER_REQUEST, "itl", "lag")}
        self.reasoning = _Reasoning(exact_limit)
        self.trend = _Trend()
        self.edges: _Edges | None = _Edges()
        self._open: dict[int, _Window] = {}
        self._closed: dict[int, Window] = {}
        self._late: dict[int, list[int]] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A checkpoint from before ``edges`` existed resumes without a completion rate (the saturation's rate
        rule then says it was not judged) rather than one measured over part of the run."""
        state.setdefault("edges", None)
        state.setdefault("usage_implausible", 0)
        state.setdefault("reasoning", _Reasoning())
        for k in (*_PER_REQUEST, "itl", "lag"):  # a metric added to the catalog since: its samples start empty
            state["dists"].setdefault(k, Samples())
        self.__dict__.update(state)

    @classmethod
    def for_run(cls, run: dict[str, Any] | None, **kw: Any) -> Accumulator:
        """An accumulator set up from ``run.json``: its SLO, its soak windows, and (simulated runs
        without per-token times) ITL derived from TPOT."""
        run = run or {}
        sim = ((run.get("config") or {}).get("simulate") or {}) if isinstance(run.get("config"), dict) else {}
        kw.setdefault("slo", run.get("slo") or None)
        kw.setdefault("window_s", (run.get("soak") or {}).get("window_s"))
        kw.setdefault("derive_itl", run.get("source") == "simulated" and sim.get("token_times") is False)
        return cls(**kw)

    # -- feeding -------------------------------------------------------------------------------
    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if "phase" in table.column_names:
            table = table.filter(pc.equal(table.column("phase"), "measure"))
            if table.num_rows == 0:
                return
        self.rows += table.num_rows
        self.usage_implausible += int(_equals(table, "usage_source", "rejected").sum())
        ok, err = _equals(table, "outcome", "ok"), _equals(table, "outcome", "error")
        self.completed += int(ok.sum())
        self.failed += int(err.sum())
        if not (ok | err).all():
            self.dropped += int(_equals(table, "outcome", "dropped").sum())
            self.cancelled += int(_equals(table, "outcome", "cancelled").sum())
        if err.any():
            self._add_errors(table, err)
        intended, sent, ended = col(table, "intended_at"), col(table, "sent_at"), col(table, "ended_at")
        first = col(table, "first_token_at")
        self.first_intended = min(self.first_intended, float(np.nanmin(intended)))
        self.intended_all = [min(self.intended_all[0], float(np.nanmin(intended))),
                             max(self.intended_all[1], float(np.nanmax(intended)))]
        fin = ended[ok | err]  # cancelled requests end when the run gave up on them: not part of the window
        if np.isfinite(fin).any():
            self.last_end = max(self.last_end, float(np.nanmax(fin)))
        ok_end = ended[ok]
        if self.edges is not None:
            self.edges.add(intended[ok], ok_end, col(table, "request_id")[ok])
        was_sent = np.isfinite(sent)
        if was_sent.any():
            self.sent += int(was_sent.sum())
            self.sent_span = [min(self.sent_span[0], float(sent[was_sent].min())),
                              max(self.sent_span[1], float(sent[was_sent].max()))]
            iw = intended[was_sent]
            self.intended_span = [min(self.intended_span[0], float(iw.min())), max(self.intended_span[1], float(iw.max()))]
            self.dists["lag"].add(sent[was_sent] - intended[was_sent])
            # TTFT from the intended send of every request that got a first token. (Those that never did
            # are censored at one moment, the end of the run: their waits shrink with later sends and
            # would bend the trend down just where the queue is longest.)
            got = was_sent & np.isfinite(first)
            self.trend.add(intended[got], (first - intended)[got])
        okt = table.filter(pa.array(ok))
        m = request_metrics(okt)
        for name in _PER_REQUEST:
            self.dists[name].add(getattr(m, name))
        self._add_itl(okt, m)
        self.reasoning.add(m)
        self.n_in += float(np.nansum(m.n_in))
        self.n_out += float(np.nansum(m.n_out))
        self.n_in_rows += int(np.isfinite(m.n_in).sum())
        self.n_out_rows += int(np.isfinite(m.n_out).sum())
        server = _equals(okt, "usage_source", "server")
        self.n_server += int(server.sum())
        self.not_streamed += not_streamed(okt)
        stream_tok = col(okt, "stream_tokens")
        eos_extra = _equals(okt, "finish_reason", "stop") & (m.n_out - stream_tok == 1)
        self.mismatches += int(np.sum(server & np.isfinite(m.n_out) & (stream_tok != m.n_out) & ~eos_extra))
        if "cached_tokens" in okt.column_names:
            cached = okt.column("cached_tokens")
            if cached.null_count < okt.num_rows:
                self.cached = (self.cached or 0.0) + float(pc.sum(cached).as_py() or 0)
        if self.slo:
            self.good += int(meets_slo(m, self.slo).sum())
        if self.window_s:
            self._add_windows(ok, err, intended, ended, okt, m)

    def _add_errors(self, table: pa.Table, err: np.ndarray) -> None:
        classes = _strings(table, "error_class")[err]
        details = _strings(table, "error_detail")[err]
        for cls, detail in zip(classes, details):
            c = str(cls)
            self.errors[c] += 1
            msgs = self.messages.setdefault(c, Counter())
            if detail is not None:
                d = clip(str(detail), 160)  # records of an older version may hold an echoed key: never summarised
                if d in msgs or len(msgs) < _MAX_MESSAGES:
                    msgs[d] += 1

    def _add_itl(self, okt: pa.Table, m: RequestMetrics) -> None:
        self.dists["itl"].add(*itl_samples(okt))
        if self.derive_itl and okt.num_rows:
            lens = pc.list_value_length(okt.column("chunk_times")).to_numpy(zero_copy_only=False)
            no_times = np.asarray(lens, dtype=np.float64) == 0
            gaps = np.where(no_times & np.isfinite(m.n_out), np.maximum(m.n_out - 1, 0), 0).astype(np.int64)
            if gaps.any():
                self.dists["itl"].add(m.tpot, gaps)

    def _add_windows(self, ok: np.ndarray, failed: np.ndarray, intended: np.ndarray, ended: np.ndarray,
                     okt: pa.Table, m: RequestMetrics) -> None:
        assert self.window_s
        t = np.where(np.isfinite(ended), ended, intended)
        w_all = np.floor(t / self.window_s).astype(np.int64)
        w_ok = w_all[ok]
        itl_rows = itl_samples  # per-window ITL pools the window's requests
        for w in np.unique(w_all[ok | failed]).tolist():  # cancelled / dropped rows belong to no window
            sel = w_all == w
            n_ok, n_err = int((ok & sel).sum()), int((failed & sel).sum())
            if w in self._closed:  # records arriving for a closed window still count in its totals
                late = self._late.setdefault(w, [0, 0])
                late[0] += n_ok
                late[1] += n_err
                continue
            win = self._open.setdefault(w, _Window(w))
            win.completed += n_ok
            win.failed += n_err
            win.last_t = max(win.last_t, float(t[sel].max()))
            mine = w_ok == w
            win.out_tokens += float(np.nansum(m.n_out[mine]))
            win.dists["ttft_ms"].add(m.ttft[mine])
            win.dists["tpot_ms"].add(m.tpot[mine])
            win.dists["e2e_ms"].add(m.e2e[mine])
            win.dists["itl_ms"].add(*itl_rows(okt.filter(pa.array(mine))))
        newest = max(self._open, default=None)
        if newest is not None:
            for w in [w for w in self._open if w < newest - 1]:
                self._closed[w] = self._open.pop(w).close(self.window_s, self.first_intended)

    # -- answers -------------------------------------------------------------------------------
    def windows(self) -> list[Window]:
        """Every window from the first to the last, empty ones (downtime) included."""
        assert self.window_s
        done = dict(self._closed)
        last = max(self._open, default=None)
        for w, win in self._open.items():
            done[w] = win.close(self.window_s, self.first_intended, win.last_t if w == last else math.inf)
        for w, (n_ok, n_err) in self._late.items():
            x = done[w]
            done[w] = x.model_copy(update={"completed": x.completed + n_ok, "failed": x.failed + n_err})
        if not done:
            return []
        return [done.get(w) or _Window(w).close(self.window_s) for w in range(min(done), max(done) + 1)]

    @property
    def scheduled(self) -> int:
        return self.completed + self.failed + self.dropped + self.cancelled

    def summary(self, run: dict[str, Any] | None = None) -> Summary:
        run = run or {}
        gap = sum(float(s.get("gap_s") or 0.0) for s in run.get("segments") or [])
        duration = 0.0
        if math.isfinite(self.first_intended) and math.isfinite(self.last_end):
            duration = max(0.0, self.last_end - self.first_intended - gap)

        def per_s(x: float) -> float | None:
            return x / duration if duration > 0 else None

        load = run.get("load") or {}
        open_loop = bool(load.get("open_loop"))
        achieved = scheduled_rate = None
        if self.sent >= 2:
            span_s = self.sent_span[1] - self.sent_span[0] - gap
            span_i = self.intended_span[1] - self.intended_span[0] - gap
            achieved = (self.sent - 1) / span_s if span_s > 0 else None
            if open_loop and span_i > 0:
                scheduled_rate = (self.sent - 1) / span_i  # the schedule's own rate (see analysis.verdict)
        offered = None
        span_all = self.intended_all[1] - self.intended_all[0] - gap
        if open_loop and self.scheduled >= 2 and span_all > 0:
            offered = (self.scheduled - 1) / span_all
        completion = self.edges.completion_rate(self.completed, gap) if self.edges is not None else None
        target = float(load["target_rate"]) if open_loop and load.get("target_rate") else scheduled_rate
        dist = {k: d.distribution(MS if _UNITS.get(k, "ms") == "ms" else 1.0) for k, d in self.dists.items()}
        runtime = run.get("runtime") or {}
        sm = run.get("server_metrics") or {}
        blocks, span = self.trend.blocks()
        verdict = judge(Facts(
            open_loop=open_loop, scheduled=self.scheduled, completed=self.completed, failed=self.failed,
            cancelled=self.cancelled, dropped=self.dropped, lag_p99_ms=dist["lag"].p99 if dist["lag"].p99 is not None
            else dist["lag"].max, lag_stat="p99" if dist["lag"].p99 is not None else "max", scheduled_rate=scheduled_rate, offered_rate=offered, achieved_rate=achieved,
            completion_rate=completion, cap_held=int(runtime.get("cap_held") or 0), ttft_count=dist["ttft"].count,
            client_cpu=runtime.get("client_cpu"), not_streamed=self.not_streamed,
            usage_implausible=self.usage_implausible,
            grace_s=(load.get("limits") or {}).get("grace_s") if isinstance(load.get("limits"), dict) else None,
            trend=blocks, trend_samples=self.trend.n, span_s=span, waiting_start=sm.get("num_requests_waiting_start"),
            waiting_end=sm.get("num_requests_waiting_end"), errors=dict(self.errors), run=run))
        source = "server" if self.n_server == self.completed and self.completed else ("stream" if self.n_server == 0 else "mixed")
        exact = all(d.exact for d in self.dists.values()) and self.reasoning.ttfo.exact
        unfinished = self.cancelled + self.dropped
        scheduled = self.scheduled
        return Summary(
            schema_version=SCHEMA_VERSION, source=run.get("source", "measured"), label=run.get("label"),
            model=run.get("model"), hardware=run.get("hardware"), profile=run.get("profile"), load=load.get("describe"),
            scheduled=scheduled, completed=self.completed, failed=self.failed, dropped=self.dropped,
            cancelled=self.cancelled, unfinished=unfinished, duration_s=duration,
            request_throughput=per_s(self.completed), input_token_throughput=per_s(self.n_in),
            output_token_throughput=per_s(self.n_out), total_token_throughput=per_s(self.n_in + self.n_out),
            goodput=per_s(self.good) if self.slo else None, slo=self.slo or None,
            slo_attainment=self.good / scheduled if self.slo and scheduled else None,
            valid=verdict.valid, saturated=verdict.saturation.saturated, invalid_reasons=verdict.invalid_reasons,
            warnings=verdict.warnings, findings=verdict.findings, saturation=verdict.saturation,
            itl_ms=dist["itl"], schedule_lag_ms=dist["lag"],
            **{key: dist[attr] for attr, key in _PER_REQUEST.items()},  # ttft_ms, tpot_ms, e2e_ms, ...
            itl_source="per-request mean gap (per-token times not stored)" if self.derive_itl else None,
            percentiles={"method": "exact (linear interpolation)" if exact else SKETCH_METHOD,
                         "min_samples": {k: v for k, v in MIN_SAMPLES.items() if v > 1}},
            errors=dict(self.errors), error_messages={c: m.most_common(1)[0][0] for c, m in self.messages.items() if m},
            error_rate=self.failed / max(1, self.completed + self.failed),
            unfinished_rate=unfinished / scheduled if scheduled else 0.0,
            target_rate=target, scheduled_rate=scheduled_rate, achieved_rate=achieved,
            mean_input_tokens=self.n_in / self.n_in_rows if self.completed and self.n_in_rows else None,
            mean_output_tokens=self.n_out / self.n_out_rows if self.completed and self.n_out_rows else None,
            total_input_tokens=int(self.n_in), total_output_tokens=int(self.n_out), token_count_source=source,
            usage_mismatches=self.mismatches, usage_implausible=self.usage_implausible,
            cached_prompt_tokens=None if self.cached is None else int(self.cached),
            server_metrics=run.get("server_metrics"), gpu=run.get("gpu"), alerts=list(run.get("alerts") or []),
            client={**{k: runtime.get(k) for k in ("client_cpu", "cap_held", "max_in_flight") if k in runtime},
                    **({"fd_limit": run["fd_limit"]} if run.get("fd_limit") else {})} or None,
            summary_method="exact" if exact else "streaming (" + SKETCH_METHOD + ")",
            windows=Windows(window_s=self.window_s, series=tuple(self.windows())) if self.window_s else None,
            # a simulated run's bands, fixed once by the simulation (it knows the twin's regime): run.json
            prediction_intervals=run.get("prediction_intervals"),
            # a disaggregated simulation's KV transfer and per-pool figures (twin.disagg): run.json
            kv_transfer_ms=run.get("kv_transfer_ms"), disaggregation=run.get("disaggregation"),
            **self.reasoning.figures(),
        )


def meets_slo(m: RequestMetrics, slo: dict[str, float]) -> np.ndarray:
    """Per completed request: every SLO bound met (TTFT and E2E from the intended send; a NaN
    TPOT, a one-token output, does not break a TPOT bound)."""
    meets = np.ones(m.ttft.size, dtype=bool)
    for key, limit in slo.items():
        if key == "ttft_ms":
            meets &= m.ttft_intended * MS <= limit
        elif key == "tpot_ms":
            meets &= ~(m.tpot * MS > limit)
        elif key == "e2e_ms":
            meets &= m.e2e_intended * MS <= limit
    return meets


def build_summary(table: pa.Table, *, run: dict[str, Any] | None = None) -> Summary:
    """The summary of one records table (a finished run, ``infermeter summarize``)."""
    acc = Accumulator.for_run(run)
    acc.add(table)
    return acc.summary(run)
