"""Shared fixtures: the published-measurements corpus and its leave-one-publication-out report (a dozen refits)."""

from __future__ import annotations

from pathlib import Path

import pytest

CSV = Path(__file__).resolve().parents[1] / "data" / "published-measurements.csv"


@pytest.fixture(scope="session")
def corpus():
    from infermeter.perfmodel.corpus import load_rows

    return load_rows(CSV)


@pytest.fixture(scope="session")
def lopo_report(corpus):
    from infermeter.perfmodel.validate import validate

    return validate(corpus, holdout="source")


@pytest.fixture(scope="session")
def loco(corpus):
    """Every corpus row predicted by a fit without its (hardware family, engine, precision class): one refit per combination."""
    from infermeter.perfmodel.uncertainty import loco_records

    return loco_records(corpus)
