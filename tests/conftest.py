"""Suite-wide isolation: runs started by tests index into a throwaway history database."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_history(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("INFERMETER_HISTORY_DB", str(tmp_path_factory.mktemp("history") / "history.duckdb"))
    yield
    mp.undo()
