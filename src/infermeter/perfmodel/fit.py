"""Fit the calibration table to measurements, with partial pooling.

Promises: :func:`fit` returns a :class:`Calibration` whose fitted values minimise
``sum(w * huber(log(pred/measured))) + lambda * sum(log(value/prior)^2)`` by coordinate descent (a
golden-section search per value, in log space), in three stages, each shrunk towards the
value the previous one gives (partial pooling: hardware class, then family, then the full key):

0. by memory class (lambda 0.1): one efficiency per (memory class hbm/gddr, engine group, dtype
   class, phase) -- the engine group keeps llama.cpp's kernels apart from the serving engines';
   per engine the request overhead (the per-request floor: admission, scheduling, launch), fitted
   on the rows that measure it -- TTFTs and static-batch latencies with at most 16 sequences --
   so an engine without such rows keeps its prior; per engine (or engine generation, e.g. vLLM's V0 engine) and
   hardware family -- the runtime stack, CUDA or ROCm -- the step overhead (the batch-1 cost the
   literature puts at 0.5 to several ms), fitted on the rows with at most 16 sequences in flight,
   where it shows; for engines that pay per-layer kernel launches (llama.cpp)
   the layer overhead per memory class; for engine generations whose decode attention reads
   K/V per query head (TensorRT-LLM before v0.8) the fraction of those re-reads reaching DRAM;
1. by family (lambda 0.3): one efficiency per (family, engine group, dtype class, phase);
2. specific (lambda 0.3): one efficiency per (family, engine, dtype, phase, tp).

A row's weight ``w`` in a value's fit is ``1 / sqrt(k)``, ``k`` the rows of its publication among
those fitting the value: rows of one publication share a lab's conditions and error, so twenty of
them weigh as much as about four independent ones, not twenty (leave-one-publication-out on 469
rows with the fifth round's terms: 14.0% -> 13.3%, dense 12.0% -> 11.6%, max 670% -> 656%). The prior
terms keep their lambda, so against the smaller total weight of the data (``sum(sqrt(k))`` rows' worth
instead of ``sum(k)``) every value is pulled a little harder towards its prior: the evidence of one
lab's many rows counts as less evidence, which is the point.

A row's loss is Huber's on its log error (:func:`huber`: squared within ``HUBER_DELTA`` = 0.3, +35% or -26%,
linear beyond): a publication whose rows the physics cannot follow (a quirk of its lab or its release) still
pulls a shared value, but with a force that stops growing there instead of growing with its error. Chosen by
leave-one-publication-out on the 600-row corpus before blind set 6 was read (squared loss: 14.5%, dense 11.6%,
MoE 29.6%; delta 0.15: 14.0% / 11.1% / 25.6%; 0.3: 13.9% / 11.3% / 25.9%; 0.5: 14.1% / 11.6% / 24.7%).

Each value is fitted on the rows that name it (a row names its own keys at each stage, and the
prefill efficiency only when it measures more than decoding) and whose prediction depends on it. Values stay within ``calibration.PHASE_BOUNDS`` (an MBU above ~0.9 of datasheet bandwidth is not
achievable, research notes section 10), request overheads within [0.05, 50] ms; every entry names
the rows it was fitted on::

    python -m infermeter.perfmodel.fit tests/data/published-measurements.csv

prints the ``fitted:`` and ``fitted_engines:`` blocks of ``data/calibration.yaml``. A trial value
rescales each row's prebuilt deployment (:meth:`Deployment.with_values`) rather than rebuilding
it, so a fit of ~130 rows takes seconds and leave-one-out stays affordable.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Literal

from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment, moe_kernel_dtype
from infermeter.perfmodel.calibration import PHASE_BOUNDS, Calibration, Entry, dtype_class, load_calibration
from infermeter.perfmodel.corpus import Row, publication
from infermeter.perfmodel.engines import EngineDefaults
from infermeter.perfmodel.validate import deployment_for, served, value_of

LAMBDA_POOLED, LAMBDA_SPECIFIC = 0.1, 0.3
HUBER_DELTA = 0.3  # log error beyond which a row's loss grows linearly (module docstring)
_GOLD = (math.sqrt(5) - 1) / 2
_REQ_BOUNDS = (0.05, 50.0)
_REQ_TAG = "; request overhead "
EffParam = tuple[Literal["eff"], str, str, str, str, int | str]  # ("eff", family, engine, dtype, phase, tp)
PairParam = tuple[Literal["oh", "ohl", "ohm"], str, str]  # ("oh"|"ohm", engine, family) | ("ohl", engine, class or family)
KernelParam = tuple[Literal["mg", "me"], str, str, str]  # ("mg"|"me", engine, family, MoE kernel dtype: "mxfp4" or "*")
OneParam = tuple[Literal["rr", "ps", "req", "tps", "fe"], str]  # ("rr"|"tps", generation) | ("ps"|"req"|"fe", engine)
Param = EffParam | PairParam | KernelParam | OneParam
Key = tuple[str, str, str, str, int | str]  # an Entry.key: (family, engine, dtype, phase, tp)
_PHASE_OF: dict[str, str] = {"oh": "step_overhead", "ohl": "layer_overhead", "rr": "kv_reread", "ps": "seq_overhead",
                             "tps": "tp_seq_overhead", "ohm": "moe_layer_overhead", "mg": "moe_gemm",
                             "me": "moe_expert", "fe": "frontend"}
_SLOTS = ("mfu", "mbu", "oh", "ohl", "rr", "ps", "tps", "ohm", "mg", "me", "fe")  # the order of Deployment.calibration_entries


def priors_only(cal: Calibration) -> Calibration:
    """The same table with every fitted value removed (engines back to their prior overheads)."""
    engines = tuple(replace(e, request_overhead_ms=e.request_overhead_prior_ms, request_overhead_prior_ms=None,
                            source=e.source.split(_REQ_TAG)[0])
                    if e.request_overhead_prior_ms is not None else e for e in cal.engines)
    return cal.with_entries(tuple(e for e in cal.entries if not e.fitted and not e.origin), engines)


def _key(p: Param) -> Key:
    """The calibration-entry key a parameter is stored under."""
    if p[0] == "eff":
        return p[1:]
    if p[0] in ("mg", "me"):
        return (p[2], p[1], p[3], _PHASE_OF[p[0]], "*")
    if p[0] in ("oh", "ohl", "ohm"):
        return (p[2], p[1], "*", _PHASE_OF[p[0]], "*")
    return ("*", p[1], "*", _PHASE_OF[p[0]], "*")


def _bounds(p: Param) -> tuple[float, float]:
    if p[0] == "req":
        lo, hi = _REQ_BOUNDS
    else:
        lo, hi = PHASE_BOUNDS[p[4] if p[0] == "eff" else _PHASE_OF[p[0]]]
    return math.log(lo), math.log(hi)


def _engine(d: Deployment) -> EngineDefaults:
    """The engine defaults a deployment was built with (``build_deployment`` always sets them)."""
    if d.engine_defaults is None:
        raise ValueError(f"deployment of {d.model_name} on {d.hardware} ({d.engine}) carries no engine defaults to fit")
    return d.engine_defaults


def _apply(base: Calibration, values: dict[Param, float], priors: dict[Param, float], used: dict[Param, list[str]]) -> Calibration:
    entries = []
    engines = {e.name: e for e in base.engines}
    for p, v in values.items():
        src = f"fit: rows {', '.join(used[p])}"
        if p[0] == "req":
            e = engines[p[1]]
            engines[p[1]] = replace(e, request_overhead_ms=v, request_overhead_prior_ms=priors[p],
                                    source=e.source.split(_REQ_TAG)[0] + _REQ_TAG + src)
        else:
            fam, eng, dt, phase, tp = _key(p)
            entries.append(Entry(family=fam, engine=eng, dtype=dt, phase=phase, tp=tp, value=v, prior=priors[p], source=src))
    return base.with_entries(tuple(entries) + base.entries, tuple(engines.values()))


class _RowModel:
    """One row under a stage: its deployment at the stage's starting values, and which parameter feeds each slot."""

    def __init__(self, row: Row, d: Deployment, slots: dict[str, Param | None], req: Param | None):
        self.row, self.d, self.slots, self.req = row, d, slots, req
        self.start = {"mfu": d.mfu, "mbu": d.mbu, "oh": d.step_overhead_ms, "ohl": d.layer_overhead_us, "rr": d.kv_reread,
                      "ps": d.seq_overhead_us, "tps": d.tp_seq_overhead_us, "ohm": d.moe_layer_overhead_us, "mg": d.moe_gemm,
                      "me": d.moe_expert_us, "fe": d.frontend_ms, "req": d.request_overhead_s * 1e3}

    def log_error(self, values: dict[Param, float]) -> float:
        v = {k: (values[p] if (p := self.slots.get(k)) is not None else self.start[k]) for k in _SLOTS}
        req = values[self.req] if self.req is not None else self.start["req"]
        d = self.d.with_values(mfu=v["mfu"], mbu=v["mbu"], step_overhead_ms=v["oh"], layer_overhead_us=v["ohl"], kv_reread=v["rr"],
                               request_overhead_ms=req, seq_overhead_us=v["ps"], tp_seq_overhead_us=v["tps"],
                               moe_layer_overhead_us=v["ohm"], moe_gemm=v["mg"], moe_expert_us=v["me"], frontend_ms=v["fe"])
        return math.log(value_of(self.row, d) / self.row.value)


def _prior(base: Calibration, p: Param) -> float:
    if p[0] == "req":
        return base.engine(p[1]).request_overhead_ms
    fam, eng, dt, phase, tp = _key(p)
    found = base.lookup(fam, eng, dt, phase, tp)
    if found is not None:
        return found[0]
    e = _generation_defaults(base, eng) if "<" in eng else base.engine(eng)
    # an engine with graphs fits layer_overhead on its eager rows only: their prior is its eager launch cost
    return {"step_overhead": e.overhead_ms, "layer_overhead": e.layer_overhead_us or e.eager_layer_us, "seq_overhead": e.per_seq_us,
            "kv_reread": e.kv_reread, "tp_seq_overhead": e.tp_seq_us, "moe_layer_overhead": e.moe_layer_us,
            "moe_gemm": e.moe_gemm, "moe_expert": e.moe_expert_us, "frontend": e.frontend_ms}[phase]


def _per_seq_generation(base: Calibration, gen_id: str) -> bool:
    """Whether generation ``gen_id`` has a per-sequence cost of its own (its fields set ``per_seq_us``): fitted apart,
    on the rows with more than SMALL_BATCH sequences in flight, where a per-sequence cost shows."""
    return any(g.id == gen_id and "per_seq_us" in dict(g.fields) for g in base.generations)


def _generation_defaults(base: Calibration, gen_id: str) -> EngineDefaults:
    """The engine defaults with generation ``gen_id``'s fields applied (its priors)."""
    g = next(g for g in base.generations if g.id == gen_id)
    return replace(base.engine(g.engine), **dict(g.fields))


PUBLICATION_WEIGHTS = True


def _publication_weights(models: list[_RowModel]) -> list[float]:
    """Each row's weight in a parameter's fit: ``1 / sqrt(rows of its publication among them)``, so a publication of
    ``k`` rows weighs ``sqrt(k)`` rows (its rows share one lab's conditions and error, section 9), not ``k``."""
    if not PUBLICATION_WEIGHTS:
        return [1.0] * len(models)
    pubs = [publication(m.row) for m in models]
    count = Counter(pubs)
    return [1 / math.sqrt(count[p]) for p in pubs]


def huber(e: float, delta: float | None = None) -> float:
    """A row's loss on its log error ``e``: ``e^2`` within ``HUBER_DELTA``, linear beyond (``2 delta |e| - delta^2``).

    >>> huber(0.1), round(huber(1.0, 0.3), 2)
    (0.010000000000000002, 0.51)
    """
    d = HUBER_DELTA if delta is None else delta
    a = abs(e)
    return e * e if a <= d else 2 * d * a - d * d


def _stage(rows: list[Row], base: Calibration, params_of: Callable[[Row, Deployment], list[Param]], lam: float,
           sweeps: int = 4, tol: float = 0.01) -> Calibration:
    wanted: dict[Param, set[str]] = defaultdict(set)  # parameter -> rows whose residuals fit it
    for row in rows:
        for p in params_of(row, deployment_for(row, base)):
            wanted[p].add(row.id)
    priors = {p: _prior(base, p) for p in wanted}
    start = _apply(base, priors, priors, defaultdict(list))
    by_key = {_key(p): p for p in wanted if p[0] != "req"}
    rows_of: dict[Param, list[_RowModel]] = defaultdict(list)
    for row in rows:
        dep = deployment_for(row, start)
        slots = {k: by_key.get(e.key) if e is not None else None for k, e in zip(_SLOTS, dep.calibration_entries)}
        req: Param | None = ("req", _engine(dep).name)
        if req not in wanted:
            req = None
        model = _RowModel(row, dep, slots, req)
        for p in {*(p for p in slots.values() if p is not None), *([req] if req else [])}:
            if row.id in wanted[p]:
                rows_of[p].append(model)
    params = [p for p in wanted if rows_of[p]]
    values = {p: priors[p] for p in params}
    weights = {p: _publication_weights(rows_of[p]) for p in params}

    def objective(p: Param, logv: float) -> float:
        values[p] = math.exp(logv)
        return (sum(w * huber(m.log_error(values)) for w, m in zip(weights[p], rows_of[p], strict=True))
                + lam * (logv - math.log(priors[p])) ** 2)

    for _ in range(sweeps):
        moved = 0.0
        for p in params:
            old = math.log(values[p])
            a, b = _bounds(p)
            c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
            fc, fd = objective(p, c), objective(p, d)
            while b - a > tol:
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - _GOLD * (b - a)
                    fc = objective(p, c)
                else:
                    a, c, fc = c, d, fd
                    d = a + _GOLD * (b - a)
                    fd = objective(p, d)
            values[p] = math.exp((a + b) / 2)
            moved = max(moved, abs(math.log(values[p]) - old))
        if moved < tol:
            break
    used = {p: [m.row.id for m in rows_of[p]] for p in params}
    return _apply(base, {p: round(v, 3) for p, v in values.items()}, priors, used)


SMALL_BATCH = 16
FRONTEND_MAX_OUTPUT = 16  # served saturated runs with at most this many output tokens a request fit the frontend cost


def _frontend_bound(row: Row, d: Deployment) -> bool:
    """Rows that measure the API server's per-request work: saturated served runs of short outputs (at most
    FRONTEND_MAX_OUTPUT tokens), where a request costs the GPU little; elsewhere it does not bind, or, if the fit could
    move it there, would absorb the GPU model's own misses. Chats rendered by openai-harmony are not charged it."""
    return (row.scenario == "saturated" and row.metric == "output_tokens_per_s" and row.output_tokens <= FRONTEND_MAX_OUTPUT
            and served(row) and d.frontend_ms > 0 and not d.harmony_chat)


MOE_ROWS_FIT_DENSE = False  # True: MoE rows also fit the dense efficiencies and engine costs (an experiment's switch)


def _small_batch(row: Row) -> bool:
    """Rows that identify the per-step overhead: a batch of at most SMALL_BATCH sequences (at saturation it is lost in the noise)."""
    return row.scenario in ("fixed_concurrency", "static_batch") and (row.concurrency or 1) <= SMALL_BATCH


def _request_floor(row: Row) -> bool:
    """Rows that measure the per-request cost: a TTFT, or a static batch's latency, with at most SMALL_BATCH sequences.

    Elsewhere it is paid once among many steps (or, for llama-bench's pp/tg rates, not at all) and says nothing of it."""
    few = (row.concurrency or 1) <= SMALL_BATCH and row.scenario in ("fixed_concurrency", "static_batch")
    return few and (row.metric == "ttft_ms" or (row.scenario == "static_batch" and row.metric == "output_tokens_per_s"))


def _phases(row: Row) -> tuple[str, ...]:
    """The efficiencies a row measures: a decode-only figure (TPOT, single-stream tokens/s) says nothing of prefill."""
    return ("decode",) if row.metric in ("tpot_ms", "decode_tokens_per_s") else ("prefill", "decode")


def _dtype(d: Deployment, phase: str) -> str:
    """The dtype whose ``phase`` efficiency the replica uses (llama.cpp's GGUF prompts run FP16 GEMMs after dequantising)."""
    return d.prefill_dtype or d.dtype if phase == "prefill" else d.decode_dtype or d.dtype


def _expert_format(d: Deployment, phase: str) -> bool:
    """Whether ``d``'s ``phase`` efficiency is its routed experts' own format (gpt-oss MXFP4: ``api`` sets both the prefill
    and the decode dtype to it), which no dense model uses, so an MoE row may fit it."""
    return d.spec.is_moe and bool(d.decode_dtype) and _dtype(d, phase) == d.decode_dtype


def fit(rows: list[Row], base: Calibration | None = None) -> Calibration:
    """Stage 0 (memory class: efficiencies, engine overheads, generation re-reads), stage 1 (family), stage 2 (specific keys)."""
    base = priors_only(base or load_calibration())

    def by_class(row: Row, d: Deployment) -> list[Param]:
        eng = _engine(d)
        moe: list[Param] = [("fe", eng.name)] if _frontend_bound(row, d) else []  # whatever the model: the server's work
        # an eager run's launches, dense or MoE (not an expert-parallel MoE row, which fits nothing), per hardware family
        # (CUDA and HIP launch costs differ); llama.cpp's launches per memory class
        launches: list[Param] = [("ohl", eng.name, d.hw.family if d.enforce_eager else d.hw.memory_class)] \
            if d.layer_overhead_us > 0 and d.hw.memory_class else []
        moe += launches if d.enforce_eager else []
        if d.spec.is_moe and row.setting("ep", 1) > 1:  # expert parallelism: whole experts per GPU, not the TP shards the
            return []                                   # MoE terms cost (and an all-to-all or reduce-scatter the model lacks)
        if d.spec.is_moe:  # the per-MoE-layer cost where a step is short, the grouped GEMMs where prefill counts
            moe += [("ohm", eng.generation or eng.name, d.hw.family)] if _small_batch(row) else []
            kdt = moe_kernel_dtype(d.decode_dtype or d.dtype)  # the experts' own 4-bit format fits its own kernel terms
            moe += [("mg", eng.generation or eng.name, d.hw.family, kdt)] if "prefill" in _phases(row) else []
            moe.append(("me", eng.generation or eng.name, d.hw.family, kdt))
            if not MOE_ROWS_FIT_DENSE:  # MoE rows fit only the MoE terms and their experts' own format: dense values stay dense
                return moe + [("eff", d.hw.memory_class, eng.group, dtype_class(_dtype(d, ph)), ph, "*") for ph in _phases(row)
                              if _expert_format(d, ph) and d.hw.memory_class]
        out: list[Param] = moe + ([("req", eng.name)] if _request_floor(row) else [])
        if _small_batch(row):
            out.append(("oh", eng.generation or eng.name, d.hw.family))
        if d.hw.memory_class:
            out += [("eff", d.hw.memory_class, eng.group, dtype_class(_dtype(d, ph)), ph, "*") for ph in _phases(row)]
        if not d.enforce_eager:  # an engine without graphs (an eager run's are among `moe`, which dense rows share)
            out += launches
        if d.gqa_group > 1 and eng.generation:
            out.append(("rr", eng.generation))
        if eng.tp_seq_us > 0 and d.config.tp > 1:
            out.append(("tps", eng.generation))
        if eng.generation and _per_seq_generation(base, eng.generation) and not _small_batch(row):
            out.append(("ps", eng.generation))
        return out

    def keep(d: Deployment, ph: str) -> bool:  # MoE rows fit a dense model's efficiencies only when allowed to
        return not d.spec.is_moe or MOE_ROWS_FIT_DENSE or _expert_format(d, ph)

    def by_family(row: Row, d: Deployment) -> list[Param]:
        return [("eff", d.hw.family, _engine(d).group, dtype_class(_dtype(d, ph)), ph, "*") for ph in _phases(row) if keep(d, ph)]

    def specific(row: Row, d: Deployment) -> list[Param]:
        return [("eff", d.hw.family, _engine(d).name, _dtype(d, ph), ph, row.tp) for ph in _phases(row) if keep(d, ph)]

    stage0 = _stage(rows, base, by_class, LAMBDA_POOLED)
    stage1 = _stage(rows, stage0, by_family, LAMBDA_SPECIFIC)
    return _stage(rows, stage1, specific, LAMBDA_SPECIFIC)


def to_yaml(cal: Calibration) -> str:
    lines = ["fitted:"]
    for e in cal.entries:
        if e.fitted and not e.origin:
            lines.append(f"  - {{family: \"{e.family}\", engine: \"{e.engine}\", dtype: \"{e.dtype}\", phase: {e.phase}, tp: \"{e.tp}\", "
                         f"value: {e.value:.3f}, prior: {e.prior:.3f}, source: \"{e.source}\"}}")
    lines.append("fitted_engines:")
    for eng in cal.engines:
        if eng.request_overhead_prior_ms is not None:
            lines.append(f"  {eng.name}: {{request_overhead_ms: {eng.request_overhead_ms:.3f}, prior: {eng.request_overhead_prior_ms:.3f}, "
                         f"source: \"{eng.source.split(_REQ_TAG)[-1]}\"}}")
    return "\n".join(lines) + "\n"


def fit_workers() -> int:
    """Processes :func:`fit_many` may use: ``INFERMETER_FIT_WORKERS`` if set (a whole number >= 1; 1 fits in this
    process), else the CPUs this process may run on (its affinity, not the host's count)."""
    text = os.environ.get("INFERMETER_FIT_WORKERS", "")
    if not text:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"INFERMETER_FIT_WORKERS={text!r}: give a whole number of processes, 1 or more "
                          "(1 fits in this process)")
    return int(text)


def fit_many(subsets: list[list[Row]], base: Calibration) -> list[Calibration]:
    """``[fit(rows, base) for rows in subsets]``, the same values, in up to :func:`fit_workers` processes: the refits of a
    leave-one-out pass are independent of each other and each takes tens of seconds on the corpus (its open-loop rows
    cost the most), so a pass of a hundred refits is spread over the CPUs there are. Fewer than four subsets, or one
    worker, fit here."""
    workers = min(len(subsets), fit_workers())
    if workers <= 1 or len(subsets) < 4:
        return [fit(rows, base) for rows in subsets]
    # spawn, not fork: the caller may hold threads (a test runner's), which a forked child would inherit mid-lock
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fit, subsets, itertools.repeat(base), chunksize=1))


def main(argv: list[str]) -> int:
    from infermeter.perfmodel.corpus import load_rows

    path = argv[0] if argv else "tests/data/published-measurements.csv"
    sys.stdout.write(to_yaml(fit(load_rows(path))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
