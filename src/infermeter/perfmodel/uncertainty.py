"""Prediction intervals for predicted figures, from the model's out-of-sample errors.

Promises: :func:`regime_of` classifies a predicted figure of a deployment into a :class:`Regime`
(metric group, what bounds it, how it is calibrated); :func:`interval` returns an 80% interval
``(low, high, basis)`` for a predicted value in a regime, from a table of log errors
``log(measured / predicted)`` that :func:`table_from_report` derives from leave-one-publication-out
validation. The shipped table is the ``uncertainty:`` block of ``data/calibration.yaml``
(``python -m infermeter.perfmodel.uncertainty`` prints it)::

    >>> from infermeter.perfmodel import build_deployment
    >>> d = build_deployment("llama-3.1-8b", "h100-sxm")
    >>> reg = regime_of(d, "tpot_ms", 1000, 200, 1)
    >>> lo, hi, basis = interval("tpot_ms", 7.0, reg)
    >>> lo < 7.0 < hi and "80%" in basis
    True

Regimes: the metric group (``ttft``: TTFT and prompt rates; ``tpot``: TPOT and per-user decode
rates; ``throughput``), the bound (``prefill`` or ``decode``: TTFT is prefill-bound, TPOT
decode-bound, a throughput by which part of a request's time dominates) and the calibration, the
interval's ``basis``: ``deployment`` (a per-deployment calibration file), ``calibrated`` (fitted
entries for this hardware family, engine, precision class and TP degree), ``pooled`` (the same
family, engine and precision class, fitted at another TP degree) or ``unseen`` (no fitted entry
for this family, engine and precision class: the efficiencies come from other engines, another
precision, the memory class or the priors). For a figure that uses both efficiencies the weaker
calibration counts. An MoE model is never ``calibrated`` by dense rows: its figure is ``pooled``
where its engine's MoE term for the phase (``moe_gemm`` for prefill, ``moe_layer_overhead`` or
``moe_expert`` for decode) was fitted on this hardware family, else ``unseen``; an MLA model
(DeepSeek) follows the same rule now that corpus rows measure it (blind set 2's DeepSeek-V3/R1 rows;
it was always ``unseen`` before). A regime also carries the figure's model class
(:func:`model_class`: ``moe`` for MoE models, MLA ones included, else ``dense``; ``*``: not known).

Errors: each corpus row predicted by a fit without its publication (leave-one-publication-out,
LOPO) in its regime under that fit; and, so that ``unseen`` rests on rows that were unseen, each
row predicted by a fit without every row of its (family, engine, precision class) combination
(leave-one-combination-out, LOCO; :func:`loco_records`), in its regime under that fit.

Interval: every cell is kept per model class and for every class (key: group, bound, calibration,
class). The regime's cell of ``n`` errors (its class's (group, bound, calibration), (group, any
bound, calibration), (calibration), then the same for every class, then all rows; a cell below 4
rows is skipped) has a centre ``m`` (its mean log error, shrunk towards the
next coarser cell of at least 8 rows with weight 4) and a conformal half-width ``q``: the
``ceil((n+1) * 0.8)``-th smallest ``|e - mean|`` of its rows. A small cell is widened towards the
wide default ``W`` (the ``unseen`` cell's half-width over all metrics, of the regime's class where
it has 8 rows, else of every class)::

    h = (n q + 4 W) / (n + 4)        80% interval of log(measured/predicted): m +- h

so 4 rows give half the way to ``W`` and 100 rows almost none. An ``unseen`` regime, whatever its
metric, takes the ``*/*/unseen`` cell of its model class (``*/*/unseen/moe``; that of every class
where its class has under 4 rows), built only from rows predicted without their whole combination
(when LOCO records are given; LOPO rows that happened to be unseen are left to them), as a band
about the prediction: ``+- h`` with ``q_abs``, the ``ceil((n+1) * 0.8)``-th smallest ``|e|``, in
place of ``q`` and every class's ``q_abs`` as ``W`` (the sign of a bias on a combination no fit
has seen is not known from the others). An MoE ``pooled`` figure takes the MoE band too
(:data:`BANDED`: its MoE terms rest on one or two publications per family). Reciprocal metrics
(tokens/s of one user, prompt tokens/s) flip the interval of their group. :func:`nested_coverage`
checks the stated coverage with each row's interval built from errors without its publication;
:func:`loco_coverage` with each row's interval built without its whole combination;
:func:`coverage_by` splits either check by model class and basis.
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any

from infermeter.errors import ConfigError
from infermeter.perfmodel.api import Deployment
from infermeter.perfmodel.freshpub import QUEUED

COVERAGE = 0.8
MIN_CELL = 4  # a cell with fewer rows is skipped (its conformal rank ceil((n+1)*0.8) would exceed n)
MIN_N = 8  # a cell with fewer rows borrows mean and spread from the next coarser cell that has this many
SHRINK = 4.0
WIDEN = 4.0  # rows' worth of weight the wide default W gets in a cell's half-width
# metric -> (group, orientation): orientation -1 for rates that are the reciprocal of the group's latency
METRIC_GROUPS: dict[str, tuple[str, int]] = {
    "ttft_ms": ("ttft", 1), "prefill_tokens_per_s": ("ttft", -1),
    "tpot_ms": ("tpot", 1), "decode_tokens_per_s": ("tpot", -1), "per_user_output_tokens_per_s": ("tpot", -1),
    "output_tokens_per_s": ("throughput", 1), "saturation_output_tokens_per_s": ("throughput", 1),
}
CALIBRATIONS = ("unseen", "pooled", "calibrated", "deployment")  # weakest first
# the bases whose figures take their class's unseen band (about the prediction) rather than a cell of their own: an MoE
# figure's fitted MoE terms rest on one or two publications per family, and its ``pooled`` cell held 44 % of 41 rows in
# the nested check (395-row corpus; the rows of one publication share an error of up to 5x), the band 81 % of 79
BANDED: dict[str, tuple[str, ...]] = {"dense": ("unseen",), "moe": ("unseen", "pooled"), "*": ("unseen",)}
_T90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372, 12: 1.356,
        15: 1.341, 20: 1.325, 25: 1.316, 30: 1.310, 40: 1.303, 60: 1.296, 120: 1.289}


def t90(df: int) -> float:
    """One-sided 0.90 quantile of Student's t with ``df`` degrees of freedom (table, normal beyond 120)."""
    if df >= 120:
        return 1.2816
    return _T90[max(k for k in _T90 if k <= max(df, 1))]


@dataclass(frozen=True, slots=True)
class Regime:
    group: str  # ttft | tpot | throughput
    bound: str  # prefill | decode
    calibration: str  # deployment | calibrated | pooled | unseen
    model_class: str = "*"  # dense | moe (:func:`model_class`); "*": not known, the cells of every class serve
    queued: bool = False  # a first token (ttft_ms) that arrives with other requests in flight (QUEUED_BATCH)

    @property
    def label(self) -> str:
        return f"{self.group}/{self.bound}/{self.calibration}"

    @property
    def fresh_class(self) -> str:
        """The class whose fresh-publication spread (:mod:`freshpub`) the interval carries: ``queued`` for a first
        token with others in flight (a new publication's queue, client and scheduler land on it whole), else the
        model class."""
        return QUEUED if self.queued else self.model_class


QUEUED_BATCH = 1.5  # sequences in flight above which a first token shares the engine with others (one user: about 1)


def model_class(spec: Any) -> str:  # noqa: ANN401 - a models.ModelSpec
    """``moe`` for a mixture-of-experts model (MLA ones included), else ``dense``: the class whose errors an interval draws on."""
    return str(spec.model_class)


def _status(d: Deployment, which: int) -> str:
    """How the efficiency ``which`` (0 prefill, 1 decode) of ``d`` is calibrated (see the module docstring)."""
    from infermeter.perfmodel.calibration import dtype_class

    e = d.calibration_entries[which] if len(d.calibration_entries) > which else None
    if e is None or not e.fitted:
        return "deployment" if e is not None and e.origin else "unseen"
    if d.spec.is_moe or d.spec.is_mla:  # its own MoE terms decide, and rest on few publications (never the dense rows' cell)
        ents = d.calibration_entries
        picks = (8,) if which == 0 else (7, 9)  # prefill: moe_gemm; decode: moe_layer_overhead or the per-expert cost
        ms = [m for m in (ents[i] for i in picks if len(ents) > i) if m is not None and m.fitted]
        if not ms:
            return "unseen"
        if any(m.origin for m in ms):
            return "deployment"
        return "pooled"
    if e.origin:
        return "deployment"
    eng = d.engine_defaults.name if d.engine_defaults else d.engine
    dtype = (d.prefill_dtype or d.dtype) if which == 0 else (d.decode_dtype or d.dtype)
    if e.family != d.hw.family or e.engine != eng or e.dtype not in (dtype, dtype_class(dtype)):
        return "unseen"
    return "calibrated" if e.tp == d.config.tp or str(e.tp) == str(d.config.tp) else "pooled"


def _throughput_bound(d: Deployment, input_tokens: int, output_tokens: int, batch: int) -> str:
    """``prefill`` when a request's prompt costs more step time than its share of the decode steps."""
    from infermeter.perfmodel.serving import engine_of

    n = max(1, math.ceil(batch / max(d.config.replicas * d.pipeline_depth, 1)))
    ctx = input_tokens + output_tokens / 2
    t_prefill = d.prefill_time(input_tokens, engine_of(d).max_batched_tokens)
    t_decode = output_tokens * d.step_time(n, int(n * ctx), n) / n
    return "prefill" if t_prefill > t_decode else "decode"


def regime_of(d: Deployment, metric: str, input_tokens: int, output_tokens: int, batch: int,
              in_system: float | None = None) -> Regime:
    """The regime of ``metric`` predicted for ``d`` at ``input_tokens``/``output_tokens`` with ``batch`` sequences in flight;
    a first token is ``queued`` when more than ``QUEUED_BATCH`` requests share a replica (``in_system``: running and
    waiting, per replica; ``batch`` where not given)."""
    if metric not in METRIC_GROUPS:
        raise ConfigError(f"no prediction interval for metric {metric!r}; known: {', '.join(METRIC_GROUPS)}")
    group, kind = METRIC_GROUPS[metric][0], model_class(d.spec)
    if group == "ttft":
        load = batch if in_system is None else in_system
        return Regime(group, "prefill", _status(d, 0), kind, queued=metric == "ttft_ms" and load > QUEUED_BATCH)
    if group == "tpot":
        return Regime(group, "decode", _status(d, 1), kind)
    weakest = min((_status(d, 0), _status(d, 1)), key=CALIBRATIONS.index)
    return Regime(group, _throughput_bound(d, input_tokens, output_tokens, batch), weakest, kind)


def _ladder(regime: Regime) -> tuple[tuple[str, str, str, str], ...]:
    """The cell keys of ``regime``, finest first: (group, bound, calibration), (group, any bound, calibration),
    (calibration), each of its model class then of every class, then all rows (no key twice)."""
    levels = ((regime.group, regime.bound, regime.calibration), (regime.group, "*", regime.calibration),
              ("*", "*", regime.calibration))
    keys = [(*k, regime.model_class) for k in levels] + [(*k, "*") for k in levels] + [("*", "*", "*", "*")]
    return tuple(dict.fromkeys(keys))


@dataclass(frozen=True, slots=True)
class Cell:
    key: tuple[str, str, str, str]  # (group, bound, calibration, model class); "*" = any
    n: int
    mean: float  # of log(measured/predicted) in the group's orientation
    sd: float
    q80: float = math.nan  # conformal half-width: the ceil((n+1)*0.8)-th smallest |e - mean| (nan: too few rows)
    q80_abs: float = math.nan  # the same about zero: the ceil((n+1)*0.8)-th smallest |e| (the band of an unseen combination)

    @property
    def name(self) -> str:
        """``group/bound/calibration``, plus ``/class`` for a cell of one model class (``*/*/unseen/moe``)."""
        return "/".join(self.key[:3]) + ("" if self.key[3] == "*" else f"/{self.key[3]}")

    @property
    def usable(self) -> bool:
        return self.n >= MIN_CELL and math.isfinite(self.q80)


@dataclass(frozen=True, slots=True)
class IntervalTable:
    cells: tuple[Cell, ...]
    source: str = ""
    rows: int = 0
    publications: int = 0
    fresh: tuple[tuple[str, float, int], ...] = ()  # (model class, tau, blind rows): :mod:`freshpub`'s spread; () = none

    def fresh_tau(self, model_class: str) -> float:
        """The fresh-publication spread of ``model_class`` (of every class, ``*``, where it has none; 0 without a history)."""
        taus = {c: t for c, t, _ in self.fresh}
        return taus.get(model_class, taus.get("*", 0.0))

    def fresh_tau_of(self, regime: Regime) -> float:
        """The spread an interval in ``regime`` carries: its :attr:`Regime.fresh_class`'s; a table with no ``queued``
        entry (one written before that class) gives a queued first token its model class's."""
        known = {c for c, _, _ in self.fresh}
        return self.fresh_tau(regime.fresh_class if regime.fresh_class in known else regime.model_class)

    def with_fresh(self, spread: dict[str, tuple[float, int]]) -> IntervalTable:
        """This table with the fresh-publication spread ``spread`` (``{class: (tau, rows)}``, :func:`freshpub.spread`)."""
        return replace(self, fresh=tuple((c, t, n) for c, (t, n) in sorted(spread.items())))

    def _get(self, key: tuple[str, str, str, str]) -> Cell | None:
        return next((c for c in self.cells if c.key == key), None)

    def chain(self, regime: Regime) -> list[Cell]:
        """The cells from ``regime``'s own to all rows (missing levels skipped): first those of its model class, then
        those of every class."""
        return [c for k in _ladder(regime) if (c := self._get(k)) is not None]

    def _unseen_band(self, model_class: str) -> Cell | None:
        """The ``*/*/unseen`` cell of ``model_class`` (of every class where that one has too few rows)."""
        for k in dict.fromkeys((model_class, "*")):
            c = self._get(("*", "*", "unseen", k))
            if c is not None and c.n >= MIN_CELL and math.isfinite(c.q80_abs):
                return c
        return None

    def wide(self, model_class: str = "*", about_zero: bool = False) -> float:
        """The wide default half-width ``W`` of ``model_class``: its ``unseen`` cell over all metrics (that of every
        class where it has fewer than ``MIN_N`` rows; else the widest usable cell); ``about_zero``: its ``q80_abs``."""
        for k in dict.fromkeys((model_class, "*")):
            c = self._get(("*", "*", "unseen", k))
            if c is not None and c.n >= (MIN_N if k != "*" else MIN_CELL) and math.isfinite(c.q80):
                return c.q80_abs if about_zero and math.isfinite(c.q80_abs) else c.q80
        return max((x.q80 for x in self.cells if x.usable), default=math.log(2.0))

    def cell_of(self, regime: Regime) -> tuple[Cell, Cell | None]:
        """The cell an interval in ``regime`` uses and the coarser cell its centre is shrunk towards."""
        if regime.calibration in BANDED.get(regime.model_class, ("unseen",)) and (band := self._unseen_band(regime.model_class)) is not None:
            return band, None  # an unseen combination: the band of every row of its class that was unseen, whatever its metric
        chain = self.chain(regime)
        if regime.calibration == "deployment" and not any(c.key[2] == "deployment" for c in chain):
            chain = self.chain(Regime(regime.group, regime.bound, "calibrated", regime.model_class))  # no residuals: as calibrated rows
        usable = [c for c in chain if c.usable]
        if not usable:
            raise ConfigError(f"the uncertainty table has no cell of {MIN_CELL}+ rows for regime {regime.label}")
        return usable[0], next((c for c in usable[1:] if c.n >= MIN_N), None)

    def multipliers(self, regime: Regime) -> tuple[float, float, str]:
        """(low, high) bounds of measured/predicted in the group's orientation, and the cell used (and the
        fresh-publication spread added in quadrature, for every basis but a deployment's own)."""
        cell, parent = self.cell_of(regime)
        # a deployment's own residuals measure that deployment, not a new publication; a deployment file without
        # residuals falls back to the corpus's cells, and with them keeps the spread
        tau = 0.0 if cell.key[2] == "deployment" else self.fresh_tau_of(regime)
        used = f"{cell.name} (n={cell.n})" + (f" + fresh-publication spread {tau:.2f}" if tau > 0 else "")
        if cell.key[:3] == ("*", "*", "unseen") and math.isfinite(cell.q80_abs):
            # the sign of the model's error on a combination no fit has seen is unknown: a band about the prediction,
            # a class's few rows widened towards the band of every class
            w = self.wide(about_zero=True)
            h = math.hypot((cell.n * cell.q80_abs + WIDEN * max(w, cell.q80_abs)) / (cell.n + WIDEN), tau)
            return math.exp(-h), math.exp(h), used
        mean = cell.mean if parent is None else (cell.n * cell.mean + SHRINK * parent.mean) / (cell.n + SHRINK)
        if cell.key[2] == "deployment":  # a deployment's own residuals widen towards the calibrated rows, not unseen ones
            cal = Regime(regime.group, regime.bound, "calibrated", regime.model_class)
            w = self.cell_of(cal)[0].q80 if any(c.key[2] == "calibrated" for c in self.cells) else self.wide(regime.model_class)
        else:
            w = self.wide(regime.model_class)
        h = math.hypot((cell.n * cell.q80 + WIDEN * max(w, cell.q80)) / (cell.n + WIDEN), tau)
        return math.exp(mean - h), math.exp(mean + h), used

    @classmethod
    def from_records(cls, records: list[tuple[Regime, float]], *, source: str = "", publications: int = 0) -> IntervalTable:
        """Cells at every level, of the record's model class and of every class, from (regime, log error in the group's
        orientation) records."""
        groups: dict[tuple[str, str, str, str], list[float]] = {}
        for reg, e in records:
            for key in _ladder(reg):
                groups.setdefault(key, []).append(e)
        cells = tuple(_cell(k, v) for k, v in sorted(groups.items()))
        return cls(cells=cells, source=source, rows=len(records), publications=publications)

    @classmethod
    def from_yaml(cls, data: dict[str, Any], origin: str) -> IntervalTable:
        try:
            cells = tuple(Cell(key=(str(c["group"]), str(c["bound"]), str(c["calibration"]), str(c.get("class", "*"))), n=int(c["n"]),
                               mean=float(c["log_bias"]), sd=float(c["log_sd"]), q80=float(c.get("log_q80", math.nan)),
                               q80_abs=float(c.get("log_q80_abs", math.nan)))
                          for c in data["cells"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}: uncertainty: bad cell ({exc}); each needs group, bound, calibration, n, log_bias, log_sd") from None
        try:
            fresh = tuple((str(k), float(v["tau"]), int(v["rows"])) for k, v in (data.get("fresh_publication") or {}).items())
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{origin}: uncertainty: fresh_publication: each class needs tau and rows ({exc})") from None
        if any(not (math.isfinite(t) and t >= 0) for _, t, _ in fresh):
            raise ConfigError(f"{origin}: uncertainty: fresh_publication: tau must be a finite number >= 0")
        return cls(cells=cells, source=str(data.get("source", "")), rows=int(data.get("rows", 0)), publications=int(data.get("publications", 0)),
                   fresh=fresh)

    def to_yaml(self, coverage_check: tuple[float, int] | None = None, by: dict[str, dict[str, float | int]] | None = None) -> str:
        lines = ["uncertainty:", f"  coverage: {COVERAGE}", f"  rows: {self.rows}", f"  publications: {self.publications}",
                 f"  source: \"{self.source}\""]
        if coverage_check:
            lines.append(f"  nested_coverage: {{inside: {coverage_check[0]:.3f}, rows: {coverage_check[1]}}}")
        if by:  # the nested check per model class and basis
            lines.append("  nested_coverage_by: {" + ", ".join(f"\"{k}\": {{inside: {v['inside']:.3f}, rows: {v['rows']}}}"
                                                             for k, v in by.items()) + "}")
        if self.fresh:  # added in quadrature to every interval but a deployment's own (perfmodel.freshpub)
            lines.append("  fresh_publication: {" + ", ".join(f"\"{c}\": {{tau: {t:.4f}, rows: {n}}}" for c, t, n in self.fresh) + "}")
        lines.append("  cells:")
        for c in self.cells:
            lines.append(f"    - {{group: \"{c.key[0]}\", bound: \"{c.key[1]}\", calibration: \"{c.key[2]}\", class: \"{c.key[3]}\", n: {c.n}, "
                         f"log_bias: {c.mean:.4f}, log_sd: {c.sd:.4f}, log_q80: {c.q80:.4f}"
                         + (f", log_q80_abs: {c.q80_abs:.4f}" if c.key[2] == "unseen" else "") + "}")
        return "\n".join(lines) + "\n"


def _cell(key: tuple[str, str, str, str], errors: list[float]) -> Cell:
    n = len(errors)
    mean = statistics.fmean(errors)
    dev = sorted(abs(e - mean) for e in errors)
    rank = math.ceil((n + 1) * COVERAGE)
    around_zero = sorted(abs(e) for e in errors)
    return Cell(key=key, n=n, mean=mean, sd=statistics.stdev(errors) if n > 1 else abs(errors[0]),
                q80=dev[rank - 1] if rank <= n else math.nan, q80_abs=around_zero[rank - 1] if rank <= n else math.nan)


def table_of(cal: Any = None) -> IntervalTable:  # noqa: ANN401 - a Calibration
    """The interval table of a calibration (the shipped one by default), with its residuals as ``deployment`` cells."""
    from infermeter.perfmodel.calibration import load_calibration

    cal = cal or load_calibration()
    if not cal.uncertainty:
        raise ConfigError("the calibration has no uncertainty: block (python -m infermeter.perfmodel.uncertainty prints one)")
    table = IntervalTable.from_yaml(cal.uncertainty, cal.origin or "calibration.yaml")
    if cal.residuals:
        extra = IntervalTable.from_records([(Regime(METRIC_GROUPS[m][0] if m in METRIC_GROUPS else m, "*", "deployment"),
                                             METRIC_GROUPS.get(m, (m, 1))[1] * e) for m, es in cal.residuals.items() for e in es])
        table = replace(table, cells=tuple(c for c in extra.cells if c.key[2] == "deployment" and c.key[1] == "*") + table.cells)
    return table


def interval(metric: str, value: float, regime: Regime, table: IntervalTable | None = None) -> tuple[float, float, str]:
    """The 80% interval of a predicted ``value`` of ``metric`` in ``regime``: (low, high, basis)."""
    if metric not in METRIC_GROUPS:
        raise ConfigError(f"no prediction interval for metric {metric!r}; known: {', '.join(METRIC_GROUPS)}")
    table = table or table_of()
    m_lo, m_hi, used = table.multipliers(regime)
    if METRIC_GROUPS[metric][1] < 0:
        m_lo, m_hi = 1 / m_hi, 1 / m_lo
    basis = (f"{COVERAGE:.0%} interval from out-of-sample errors (leave-one-publication-out; unseen combinations: "
             f"leave-one-combination-out; new publications: blind sets), basis {regime.calibration}, regime {regime.label}, cell {used}")
    return value * m_lo, value * m_hi, basis


def basis_of(regime: Regime, table: IntervalTable | None = None) -> dict[str, Any]:
    """``{basis, n, cell}``: how the interval of a figure in ``regime`` is calibrated and how many rows stand behind it;
    plus ``fresh_held_out`` (``{rows, inside}``) where the interval carries the fresh-publication spread: how many rows
    of the figure's metric group, over the blind sets each held out in turn, fell inside intervals so built
    (:func:`fresh_held_out`)."""
    table = table or table_of()
    cell, _ = table.cell_of(regime)
    out: dict[str, Any] = {"basis": regime.calibration, "n": cell.n, "cell": cell.name}
    group = fresh_group(regime.group, regime.queued)
    if cell.key[2] != "deployment" and table.fresh_tau_of(regime) > 0 and (held := fresh_held_out().get(group)):
        out["fresh_held_out"] = dict(held) | {"group": group}
    return out


def fresh_group(group: str, queued: bool) -> str:
    """The group a figure's fresh-publication check is reported under: its metric group, first tokens with others in
    flight apart (``ttft_queued``)."""
    return f"{group}_{QUEUED}" if queued else group


@functools.lru_cache(maxsize=1)
def fresh_held_out() -> dict[str, dict[str, int]]:
    """The shipped blind history's held-out check per :func:`fresh_group` (:func:`freshpub.held_out_by_group`): ``{group:
    {rows, inside}}``; ``{}`` without a history."""
    from infermeter.perfmodel import freshpub

    if not freshpub.HISTORY.exists():
        return {}
    return freshpub.held_out_by_group(freshpub.load(), lambda r: fresh_group(
        METRIC_GROUPS[r.metric][0] if r.metric in METRIC_GROUPS else r.metric, r.fresh_class == QUEUED))


def combination(row: Any) -> tuple[str, str, str, str]:  # noqa: ANN401 - a corpus Row
    """A row's (hardware family, engine, precision class, ``moe`` or ``dense``): what an ``unseen`` deployment has no row of."""
    from infermeter.perfmodel.calibration import dtype_class
    from infermeter.perfmodel.hardware import get_hardware
    from infermeter.perfmodel.models import get_model

    kind = "moe" if get_model(row.model).is_moe else "dense"
    return get_hardware(row.hardware).family, row.engine, dtype_class(row.weight_dtype), kind


Record = tuple[Regime, float, str, Any, float]  # regime, log error (group orientation), publication, row, prediction


def _record(row: Any, cal: Any, pub: str) -> Record:  # noqa: ANN401
    from infermeter.perfmodel.validate import deployment_for, validation_regime, value_of

    d = deployment_for(row, cal)
    pred = value_of(row, d)
    reg = validation_regime(row, d)
    return reg, METRIC_GROUPS[row.metric][1] * math.log(row.value / pred), pub, row, pred


def records_of(report: Any) -> list[tuple[Regime, float, str, Any]]:  # noqa: ANN401 - a validate.Report
    """(regime under the row's leave-one-publication-out fit, log error in the group's orientation, publication, row)."""
    from infermeter.perfmodel.corpus import publication
    from infermeter.perfmodel.validate import deployment_for, validation_regime

    out = []
    for r in report.results:
        if r.predicted_lopo is None:
            continue
        row = r.row
        pub = publication(row)
        reg = validation_regime(row, deployment_for(row, report.refits[pub]))
        out.append((reg, METRIC_GROUPS[row.metric][1] * math.log(row.value / r.predicted_lopo), pub, r))
    return out


def loco_records(rows: list[Any], cal: Any = None) -> list[Record]:  # noqa: ANN401 - corpus Rows, a Calibration
    """Every row predicted by a fit (from the priors) without any row of its :func:`combination`, in its regime there."""
    from infermeter.perfmodel.calibration import load_calibration
    from infermeter.perfmodel.corpus import publication
    from infermeter.perfmodel.fit import fit_many, priors_only

    base = priors_only(cal or load_calibration())
    combos = list(dict.fromkeys(combination(r) for r in rows))
    refits = fit_many([[r for r in rows if combination(r) != combo] for combo in combos], base)
    out: list[Record] = []
    for combo, refit in zip(combos, refits, strict=True):
        out += [_record(r, refit, publication(r)) for r in rows if combination(r) == combo]
    return out


def _unseen(loco: list[Record] | None) -> list[tuple[Regime, float, str, Any]]:
    return [(g, e, p, r) for g, e, p, r, _ in (loco or []) if g.calibration == "unseen"]


def _seen(recs: list[tuple[Regime, float, str, Any]], loco: list[Record] | None) -> list[tuple[Regime, float, str, Any]]:
    """The leave-one-publication-out records the table keeps: with ``loco`` given, the ``unseen`` cells hold its rows only
    (each row once, predicted without its whole combination), so LOPO rows that happened to be unseen are left to it."""
    return [x for x in recs if x[0].calibration != "unseen"] if loco else recs


def table_from_report(report: Any, source: str = "", loco: list[Record] | None = None) -> IntervalTable:  # noqa: ANN401
    """The table of a leave-one-publication-out report, plus the ``unseen`` rows of ``loco`` (:func:`loco_records`)."""
    recs = records_of(report)
    both = [(g, e) for g, e, _, _ in _seen(recs, loco)] + [(g, e) for g, e, _, _ in _unseen(loco)]
    return IntervalTable.from_records(both, source=source, publications=len({p for _, _, p, _ in recs}))


Check = tuple[Any, float, float, bool, Regime]  # a validate.RowResult or a Record, low, high, inside, the row's regime


def nested_coverage(report: Any, loco: list[Record] | None = None) -> tuple[float, int, list[Check]]:  # noqa: ANN401
    """Share of rows inside the interval built without their own publication (errors and fit both out of sample).

    Each row's interval: its leave-one-publication-out prediction and regime, with a table of the other
    publications' errors (their LOPO errors and, from ``loco``, their unseen-combination errors). Each check is
    (row result, low, high, inside, regime); :func:`coverage_by` splits them by model class and basis."""
    recs = records_of(report)
    unseen = _unseen(loco)
    checks = []
    for reg, e, pub, r in recs:
        table = IntervalTable.from_records([(g, x) for g, x, p, _ in _seen(recs, loco) + unseen if p != pub])
        try:
            lo, hi, _ = interval(r.row.metric, r.predicted_lopo, reg, table)
        except ConfigError:  # the other publications leave fewer than MIN_CELL rows: no interval can be stated
            continue
        checks.append((r, lo, hi, lo <= r.row.value <= hi, reg))
    inside = sum(c[3] for c in checks)
    return (inside / len(checks) if checks else math.nan), len(checks), checks


def loco_coverage(report: Any, loco: list[Record]) -> tuple[float, int, list[Check]]:  # noqa: ANN401
    """The emulated unseen-publication check: each row predicted without its whole combination (``loco``), its
    interval from a table without any row of that combination (nor of its publication)."""
    recs = records_of(report)
    unseen = _unseen(loco)
    checks = []
    for rec in loco:
        reg, _, pub, row, pred = rec
        c = combination(row)
        keep = [(g, x) for g, x, p, r in _seen(recs, loco) if p != pub and combination(r.row) != c]
        keep += [(g, x) for g, x, p, r in unseen if p != pub and combination(r) != c]
        try:
            lo, hi, _ = interval(row.metric, pred, reg, IntervalTable.from_records(keep))
        except ConfigError:
            continue
        checks.append((rec, lo, hi, lo <= row.value <= hi, reg))
    return (sum(c[3] for c in checks) / len(checks) if checks else math.nan), len(checks), checks


def coverage_by(checks: list[Check]) -> dict[str, dict[str, dict[str, float | int]]]:
    """``{"by_basis": {basis: {inside, rows}}, "by_class": {class: ...}, "by_class_basis": {"class/basis": ...}}`` of
    the checks of :func:`nested_coverage` or :func:`loco_coverage` (``inside`` a share, rounded to 4 places)."""
    split: dict[str, dict[str, list[bool]]] = {"by_basis": {}, "by_class": {}, "by_class_basis": {}}
    for c in checks:
        reg, ok = c[4], c[3]
        for part, key in (("by_basis", reg.calibration), ("by_class", reg.model_class),
                          ("by_class_basis", f"{reg.model_class}/{reg.calibration}")):
            split[part].setdefault(key, []).append(ok)
    return {part: {k: {"inside": round(sum(v) / len(v), 4), "rows": len(v)} for k, v in sorted(d.items())}
            for part, d in split.items()}


def block(rows: list[Any], report: Any, path: str) -> str:  # noqa: ANN401 - corpus Rows, a validate.Report
    """The ``uncertainty:`` block of ``calibration.yaml`` from a corpus and its leave-one-publication-out report (the
    leave-one-combination-out pass runs here)."""
    from infermeter.perfmodel import freshpub

    loco = loco_records(rows)
    frac, n, checks = nested_coverage(report, loco)
    table = table_from_report(report, source=f"leave-one-publication-out and leave-one-combination-out errors of {path}; "
                                             f"python -m infermeter.perfmodel.uncertainty {path}", loco=loco)
    table = table.with_fresh(freshpub.spread(freshpub.load()))
    return table.to_yaml((frac, n), coverage_by(checks)["by_class_basis"])


def main(argv: list[str]) -> int:
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.validate import validate

    path = argv[0] if argv else "tests/data/published-measurements.csv"
    rows = load_rows(path)
    sys.stdout.write(block(rows, validate(rows, holdout="source"), path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
