"""The fresh-publication spread: how far past its stated 80% interval the model missed on publications no fit had seen.

Promise: ``data/blind-history.csv`` keeps, for every row of every blind set, what the shipped model
of that day stated for it *before* the set joined the corpus (prediction and 80% interval) beside
the published value; :func:`spread` turns those records into one extra log half-width ``tau`` per
class (the model class, dense or MoE; a first token with other requests in flight, of either, is ``queued``:
a new publication's queue, client and scheduler land on it whole, and it misses by far more) such that ``sqrt(h**2 + tau**2)`` about each stated centre would have held 80% of the
class's rows; :mod:`~infermeter.perfmodel.uncertainty` adds it, in quadrature, to every interval
that is not a deployment's own (a user's calibration file measures their deployment, not a new
publication).

Why: the nested leave-one-publication-out check on the corpus (each row's interval built without
its publication) held 85% of 395 rows, yet the stated intervals held 60%, 33% and 43% of three
blind sets (52, 61 and 74 rows). The corpus's publications chose the model's structure, so holding
one out is not the same as meeting a new one; the blind sets are the only record of the latter.

Per row ``i`` with prediction ``p``, stated interval ``[lo, hi]`` and published value ``v``: centre
``m = (log lo + log hi)/2 - log p``, half-width ``h = (log hi - log lo)/2``, error
``y = log(v / p)``, and the least extra spread that brings it inside
``tau_i = sqrt(max(0, (y - m)**2 - h**2))``. A class's ``tau`` is the ``ceil((n+1) * 0.8)``-th
smallest ``tau_i`` of its ``n`` rows (split conformal, as the cells are); ``*`` pools every class.
:func:`held_out` checks the rule the honest way: each set's rows against the ``tau`` of the other
sets::

    >>> recs = [Record("s1", "c", f"r{i}", "p", "dense", "tpot_ms", v, 10.0, 9.0, 11.0) for i, v in
    ...         enumerate([10.0, 10.5, 12.0, 15.0, 30.0])]
    >>> [round(r.excess, 3) for r in recs]
    [0.0, 0.0, 0.158, 0.398, 1.099]
    >>> round(spread(recs)["*"][0], 3)  # rank ceil(6 * 0.8) = 5 of 5 (a class under 8 rows takes this one)
    1.099

A new blind set joins the history after it has been scored and before it is folded into the corpus:
``python -m infermeter.perfmodel.freshpub add SET COMMIT BLIND.csv VALIDATE.json`` appends its rows
from ``infermeter plan --validate BLIND.csv --holdout none --json`` run with that commit's model.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infermeter.errors import DataError
from infermeter.perfmodel.hardware import DATA_DIR

HISTORY = DATA_DIR / "blind-history.csv"
COVERAGE = 0.8
FIELDS = ("set", "scored_at", "id", "publication", "model_class", "metric", "measured", "predicted", "low", "high",
          "fresh_tau", "fresh_class")
MIN_ROWS = 8  # a class with fewer records takes the spread of every class
CLASSES = ("dense", "moe")  # ModelSpec.model_class
QUEUED = "queued"  # first tokens with other requests in flight, of either model class (uncertainty.Regime.queued)


@dataclass(frozen=True, slots=True)
class Record:
    set: str  # the blind set's name
    scored_at: str  # the commit whose shipped model stated the prediction
    id: str
    publication: str
    model_class: str  # dense | moe
    metric: str
    measured: float
    predicted: float
    low: float
    high: float
    fresh_tau: float = 0.0  # the spread the stated interval already carried (0 before this module existed)
    fresh_class: str = ""  # QUEUED: a first token with others in flight takes that class's spread; "": its model class's

    @property
    def spread_class(self) -> str:
        return self.fresh_class or self.model_class

    def _centre_and_width(self) -> tuple[float, float]:
        """Centre and half-width of the stated interval in log space, less the spread it already carried."""
        lo, hi = math.log(self.low / self.predicted), math.log(self.high / self.predicted)
        return (lo + hi) / 2, math.sqrt(max(0.0, ((hi - lo) / 2) ** 2 - self.fresh_tau ** 2))

    @property
    def excess(self) -> float:
        """``tau_i``: the least spread that, added in quadrature to the stated half-width (without the spread it
        already carried), brings the value inside."""
        m, h = self._centre_and_width()
        y = math.log(self.measured / self.predicted)
        return math.sqrt(max(0.0, (y - m) ** 2 - h ** 2))


def _float(row: dict[str, str], key: str, where: str) -> float:
    try:
        x = float(row[key])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{where}: {key!r} must be a number, got {row.get(key)!r}") from None
    if not x > 0 or not math.isfinite(x):
        raise DataError(f"{where}: {key!r} must be positive and finite, got {x}")
    return x


def load(path: Path | str | None = None) -> list[Record]:
    """The records of ``path`` (the shipped history by default); a bad row is a :class:`DataError` naming it."""
    p = Path(path or HISTORY)
    try:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise DataError(f"{p}: cannot read the blind history ({exc.strerror})") from None
    out: list[Record] = []
    seen: set[tuple[str, str]] = set()
    for n, r in enumerate(rows, start=2):
        where = f"{p}:{n} ({r.get('id', '?')})"
        missing = [k for k in FIELDS if not r.get(k)]  # fresh_tau is "0" where none was carried
        if missing:
            raise DataError(f"{where}: missing {', '.join(missing)}")
        if r["model_class"] not in CLASSES:
            raise DataError(f"{where}: model_class must be one of {', '.join(CLASSES)}, got {r['model_class']!r}")
        if r["fresh_class"] not in (QUEUED, r["model_class"]):
            raise DataError(f"{where}: fresh_class must be {QUEUED!r} (a first token with others in flight) or the row's "
                            f"model_class {r['model_class']!r}, got {r['fresh_class']!r}")
        if (r["set"], r["id"]) in seen:
            raise DataError(f"{where}: row {r['id']!r} of set {r['set']!r} is already in the history")
        seen.add((r["set"], r["id"]))
        try:
            carried = float(r["fresh_tau"])
        except (TypeError, ValueError):
            raise DataError(f"{where}: 'fresh_tau' must be a number, got {r['fresh_tau']!r}") from None
        measured, predicted, low, high = (_float(r, k, where) for k in ("measured", "predicted", "low", "high"))
        rec = Record(r["set"], r["scored_at"], r["id"], r["publication"], r["model_class"], r["metric"], measured,
                     predicted, low, high, fresh_tau=carried, fresh_class="" if r["fresh_class"] == r["model_class"] else r["fresh_class"])
        if not rec.low <= rec.predicted <= rec.high:
            raise DataError(f"{where}: the stated interval [{rec.low}, {rec.high}] does not hold its prediction {rec.predicted}")
        if not (math.isfinite(carried) and 0 <= carried <= math.log(rec.high / rec.low) / 2 + 1e-6):
            raise DataError(f"{where}: 'fresh_tau' {carried} must be >= 0 and no wider than the stated interval's half-width "
                            f"{math.log(rec.high / rec.low) / 2:.4f} (log)")
        out.append(rec)
    return out


def _rank(values: list[float]) -> float:
    xs = sorted(values)
    k = math.ceil((len(xs) + 1) * COVERAGE)
    return xs[min(k, len(xs)) - 1]


def spread(records: list[Record]) -> dict[str, tuple[float, int]]:
    """``{class: (tau, rows)}`` for each model class with ``MIN_ROWS`` records (else that of every class) and ``*``."""
    if not records:
        return {}
    out = {"*": (_rank([r.excess for r in records]), len(records))}
    for cls in sorted({r.spread_class for r in records}):
        mine = [r.excess for r in records if r.spread_class == cls]
        out[cls] = (_rank(mine), len(mine)) if len(mine) >= MIN_ROWS else out["*"]
    return out


def inside(rec: Record, tau: float) -> bool:
    """Whether ``rec``'s published value lies in its stated interval, without the spread it carried, widened by
    ``tau`` in quadrature (``inside(rec, rec.fresh_tau)``: the interval as stated)."""
    m, h = rec._centre_and_width()
    return abs(math.log(rec.measured / rec.predicted) - m) <= math.hypot(h, tau) * (1 + 1e-12)


def _held_out_checks(records: list[Record]) -> list[tuple[Record, bool]]:
    """Each record and whether it lies inside its interval widened by the spread of the *other* sets."""
    out = []
    for s in dict.fromkeys(r.set for r in records):
        taus = spread([r for r in records if r.set != s])
        out += [(r, inside(r, taus.get(r.spread_class, taus["*"])[0])) for r in records if r.set == s]
    return out


def held_out(records: list[Record]) -> dict[str, dict[str, float | int]]:
    """Each set's rows checked against the spread of the other sets: ``{set: {rows, inside, stated}}`` (``stated``: rows
    inside the interval as stated then), plus ``all``."""
    out: dict[str, dict[str, float | int]] = {}
    for r, ok in _held_out_checks(records):
        v = out.setdefault(r.set, {"rows": 0, "inside": 0, "stated": 0})
        v["rows"] += 1
        v["inside"] += ok
        v["stated"] += inside(r, r.fresh_tau)
    out["all"] = {k: sum(int(v[k]) for v in out.values()) for k in ("rows", "inside", "stated")}
    return out


def held_out_by_group(records: list[Record], group_of: Callable[[Record], str]) -> dict[str, dict[str, int]]:
    """The held-out check of :func:`held_out` per group (``group_of(record)``; ``{group: {rows, inside}}``):
    first tokens, where a new publication's queue, client and network land whole, hold far fewer than the rest
    (:func:`~infermeter.perfmodel.uncertainty.fresh_held_out` applies it to the shipped history)."""
    out: dict[str, dict[str, int]] = {}
    for r, ok in _held_out_checks(records):
        v = out.setdefault(group_of(r), {"rows": 0, "inside": 0})
        v["rows"] += 1
        v["inside"] += ok
    return out


def records_from(set_name: str, commit: str, blind_csv: Path | str, validate_json: Path | str) -> list[Record]:
    """The records of one blind set: ``validate_json`` (``plan --validate BLIND --holdout none --json`` of the model at
    ``commit``) joined to ``blind_csv``'s rows for their publication and model class."""
    from infermeter.perfmodel.corpus import load_rows, publication
    from infermeter.perfmodel.models import get_model

    rows = {r.id: r for r in load_rows(blind_csv)}
    try:
        report = json.loads(Path(validate_json).read_text())
        scored = report["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{validate_json}: not the JSON of plan --validate ({exc})") from None
    # the spread the model of that commit already added to its intervals (none before this module)
    carried = ((report.get("interval_coverage") or {}).get("fresh_publication") or {}).get("tau") or {}
    out = []
    for s in scored:
        row = rows.get(s["id"])
        if row is None:
            raise DataError(f"{validate_json}: row {s['id']!r} is not in {blind_csv}")
        if not s.get("interval"):
            raise DataError(f"{validate_json}: row {s['id']!r} states no interval")
        cls = get_model(row.model).model_class
        fresh = s.get("fresh_class") or cls  # the class whose spread that model gave the row (its model class before)
        if fresh not in (QUEUED, cls):
            raise DataError(f"{validate_json}: row {s['id']!r}: fresh_class {fresh!r} is neither {QUEUED!r} nor {cls!r}")
        own = s.get("interval_basis") == "deployment"  # a deployment's own residuals carry no spread
        out.append(Record(set_name, commit, row.id, publication(row), cls, row.metric, float(s["measured"]),
                          float(s["predicted"]), float(s["interval"][0]), float(s["interval"][1]),
                          fresh_tau=0.0 if own else float(carried.get(fresh, carried.get("*", 0.0))),
                          fresh_class="" if fresh == cls else fresh))
    return out


def write(records: list[Record], path: Path | str | None = None) -> None:
    """``records`` as a history file at ``path`` (the shipped history by default)."""
    with Path(path or HISTORY).open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(FIELDS)
        for r in records:
            w.writerow([r.set, r.scored_at, r.id, r.publication, r.model_class, r.metric,
                        *(f"{x:.6g}" for x in (r.measured, r.predicted, r.low, r.high)), f"{r.fresh_tau:.4f}", r.spread_class])


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "add":
        have = load() if HISTORY.exists() else []
        new = records_from(*argv[1:])
        if {r.set for r in have} & {r.set for r in new}:
            raise DataError(f"{HISTORY}: set {argv[1]!r} is already in the history")
        write(have + new)
        sys.stderr.write(f"freshpub: {len(new)} records of {argv[1]} appended to {HISTORY}\n")
        return 0
    if argv:
        raise DataError("usage: python -m infermeter.perfmodel.freshpub [add SET COMMIT BLIND.csv VALIDATE.json]")
    recs = load()
    for cls, (tau, n) in spread(recs).items():
        sys.stdout.write(f"{cls}: tau {tau:.3f} from {n} rows\n")
    for s, v in held_out(recs).items():
        sys.stdout.write(f"{s}: {v['inside']}/{v['rows']} inside with the other sets' tau ({v['stated']} as stated)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
