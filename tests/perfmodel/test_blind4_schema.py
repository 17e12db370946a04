"""Schema check of the fourth blind set (tests/data/published-measurements-blind4.csv).

Parses the file with :func:`corpus.load_rows` and checks catalog look-ups and provenance only: it never predicts, so the
set stays blind until it is scored."""

from __future__ import annotations

from pathlib import Path

from infermeter.perfmodel.corpus import load_rows, publication
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.models import catalog_names, get_model

BLIND4 = Path(__file__).resolve().parents[1] / "data" / "published-measurements-blind4.csv"


def test_blind4_rows_resolve_in_catalog_and_carry_provenance() -> None:
    rows = load_rows(BLIND4)
    assert len(rows) >= 19
    catalog = set(catalog_names())
    for r in rows:
        assert r.id.startswith("b4-"), r.id
        assert r.model in catalog, f"{r.id}: model {r.model!r} is not a catalog id"
        assert get_model(r.model) is not None
        assert get_hardware(r.hardware).name, r.id
        assert r.source_url.startswith("https://github.com/"), r.id
        assert "/blob/" in r.source_url and len(r.source_url.split("/blob/")[1].split("/")[0]) == 40, f"{r.id}: URL not commit-pinned"
        assert r.date or r.engine_version, f"{r.id}: needs a date or an engine version"
        assert r.conditions, f"{r.id}: needs conditions"
        assert r.gpus >= r.tp * r.pp, r.id
        if r.scenario == "saturated":  # a saturated run's drain needs the number of requests it queued at once
            assert r.setting("requests"), f"{r.id}: saturated row without requests=N"
    per_pub: dict[str, int] = {}
    for r in rows:
        per_pub[publication(r)] = per_pub.get(publication(r), 0) + 1
    assert len(per_pub) >= 2
    assert {r.engine for r in rows} >= {"vllm", "sglang", "trtllm"}
