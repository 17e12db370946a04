"""Engine step times recovered from the client's own records, and a linear step-time model fitted to them.

A continuous-batching engine streams one token to every running request at the end of each step,
so the per-token times of concurrent requests line up: clustering them recovers the engine's steps
-- when each ended, which requests decoded in it, which finished their prefill in it. A step whose
decoding requests all emitted in the step before ran back to back with it, so its length is the
gap between the two. Those steps are fitted with least squares to

    step_s = base_s + per_token_s * new_tokens + per_seq_s * num_seqs + per_kv_token_s * kv_tokens

(all non-negative; ``new_tokens`` = one per decode plus the uncached prompt tokens of each prefill
finishing in the step; ``kv_tokens`` = the context the step's sequences attend to: each one's prompt
plus the tokens it has generated), the model of :class:`infermeter.twin.predictor.LinearStepTime`. The front end's fixed cost
(request parsing, tokenisation, transfer: what the engine never sees) is the median, over requests
that found the engine idle, of TTFT minus the predicted prefill step::

    steps = engine_steps([run1, run4])        # each run's records (pyarrow, records.ARROW_SCHEMA), own clock
    fit = fit_linear(steps)                   # StepFit(base_s, per_token_s, per_seq_s, ...)
    fit.residuals["median_abs_pct"], fit.steps
    overhead = frontend_overhead(table, fit)  # seconds

Requirements: per-token times (``chunk_times``) of streamed responses; steps with at least two
distinct batch shapes (e.g. runs at concurrency 1 and 4), else the fit says which coefficient it
could not tell apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infermeter.errors import DataError

EPS_S = 0.002  # events closer than this belong to the same step


@dataclass(frozen=True)
class Steps:
    """Recovered engine steps: per step its length (s), tokens computed, sequences in the batch."""

    duration_s: np.ndarray
    new_tokens: np.ndarray
    num_seqs: np.ndarray
    prefills: np.ndarray  # requests whose prefill finished in the step
    kv_tokens: np.ndarray  # context of the step's sequences (prompt + tokens generated so far)

    @property
    def n(self) -> int:
        return int(self.duration_s.size)


@dataclass(frozen=True)
class StepFit:
    base_s: float
    per_token_s: float
    per_seq_s: float
    steps: int
    per_kv_token_s: float = 0.0
    residuals: dict[str, float] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()  # coefficients fixed at 0 (negative or not identifiable)

    max_seqs: int = 0  # the largest batch among the fitted steps: predictions beyond it extrapolate

    def predict(self, new_tokens: np.ndarray | float, num_seqs: np.ndarray | float,
                kv_tokens: np.ndarray | float = 0.0) -> np.ndarray:
        return (self.base_s + self.per_token_s * np.asarray(new_tokens) + self.per_seq_s * np.asarray(num_seqs)
                + self.per_kv_token_s * np.asarray(kv_tokens))


def measured_ok(table: pa.Table) -> pa.Table:
    """The successful requests of the measured phase (warm-up left out)."""
    if "phase" in table.column_names:
        table = table.filter(pc.equal(table.column("phase"), "measure"))
    return table.filter(pc.equal(table.column("outcome"), "ok"))


def engine_steps(tables: pa.Table | Sequence[pa.Table], eps_s: float = EPS_S) -> Steps:
    """The back-to-back steps of each run's records (see the module docstring); runs keep their own
    clocks, so their steps are found one run at a time."""
    if not isinstance(tables, pa.Table):
        parts = [_run_steps(t, eps_s) for t in tables]
        return Steps(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("duration_s", "new_tokens",
                                                                               "num_seqs", "prefills", "kv_tokens")))
    return _run_steps(tables, eps_s)


def _run_steps(table: pa.Table, eps_s: float) -> Steps:
    ok = measured_ok(table)
    if ok.num_rows == 0:
        raise DataError("no successful request to recover engine steps from")
    times = ok.column("chunk_times").to_pylist()
    prompt = np.nan_to_num(np.asarray(ok.column("prompt_tokens").to_numpy(zero_copy_only=False), dtype=float))
    cached = np.nan_to_num(np.asarray(pc.fill_null(ok.column("cached_tokens").cast(pa.float64()), 0.0).to_numpy(),
                                      dtype=float))
    ev_t: list[float] = []
    ev_r: list[int] = []
    ev_j: list[int] = []
    for r, ts in enumerate(times):
        for k, at in enumerate(ts or ()):
            ev_t.append(at)
            ev_r.append(r)
            ev_j.append(k)
    if len(ev_t) < 3:
        raise DataError("no per-token times in these records (streamed runs with chunk_times are needed)")
    order = np.argsort(np.asarray(ev_t), kind="stable")
    t = np.asarray(ev_t)[order]
    rid = np.asarray(ev_r)[order]
    pos = np.asarray(ev_j)[order]
    step_of: np.ndarray = np.concatenate([[0], np.cumsum(np.diff(t) > eps_s)])
    n_steps = int(step_of[-1]) + 1
    step_t = np.full(n_steps, np.inf)
    np.minimum.at(step_t, step_of, t)
    members: list[set[int]] = [set() for _ in range(n_steps)]
    first: list[set[int]] = [set() for _ in range(n_steps)]
    for s, r, k in zip(step_of.tolist(), rid.tolist(), pos.tolist()):
        (first if k == 0 else members)[s].add(r)
    ctx: dict[tuple[int, int], int] = {}
    for s, r, k in zip(step_of.tolist(), rid.tolist(), pos.tolist()):
        ctx[(s, r)] = k
    dur, tok, seq, pre, kv = [], [], [], [], []
    for s in range(1, n_steps):
        decodes = members[s]
        if not decodes:
            continue
        prev = members[s - 1] | first[s - 1]
        if not decodes <= prev:
            continue  # someone decoding now was not in the step before: not back to back
        if first[s] & prev:
            continue
        dur.append(step_t[s] - step_t[s - 1])
        tok.append(len(decodes) + sum(prompt[r] - cached[r] for r in first[s]))
        seq.append(len(decodes) + len(first[s]))
        pre.append(len(first[s]))
        kv.append(sum(prompt[r] + ctx[(s, r)] for r in decodes) + sum(prompt[r] for r in first[s]))
    if not dur:
        raise DataError("no back-to-back engine steps in these records (was anything running concurrently?)")
    return Steps(np.asarray(dur), np.asarray(tok, dtype=float), np.asarray(seq, dtype=float), np.asarray(pre),
                 np.asarray(kv, dtype=float))


OUTLIER_MADS = 3.5  # a step this many robust deviations (1.4826 MAD) longer than the fit is set aside,
OUTLIER_REL = 0.25  # and longer by more than this fraction of its predicted length
ROBUST_ROUNDS = 3


def _nnls_subsets(cols: dict[str, np.ndarray], y: np.ndarray) -> dict[str, float]:
    """Least squares over every subset of the columns; the best fit with no negative coefficient among
    the largest subsets that have one."""
    best: tuple[float, dict[str, float]] | None = None
    for k in range(len(cols), 0, -1):
        for names in itertools.combinations(cols, k):
            x = np.column_stack([cols[n] for n in names])
            if np.linalg.matrix_rank(x) < len(names):
                continue
            coef, *_ = np.linalg.lstsq(x, y, rcond=None)
            if (coef < 0).any():
                continue
            sse = float(((x @ coef - y) ** 2).sum())
            if best is None or sse < best[0] - 1e-15:
                best = (sse, dict(zip(names, map(float, coef))))
        if best is not None:
            break
    if best is None:
        raise DataError("no non-negative step-time fit: the steps do not vary enough")
    return best[1]


def fit_linear(steps: Steps, kv: bool = True) -> StepFit:
    """Non-negative least squares of step length on (1, new tokens, sequences, context tokens): every
    subset of the coefficients is tried and the best fit with none negative is kept (``kv=False``
    leaves the context term out). Robust to a shared machine: steps more than ``OUTLIER_MADS`` robust
    deviations and ``OUTLIER_REL`` of their length *longer* than the fit (the OS gave the engine's core to
    someone else mid-step; a step cannot be shortened that way, so none is set aside for being short) are set
    aside and the fit repeated, up to ``ROBUST_ROUNDS`` times; ``residuals["outliers"]`` counts them, and the
    other residual figures are over every step."""
    y_all = steps.duration_s
    cols_all = {"base_s": np.ones(steps.n), "per_token_s": steps.new_tokens, "per_seq_s": steps.num_seqs}
    if kv:
        cols_all["per_kv_token_s"] = steps.kv_tokens
    keep = np.ones(steps.n, dtype=bool)
    for rounds in range(ROBUST_ROUNDS + 1):  # the fit on ``keep``; then, while rounds remain, set stretched steps aside
        coef = _nnls_subsets({n: c[keep] for n, c in cols_all.items()}, y_all[keep])
        if rounds == ROBUST_ROUNDS:
            break
        pred = sum(coef.get(n, 0.0) * c for n, c in cols_all.items())
        resid = y_all - pred
        mad = 1.4826 * float(np.median(np.abs(resid[keep] - np.median(resid[keep]))))
        new_keep = resid <= np.maximum(OUTLIER_MADS * mad, OUTLIER_REL * pred)  # one-sided: only stretched steps
        if new_keep.sum() < max(len(cols_all) + 1, steps.n // 2) or (new_keep == keep).all():
            break
        keep = new_keep
    fit = StepFit(base_s=coef.get("base_s", 0.0), per_token_s=coef.get("per_token_s", 0.0),
                  per_seq_s=coef.get("per_seq_s", 0.0), per_kv_token_s=coef.get("per_kv_token_s", 0.0),
                  steps=int(keep.sum()), dropped=tuple(n for n in cols_all if n not in coef),
                  max_seqs=int(steps.num_seqs[keep].max()))
    fit.residuals.update(residuals(fit, steps, outliers=steps.n - int(keep.sum())))
    return fit


def residuals(fit: StepFit, steps: Steps, outliers: int = 0) -> dict[str, float]:
    """The fit's residuals over every step (the set-aside ones too: the fit's quality is not flattered)."""
    y = steps.duration_s
    pred = fit.predict(steps.new_tokens, steps.num_seqs, steps.kv_tokens)
    rel = np.abs(pred - y) / np.maximum(y, 1e-9)
    return {"median_abs_pct": float(np.median(rel) * 100), "p90_abs_pct": float(np.percentile(rel, 90) * 100),
            "rmse_ms": float(np.sqrt(np.mean((pred - y) ** 2)) * 1000), "outliers": float(outliers)}


def frontend_overhead(tables: pa.Table | Sequence[pa.Table], fit: StepFit) -> float:
    """Median TTFT minus the predicted prefill step, pooled over the requests that found the engine
    idle (none in flight when they were sent): what a request cost before and after the engine
    (seconds, >= 0; 0 when no request found it idle)."""
    idle: list[float] = []
    for table in [tables] if isinstance(tables, pa.Table) else tables:
        ok = measured_ok(table)
        sent = np.asarray(ok.column("sent_at").to_numpy(zero_copy_only=False), dtype=float)
        first = np.asarray(pc.fill_null(ok.column("first_token_at").cast(pa.float64()), np.nan).to_numpy(), dtype=float)
        ended = np.asarray(ok.column("ended_at").to_numpy(zero_copy_only=False), dtype=float)
        prompt = np.nan_to_num(np.asarray(ok.column("prompt_tokens").to_numpy(zero_copy_only=False), dtype=float))
        cached = np.nan_to_num(np.asarray(pc.fill_null(ok.column("cached_tokens").cast(pa.float64()), 0.0).to_numpy(),
                                          dtype=float))
        for i in range(sent.size):
            busy = np.any((sent < sent[i]) & (ended > sent[i]))
            if not busy and np.isfinite(first[i]):
                idle.append(first[i] - sent[i] - float(fit.predict(prompt[i] - cached[i], 1, prompt[i])))
    return max(0.0, float(np.median(idle))) if idle else 0.0
