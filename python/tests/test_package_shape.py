"""The shape of the Python package, read as source: the vLLM
connector's modules import one way, with no cycles, and the scheduler and worker halves never
import each other. Needs neither vLLM nor torch: the modules are parsed, not imported."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# Found, not imported (importing rangekv loads the extension).
PACKAGE = Path(importlib.util.find_spec("rangekv").origin).parent


def _local_imports(path: Path, package: str) -> set[str]:
    """Modules of `package` (dotted, relative to rangekv) that `path` imports."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = package
            elif node.level == 0 and (node.module or "").startswith("rangekv."):
                base = None
            else:
                continue
            if base is None:
                mod = node.module[len("rangekv."):]
                out.add(mod)
            elif node.module:
                out.add(f"{base}.{node.module}")
            else:
                out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _graph(package: str) -> dict[str, set[str]]:
    folder = PACKAGE.joinpath(*package.split("."))
    mods = {f"{package}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    return {m: {d for d in _local_imports(p, package) if d in mods} for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_vllm_connector_modules_have_no_import_cycle():
    graph = _graph("vllm")
    assert {"vllm.connector", "vllm.scheduler", "vllm.worker", "vllm.metadata"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_scheduler_and_worker_halves_are_independent():
    graph = _graph("vllm")
    assert "vllm.worker" not in graph["vllm.scheduler"]
    assert "vllm.scheduler" not in graph["vllm.worker"]
    # Only the facade joins them.
    assert {m for m, deps in graph.items() if {"vllm.scheduler", "vllm.worker"} <= deps} == {
        "vllm.connector"}


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
