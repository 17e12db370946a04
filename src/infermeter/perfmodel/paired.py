"""How far apart two predictions can be wrong: the model's paired out-of-sample errors.

Promises: :func:`ratio_interval` gives the 80% interval of the true ratio of two predicted figures
(e.g. two configurations' cost per request) from the model's errors on *pairs* of published rows:
two hardware measured by one publication under the same conditions (model, dtype, engine,
scenario, lengths, metric, device count). Their log errors ``log(measured/predicted)`` under the
leave-one-publication-out fit are differenced; the spread of those differences is what a
comparison of two predictions inherits. Pairs on one hardware family (A100 SXM vs PCIe, H100 vs
H200) share the fitted efficiencies and err together (sd ~0.07); pairs across families much less
so (sd ~0.2, about the single-row spread times sqrt(2) minus a little), so the same figures make
a clear call within a family and a close one across::

    lo, hi, basis = ratio_interval(1.5, same_family=True)     # e.g. (1.35, 1.67, "80% interval ...")

Pairs of MoE rows are left out: TensorRT-LLM v1.0's MoE tables put the H200 column 2.2-3.7x above
the H100 one (attention data parallelism, which the model does not plan), and with them the
same-family spread is 0.34 instead of 0.07, which would widen every dense comparison; a ratio of two
MoE figures therefore inherits the dense pairs' spread and is too narrow (compare their single
intervals instead).

How the intervals did on pairs no fit had seen: :func:`blind_pairs` takes the same kind of pairs from
the blind sets' history (``data/blind-history.csv``: each row's prediction by the model of the day it
was scored, before its set joined the corpus) and counts the pairs whose true ratio fell inside the
interval ``ratio_interval`` states (``python -m infermeter.perfmodel.paired --blind``). On the first
four blind sets only two publications measured one configuration on two hardware families (17
dense pairs): the shipped cross-family interval (a half-width of 0.68 in log) held 10 of them, so a
cross-family call is, if anything, less certain than stated, and a tighter spread (the conformal rank of
the corpus pairs, 0.35) held 6 and was not shipped for that reason. A test recomputes these counts.

The shipped table is ``data/paired-errors.yaml`` (``python -m infermeter.perfmodel.paired
tests/data/published-measurements.csv`` derives it; a test keeps it equal to a fresh derivation).
"""

from __future__ import annotations

import itertools
import math
import sys
from functools import lru_cache
from typing import Any

import yaml

from infermeter.errors import ConfigError
from infermeter.perfmodel.configspec import parse_config
from infermeter.perfmodel.hardware import DATA_DIR, get_hardware
from infermeter.perfmodel.uncertainty import COVERAGE, records_of, t90
from infermeter.yamlfile import safe_load

# the settings that define a row's workload (not its server): rows differing in one are not one workload on two hardware
WORKLOAD = ("lengths", "rate", "requests", "max_output")

PAIRED_FILE = DATA_DIR / "paired-errors.yaml"


def family_of(config: str) -> str | None:
    """The hardware family of a configuration string (``4xa100-80gb:tp4`` -> ``ampere``); None if unknown."""
    try:
        return get_hardware(parse_config(config).hardware).family
    except (ConfigError, KeyError, ValueError):
        return None


def pairs_of(report: Any) -> list[tuple[float, bool]]:  # noqa: ANN401 - a validate.Report
    """(difference of the two rows' log errors, same hardware family) for every pair of dense-model rows of one
    publication that differ only in their hardware (MoE rows: see the module docstring)."""
    from infermeter.perfmodel.models import get_model

    groups: dict[tuple[Any, ...], list[tuple[str, float]]] = {}
    for _, e, pub, r in records_of(report):
        if not get_model(r.row.model).is_moe:
            groups.setdefault((pub, *_conditions(r.row)), []).append((r.row.hardware, e))
    return [(d, same) for d, same, _ in _hardware_pairs(groups)]


def _conditions(w: Any) -> tuple[Any, ...]:  # noqa: ANN401 - a corpus Row
    """What two rows of one publication must share to be a pair: everything but the hardware and the server's own
    settings (a memory fraction or batch limit set per GPU): the workload's settings (:data:`WORKLOAD`) included,
    so two request rates, run lengths or length distributions are two workloads."""
    return (w.model, w.weight_dtype, w.engine, w.scenario, w.concurrency, w.input_tokens, w.output_tokens, w.metric, w.gpus,
            *(w.setting(k) for k in WORKLOAD))


def _hardware_pairs(groups: dict[tuple[Any, ...], list[tuple[str, float]]]) -> list[tuple[float, bool, tuple[Any, ...]]]:
    """(difference of the two log errors, same hardware family, the group's key) for every pair of a group's
    (hardware, log error) members on two different hardware."""
    out = []
    for key, members in groups.items():
        for (ha, ea), (hb, eb) in itertools.combinations(members, 2):
            if ha != hb:
                out.append((ea - eb, family_of(ha) == family_of(hb) is not None, key))
    return out


def table_from_report(report: Any, source: str = "") -> dict[str, Any]:  # noqa: ANN401
    """``{same_family: {n, rms}, cross_family: {n, rms}}``: the root mean square of the paired differences (the
    order within a pair is arbitrary, so no mean is kept)."""
    pairs = pairs_of(report)
    out: dict[str, Any] = {"source": source}
    for name, same in (("same_family", True), ("cross_family", False)):
        ds = [d for d, s in pairs if s is same]
        out[name] = {"n": len(ds), "rms": round(math.sqrt(sum(d * d for d in ds) / len(ds)), 4) if ds else None}
    return out


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    data = safe_load(PAIRED_FILE.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "same_family" not in data or "cross_family" not in data:
        raise ConfigError(f"{PAIRED_FILE}: expected same_family and cross_family blocks")
    return data


def ratio_interval(ratio: float, same_family: bool, table: dict[str, Any] | None = None) -> tuple[float, float, str]:
    """The 80% interval of the true ratio of two predictions whose predicted ratio is ``ratio``."""
    table = table or load()
    cell = table["same_family" if same_family else "cross_family"]
    n, rms = int(cell["n"]), float(cell["rms"])
    if n < 3:  # too few pairs of this kind: the cross-family spread, the wider
        cell = table["cross_family"]
        n, rms = int(cell["n"]), float(cell["rms"])
    h = t90(n - 1) * rms * math.sqrt(1 + 1 / n)
    kind = "within one hardware family" if same_family else "across hardware families"
    return (ratio * math.exp(-h), ratio * math.exp(h),
            f"{COVERAGE:.0%} interval of the ratio from the model's paired out-of-sample errors {kind}, n={n}")


def blind_pairs(records: list[Any], rows: dict[str, Any], table: dict[str, Any] | None = None) -> dict[str, dict[str, int]]:  # noqa: ANN401
    """``{same_family|cross_family: {pairs, inside, publications}}`` over pairs of blind-history ``records``
    (:class:`freshpub.Record`) of one set and publication that differ only in their hardware (``rows``: corpus
    :class:`Row` by id, for the conditions; MoE rows left out as in :func:`pairs_of`): a pair is inside when the
    measured ratio of the two values falls within :func:`ratio_interval` of the predicted ratio."""
    from infermeter.perfmodel.models import get_model

    groups: dict[tuple[Any, ...], list[tuple[str, float]]] = {}
    for rec in records:
        w = rows.get(rec.id)
        if w is not None and not get_model(w.model).is_moe:
            groups.setdefault((rec.set, rec.publication, *_conditions(w)), []).append(
                (w.hardware, math.log(rec.measured / rec.predicted)))
    out = {k: {"pairs": 0, "inside": 0, "publications": 0} for k in ("same_family", "cross_family")}
    pubs: dict[str, set[str]] = {k: set() for k in out}
    for diff, same, key in _hardware_pairs(groups):
        kind = "same_family" if same else "cross_family"
        lo, hi, _ = ratio_interval(1.0, same, table)  # the true ratio over the predicted one
        out[kind]["pairs"] += 1
        out[kind]["inside"] += int(math.log(lo) <= diff <= math.log(hi))
        pubs[kind].add(key[1])
    for k in out:
        out[k]["publications"] = len(pubs[k])
    return out


def main(argv: list[str]) -> int:
    from infermeter.perfmodel.corpus import load_rows
    from infermeter.perfmodel.validate import validate

    if argv[:1] == ["--blind"]:
        from infermeter.perfmodel import freshpub

        rows = {r.id: r for p in argv[1:] or ["tests/data/published-measurements.csv"] for r in load_rows(p)}
        for kind, v in blind_pairs(freshpub.load(), rows).items():
            sys.stdout.write(f"{kind}: {v['inside']}/{v['pairs']} blind pairs inside the stated interval "
                             f"({v['publications']} publications)\n")
        return 0
    path = argv[0] if argv else "tests/data/published-measurements.csv"
    sys.stdout.write(text(validate(load_rows(path), holdout="source"), path))
    return 0


def text(report: Any, path: str) -> str:  # noqa: ANN401 - a validate.Report
    """``data/paired-errors.yaml`` from a corpus's leave-one-publication-out report."""
    table = table_from_report(report, source=f"paired leave-one-publication-out errors of {path}; "
                                             f"python -m infermeter.perfmodel.paired {path}")
    return ("# Two hardware of one publication under the same conditions: the spread of the difference of\n"
            "# their log errors (infermeter.perfmodel.paired)\n" + yaml.safe_dump(table, sort_keys=False))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
