"""Schema check of the fourth blind set (tests/data/published-measurements-blind4.csv).

Parses the file with :func:`corpus.load_rows` and checks catalog look-ups, provenance and the set's spread over
publications, organisations and engines only: it never predicts, so the set stays blind until it is scored."""

from __future__ import annotations

import re
from pathlib import Path

from infermeter.perfmodel.corpus import load_rows, publication
from infermeter.perfmodel.hardware import get_hardware
from infermeter.perfmodel.models import catalog_names, get_model

BLIND4 = Path(__file__).resolve().parents[1] / "data" / "published-measurements-blind4.csv"
# a file at a commit, or a pull-request thread (a thread has no commit to pin)
PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/(blob/[0-9a-f]{40}/.+|pull/\d+)$")


def test_blind4_rows_resolve_in_catalog_and_carry_provenance() -> None:
    rows = load_rows(BLIND4)
    assert len(rows) >= 50
    catalog = set(catalog_names())
    for r in rows:
        assert r.id.startswith("b4-"), r.id
        assert r.model in catalog, f"{r.id}: model {r.model!r} is not a catalog id"
        assert get_model(r.model) is not None
        assert get_hardware(r.hardware).name, r.id
        assert PINNED.match(r.source_url), f"{r.id}: source_url is not a commit-pinned file or a PR thread"
        assert r.engine_version, f"{r.id}: needs the engine version (stated or inferred, conditions say which)"
        assert (r.date[:4].isdigit() and len(r.date) >= 7) or "date not stated" in r.conditions, f"{r.id}: date or 'date not stated'"
        assert r.conditions, f"{r.id}: needs conditions"
        assert r.gpus >= r.tp * r.pp, r.id
        if r.scenario == "saturated":  # a saturated run's drain needs the number of requests it queued at once
            assert r.setting("requests"), f"{r.id}: saturated row without requests=N"


def test_blind4_spreads_over_publications_organisations_and_engines() -> None:
    rows = load_rows(BLIND4)
    per_pub: dict[str, int] = {}
    per_org: dict[str, int] = {}
    for r in rows:
        per_pub[publication(r)] = per_pub.get(publication(r), 0) + 1
        org = r.source_url.split("/")[3]  # the GitHub owner that published it
        per_org[org] = per_org.get(org, 0) + 1
    assert len(per_pub) >= 6
    assert len(per_org) >= 4
    assert max(per_org.values()) <= 0.3 * len(rows), per_org
    assert {r.engine for r in rows} >= {"vllm", "sglang", "trtllm"}
    assert any(r.engine == "vllm" and get_hardware(r.hardware).name.startswith("NVIDIA") for r in rows)
    assert any(get_model(r.model).is_moe for r in rows) and any(not get_model(r.model).is_moe for r in rows)
    assert len({r.hardware for r in rows}) >= 3
