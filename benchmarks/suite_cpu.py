"""Where the test suite spends its CPU: per work unit (a group of tests/conftest.py, else a file), from a run
with ``INFERMETER_TEST_CPU=<folder>`` (tests/conftest.py writes one JSON line per test per xdist worker: the CPU
seconds of the worker and of the children it reaped during the test -- CLI subprocesses, emulators and servers a
fixture stopped -- and the wall seconds).

    mkdir /tmp/cpu && INFERMETER_TEST_CPU=/tmp/cpu make test
    python benchmarks/suite_cpu.py /tmp/cpu                 # the units, most CPU first, and the totals
    python benchmarks/suite_cpu.py /tmp/before /tmp/after   # two runs side by side (the same tests, changed code)

CPU seconds are the steadier figure on a shared machine; wall seconds include waiting for a core. Processes that
outlive their test (a module's server) are counted in the test that stops them; processes that are never reaped
by the worker (a daemon's grandchildren) are not counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _groups() -> dict[str, str]:
    """File -> group name, read from tests/conftest.py's GROUPS (without importing pytest's conftest)."""
    import ast

    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "GROUPS" and node.value is not None:
            groups = ast.literal_eval(node.value)
            return {path: name for name, paths in groups.items() for path in paths}
    return {}


def load(folder: Path) -> dict[str, tuple[float, float, int]]:
    """unit -> (CPU s, wall s, tests)."""
    of = _groups()
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            path = r["test"].split("::", 1)[0]
            u = out[of.get(path, path)]
            u[0] += r["cpu_s"]
            u[1] += r["wall_s"]
            u[2] += 1
    return {k: (v[0], v[1], int(v[2])) for k, v in out.items()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="INFERMETER_TEST_CPU folder(s): one, or before and after")
    ap.add_argument("--top", type=int, default=30, help="units to list (default 30)")
    a = ap.parse_args(argv)
    runs = [load(r) for r in a.runs[:2]]
    first = runs[0]
    units = sorted(set().union(*runs), key=lambda u: -max(r.get(u, (0, 0, 0))[0] for r in runs))
    if len(runs) == 1:
        print(f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  unit")
        for u in units[: a.top]:
            c, w, n = first[u]
            print(f"{c:8.1f} {w:8.1f} {n:6d}  {u}")
    else:
        print(f"{'CPU before':>10} {'CPU after':>10} {'wall before':>11} {'wall after':>10}  unit")
        for u in units[: a.top]:
            b, f = runs[0].get(u, (0.0, 0.0, 0)), runs[1].get(u, (0.0, 0.0, 0))
            print(f"{b[0]:10.1f} {f[0]:10.1f} {b[1]:11.1f} {f[1]:10.1f}  {u}")
    for path, r in zip(a.runs, runs):
        print(f"{path}: {sum(v[2] for v in r.values())} tests, {sum(v[0] for v in r.values()):.0f} CPU s, "
              f"{sum(v[1] for v in r.values()):.0f} wall s summed over tests, {len(r)} units")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
