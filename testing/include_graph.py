#!/usr/bin/env python3
"""The include-graph check: the shape of src/ as a test (docs/architecture.md "Folders and
dependencies"; STYLE.md "The shape is tested").

Each folder src/<module>/ is one module. Every `#include "<module>/..."` line of src/ is an edge
from the including file's module to the included one, and the check fails, printing file:line,
on:
  - an upward include: a module including a module of a higher layer in LAYERS;
  - a folder-level cycle: modules that include each other, directly or around a loop (modules
    of one layer may include each other, but never in a circle);
  - an include of testing/ (test support, repo root) from production code;
  - a module missing from LAYERS, or an include of an unknown top folder.
`rangekv/...` (include/rangekv, the public door) is open to every module.

Test files (TEST_FILES) are checked like production code except where TEST_REACH lets a
module's tests reach one module above it, for the reason given there.

Usage:
  include_graph.py SRC_DIR     check the tree (exit 1 on a violation)
  include_graph.py --self-test check the checker on synthetic trees with known violations
Python 3 standard library only.
"""

import fnmatch
import os
import re
import sys
import tempfile

from test_counts import write_counts

# Lowest layer first. A module may include its own folder, the modules of lower layers and
# those of its own layer (acyclic). Derived from the includes of production code: a module sits
# one layer above the highest module it includes.
LAYERS = [
    ["base"],
    ["env", "io", "pack", "kernels", "directory"],
    ["device", "persist", "service_proto"],
    ["remote"],
    ["store"],
    ["service"],
    ["engine"],
]

# The public headers (include/rangekv/) and test support (testing/ at the repo root).
PUBLIC = "rangekv"
TESTING = "testing"

# Files built only into tests, test-support libraries and test drivers.
TEST_FILES = [
    "*_test.cc", "*_test_shapes.h", "*_driver.cc",
    "crash_workload.*", "make_test_store.cc", "kernel_test_cases.*", "device_conformance.*",
    "cufile_abi_check.cc", "digest_vectors.h",
]

# (module, module above it) -> why that module's test files may include it. None today: the
# service's tests drive real engines through testing/engine_fixture.h, test support outside src/.
TEST_REACH = {}

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def is_test_file(name):
    return any(fnmatch.fnmatch(name, p) for p in TEST_FILES)


def scan(src_dir):
    """Yields (path, line number, module, included path, is test) for every quoted include."""
    for module in sorted(os.listdir(src_dir)):
        root = os.path.join(src_dir, module)
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m:
                            yield path, number, module, m.group(1), is_test_file(name)


def find_cycles(edges):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(src_dir, layers=None, test_reach=None):
    """Returns the violations in src_dir, one line each, "path:line: message"."""
    layers = LAYERS if layers is None else layers
    test_reach = TEST_REACH if test_reach is None else test_reach
    rank = {m: i for i, layer in enumerate(layers) for m in layer}
    errors = []
    modules = sorted(d for d in os.listdir(src_dir) if os.path.isdir(os.path.join(src_dir, d)))
    for m in modules:
        if m not in rank:
            errors.append(f"{os.path.join(src_dir, m)}: module {m} is in no layer: add it to "
                          f"LAYERS in {os.path.basename(__file__)} (and docs/architecture.md)")
    edges = {}  # module -> {included module: first "path:line"}
    for path, number, module, included, test in scan(src_dir):
        where = f"{path}:{number}"
        target = included.split("/", 1)[0] if "/" in included else None
        if target is None or target == module or target == PUBLIC or module not in rank:
            continue
        if target == TESTING:
            if not test:
                errors.append(f"{where}: production code includes {included} (testing/ is for "
                              f"tests only; or name the file as a test in TEST_FILES)")
            continue
        if target not in rank:
            errors.append(f"{where}: {module} includes {included}: {target} is no module of "
                          f"src/ (nor {PUBLIC}/ or {TESTING}/)")
            continue
        if rank[target] > rank[module]:
            if test and (module, target) in test_reach:
                continue  # allowed, and kept out of the cycle graph: tests are leaves
            errors.append(f"{where}: upward include: {module} (layer {rank[module]}) includes "
                          f"{included} ({target} is layer {rank[target]})")
            continue
        edges.setdefault(module, {}).setdefault(target, where)
    for cycle in find_cycles({m: set(t) for m, t in edges.items()}):
        members = set(cycle)
        errors.append(f"{src_dir}: folder-level cycle among {', '.join(cycle)}:")
        for m in cycle:
            for t, where in sorted(edges.get(m, {}).items()):
                if t in members:
                    errors.append(f"  {where}: {m} includes {t}/")
    return errors


def self_test():
    """Feeds check() trees with one known violation each; returns the failures of the checker."""
    failures = []

    def tree(files):
        root = tempfile.mkdtemp(prefix="include_graph_")
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return root

    def expect(name, files, needles, layers=None, test_reach=None):
        root = tree(files)
        try:
            errors = check(root, layers, test_reach)
        finally:
            for dirpath, dirnames, filenames in os.walk(root, topdown=False):
                for n in filenames:
                    os.remove(os.path.join(dirpath, n))
                for n in dirnames:
                    os.rmdir(os.path.join(dirpath, n))
            os.rmdir(root)
        text = "\n".join(errors).replace(root + os.sep, "")
        before = len(failures)
        if not needles and errors:
            failures.append(f"{name}: expected no violation, got:\n{text}")
        for needle in needles:
            if needle not in text:
                failures.append(f"{name}: expected {needle!r} in:\n{text or '(no violation)'}")
        print(f"self-test {name}: {'ok' if len(failures) == before else 'FAILED'}")

    small = [["base"], ["low", "peer"], ["high"]]
    clean = {
        "base/b.h": "#pragma once\n",
        "low/l.h": '#include "base/b.h"\n#include "rangekv/status.h"\n',
        "peer/p.h": '#include "low/l.h"\n',
        "high/h.cc": '#include "high/h.h"\n#include "low/l.h"\n#include "peer/p.h"\n',
        "high/h.h": "#pragma once\n",
        "high/h_test.cc": '#include "testing/temp_dir.h"\n',
    }
    expect("clean tree", clean, [], small)
    upward = '// x\n#include "low/l.h"\n#include "high/h.h"\n'
    expect("upward include", {**clean, "low/l.cc": upward},
           ["low/l.cc:3: upward include: low (layer 1) includes high/h.h (high is layer 2)"], small)
    expect("upward include from a test", {**clean, "low/l_test.cc": '#include "high/h.h"\n'},
           ["low/l_test.cc:1: upward include"], small)
    expect("a test's declared reach", {**clean, "low/l_test.cc": '#include "high/h.h"\n'}, [],
           small, {("low", "high"): "why"})
    expect("declared reach is for tests only",
           {**clean, "low/l.cc": '#include "high/h.h"\n'}, ["low/l.cc:1: upward include"], small,
           {("low", "high"): "why"})
    expect("two peers include each other", {**clean, "low/l.cc": '#include "peer/p.h"\n'},
           ["folder-level cycle among low, peer", "low/l.cc:1: low includes peer/",
            "peer/p.h:1: peer includes low/"], small)
    expect("a cycle of three", {**clean, "low/l.cc": '#include "peer/p.h"\n',
                                "peer/p.h": '#include "third/t.h"\n',
                                "third/t.h": '#include "low/l.h"\n'},
           ["folder-level cycle among low, peer, third"], [["base"], ["low", "peer", "third"]])
    expect("testing/ from production", {**clean, "low/l.cc": '#include "testing/fault_env.h"\n'},
           ["low/l.cc:1: production code includes testing/fault_env.h"], small)
    expect("a module in no layer", {**clean, "extra/e.h": '#include "base/b.h"\n'},
           ["module extra is in no layer"], small)
    expect("an unknown top folder", {**clean, "low/l.cc": '#include "tools/x.h"\n'},
           ["low/l.cc:1: low includes tools/x.h: tools is no module"], small)
    # The real order: the service must not reach the engine; the store must not reach either.
    expect("service includes engine (real LAYERS)",
           {"service/store_service.cc": '#include "engine/stats.h"\n', "engine/stats.h": ""},
           ["service/store_service.cc:1: upward include: service (layer 5) includes "
            "engine/stats.h (engine is layer 6)"])
    expect("store includes service (real LAYERS)",
           {"store/store_state.cc": '#include "store/store_state.h"\n#include "service/s.h"\n',
            "service/s.h": ""},
           ["store/store_state.cc:2: upward include: store (layer 4) includes service/s.h"])
    expect("engine includes service (real LAYERS)",
           {"engine/e.cc": '#include "service/store_service.h"\n',
            "service/store_service.h": ""}, [])
    return failures


def main(argv):
    if argv[1:] == ["--self-test"]:
        failures = self_test()
        for f in failures:
            print(f"FAIL {f}")
        write_counts("include_graph", not failures)
        return 1 if failures else 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    order = " < ".join("{" + ", ".join(layer) + "}" if len(layer) > 1 else layer[0]
                       for layer in LAYERS)
    print(f"include graph: {'FAILED' if errors else 'ok'}; layers: {order}")
    write_counts("include_graph", not errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
