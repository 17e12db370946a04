"""Schema check of the third blind set (tests/data/published-measurements-blind3.csv).

Parses the file with :func:`corpus.load_rows` and checks catalog look-ups and provenance only: it never predicts, so the
set stays blind until it is scored."""

from __future__ import annotations

from pathlib import Path

from infermeter.perfmodel.corpus import load_rows, publication
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.models import catalog_names, get_model

BLIND3 = Path(__file__).resolve().parents[1] / "data" / "published-measurements-blind3.csv"


def test_blind3_rows_resolve_in_catalog_and_carry_provenance() -> None:
    rows = load_rows(BLIND3)
    assert len(rows) >= 45
    catalog = set(catalog_names())
    for r in rows:
        assert r.id.startswith("b3-"), r.id
        assert r.model in catalog, f"{r.id}: model {r.model!r} is not a catalog id"
        assert get_model(r.model) is not None
        assert get_hardware(r.hardware).name, r.id
        assert r.source_url.startswith("https://"), r.id
        assert r.date or r.engine_version, f"{r.id}: needs a date or an engine version"
        assert r.conditions, f"{r.id}: needs conditions"
        assert r.gpus >= r.tp * r.pp, r.id
    per_pub: dict[str, int] = {}
    for r in rows:
        per_pub[publication(r)] = per_pub.get(publication(r), 0) + 1
    assert len(per_pub) >= 8
    assert max(per_pub.values()) <= 10
