"""The library stays at the bottom: the import graph of the whole project.

Every ``import`` statement is read from the source (module level and inside functions alike, so a
lazy import counts), resolved to a module of this repository, and the graph is checked:
``llm_powertrace_ds`` never imports ``generation`` or ``cards`` (their commands register through
an entry-point group, the card builder through ``llm_powertrace_ds.hooks``), and no module of
``llm_powertrace_ds``, ``generation``, ``cards`` or ``upload.py`` reaches itself through imports
(no cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("llm_powertrace_ds", "generation", "cards")
SCRIPTS = ("upload.py",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    mods = {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}
    return mods | {module_name(REPO / s): REPO / s for s in SCRIPTS}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Repository modules imported by one module (any depth in the file)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import sub`` imports the submodule; ``from pkg import name`` the package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = all_modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_read():
    edges = graph()
    assert "llm_powertrace_ds.schema" in edges["llm_powertrace_ds.layout"]
    assert "llm_powertrace_ds.shards" in edges["cards.render"]
    assert "llm_powertrace_ds.importers.common" in edges["llm_powertrace_ds.importers.nvidia_smi"]
    assert "llm_powertrace_ds.staging" in edges["generation.runner"]
    assert "generation.workloads.inference.engines" in edges["generation.workloads.inference.serve"]
    assert "llm_powertrace_ds.folder_check" in edges["upload"]


def test_library_never_imports_generation_or_cards():
    offenders = {name: sorted(t for t in targets if t.split(".")[0] in ("generation", "cards"))
                 for name, targets in graph().items() if name.startswith("llm_powertrace_ds")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_import_cycle():
    assert find_cycle(graph()) is None


@pytest.mark.parametrize("edges, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set()}, None),
])
def test_find_cycle_finds_cycles(edges, cycle):
    assert find_cycle(edges) == cycle
