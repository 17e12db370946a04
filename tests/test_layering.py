"""The package's import graph: subpackages in layers, every import pointing down, no cycles.

Read from the source with ``ast`` (module-level and function-level imports alike). A subpackage
may import only from a lower layer; ``cli`` is the shell on top. The layers follow the data path
(docs/architecture in README.md): records and the catalogs at the bottom, the analysis and the
client on them, load generation and the twin's engine core next, then reports and engines (real
ones and the emulator), measurement (measured and simulated runs), campaigns and studies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "src" / "infermeter"

LAYERS: list[set[str]] = [
    {"(top)"},  # errors, yamlfile, durations, __init__
    {"records", "workload", "perfmodel", "telemetry"},
    {"analysis", "client"},
    {"load", "twin"},
    {"report", "engines", "interop"},
    {"measure"},
    {"campaign", "study"},
    {"cli"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _package(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else "(top)"


def _imports() -> list[tuple[str, str, str, int]]:
    """(importing module, its package, imported package, line) for every infermeter import."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "infermeter" or len(parts) < 2:
                    continue
                target = parts[1] if (ROOT / parts[1]).is_dir() else "(top)"
                out.append((str(rel), _package(rel), target, node.lineno))
    return out


def test_every_subpackage_has_a_layer():
    pkgs = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert pkgs <= set(RANK), f"add {sorted(pkgs - set(RANK))} to LAYERS"


def test_no_upward_or_sideways_import():
    bad = [f"{mod}:{line} ({pkg}, layer {RANK[pkg]}) imports {target} (layer {RANK[target]})"
           for mod, pkg, target, line in _imports()
           if target != pkg and RANK[target] >= RANK[pkg] and not (mod == "__init__.py")]
    assert not bad, "\n".join(bad)


def test_no_cycle_between_subpackages():
    edges: dict[str, set[str]] = {}
    for mod, pkg, target, _ in _imports():
        if target != pkg and mod != "__init__.py":
            edges.setdefault(pkg, set()).add(target)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for pkg in sorted(edges):
        if pkg not in state:
            visit(pkg, [])


def test_the_graph_holds_known_edges():
    """The graph reader finds real imports (a check that reads nothing passes everything)."""
    found = {(pkg, target) for _, pkg, target, _ in _imports()}
    assert ("measure", "load") in found and ("cli", "measure") in found
