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


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(("infermeter", *rel.parts))


def _file_edges() -> dict[str, set[str]]:
    """Module -> the infermeter modules (files, not packages) it imports, at module level or in a function.
    A package's ``__init__`` is left out: it re-exports, and what it re-exports is the real edge; so are
    imports under ``if TYPE_CHECKING:``, which never run."""
    modules = {_module_of(p): p for p in ROOT.rglob("*.py") if p.name != "__init__.py"}
    edges: dict[str, set[str]] = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(block.test) for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in modules and t != mod:
                    edges.setdefault(mod, set()).add(t)
                    break  # `from a.b import c`: the module c when it is one, else a.b
    return edges


def _circles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected groups of more than one file (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(tuple(sorted(m.removeprefix("infermeter.") for m in group)))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


# Circles that exist today, each closed by a function-level import (issue 32). The list may only shrink:
# a new circle fails, and so does one that was broken but is still listed here.
# (measure.fleet <-> measure.fleetray was broken: fleet_jobs moved down into measure/fleetpart.py.)
KNOWN_CIRCLES: set[tuple[str, ...]] = {
    ("measure.plans", "measure.run"),
    ("perfmodel.fit", "perfmodel.uncertainty", "perfmodel.validate"),
    ("study.capstatus", "study.cells", "study.claims", "study.config", "study.matrix", "study.pricing", "study.sweep",
     "study.targets"),
    ("study.charts", "study.decision", "study.decisionview", "study.findings", "study.report", "study.runner",
     "study.soak", "study.soakview"),
    ("workload.datafiles", "workload.traces"),
    ("workload.gguf_vocab", "workload.tokenizer"),
}


def test_no_new_file_circle():
    found = set(_circles(_file_edges()))
    new = sorted(found - KNOWN_CIRCLES)
    assert not new, "files importing each other (break the circle: move what both need down):\n" + "\n".join(
        " <-> ".join(c) for c in new)
    assert not KNOWN_CIRCLES - found, f"broken circles still listed in KNOWN_CIRCLES: {sorted(KNOWN_CIRCLES - found)}"


def test_the_circle_finder_finds_a_circle():
    assert _circles({"infermeter.a": {"infermeter.b"}, "infermeter.b": {"infermeter.a"}, "infermeter.c": {"infermeter.a"}}) \
        == [("a", "b")]


def test_no_command_module_imports_another():
    """cli/cmd_*.py are commands; what two of them share lives in an unprefixed helper module (cli/view.py ...)."""
    bad = sorted(f"{m} imports {t}" for m, ts in _file_edges().items() for t in ts
                 if m.startswith("infermeter.cli.cmd_") and t.startswith("infermeter.cli.cmd_"))
    assert not bad, "\n".join(bad)
