"""A simulation's request feeder is a fresh interpreter that only makes requests: it loads no client and no Arrow."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_feeder_imports_neither_pyarrow_nor_aiohttp():
    code = ("import json, sys; import infermeter.measure.child, infermeter.measure.feeder; "
            "print(json.dumps(sorted(m for m in ('pyarrow', 'aiohttp', 'infermeter.measure.run') if m in sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == []


def test_the_measure_package_still_exports_its_names():
    import infermeter.measure as measure

    for name in measure.__all__:
        assert getattr(measure, name).__name__ == name
    assert measure.RunConfig(model="m", concurrency=2, requests=3).concurrency == 2
