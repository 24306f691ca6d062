"""The benchmark package's imports point one way (issue: no module imports back from the one
above it). Checked on the source, so it needs no build, vLLM or torch: every relative import of
rangekv.bench, at module level or inside a function, must name a module below the importer in
LAYERS."""

from __future__ import annotations

import ast
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[1] / "rangekv" / "bench"

# Lower first. harness.py holds what serve.py and serve_workloads.py share; plots.py draws every
# benchmark's JSON (the serve figures and the restore/store sweep's PNG).
LAYERS = ["serve_stats", "serve_client", "plots", "harness", "ttft_hf", "serve_workloads",
          "serve", "__main__"]


def bench_imports(path: pathlib.Path) -> set[str]:
    """The rangekv.bench modules `path` imports (relative imports of this package)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:  # from . import x
                out.update(a.name for a in node.names)
    return out


def test_every_bench_module_is_layered():
    modules = {p.stem for p in BENCH.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS), "a new module of rangekv.bench needs its place in LAYERS"


def test_bench_imports_point_down():
    for name in LAYERS:
        for imported in bench_imports(BENCH / f"{name}.py"):
            assert imported in LAYERS, f"{name} imports {imported}, not a bench module"
            assert LAYERS.index(imported) < LAYERS.index(name), f"{name} imports {imported} upward"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from .serve import Server\n    from . import plots\n")
    assert bench_imports(p) == {"serve", "plots"}
