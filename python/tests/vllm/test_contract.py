"""The connector against each tested vLLM's KV-connector contract, read from that version's wheel
AS SOURCE (``ast``), without importing it: vLLM 0.33 and 0.34 are GPU-only wheels that cannot
run here, and 0.25.1 is what the project's GPU machine runs.

Each wheel is downloaded once (``pip download vllm==X --no-deps``) into
$RANGEKV_WHEEL_CACHE (default /var/cache/rangekv/wheels/vllm-X/, kept between runs like the vLLM
venv) and read in place. Per version the test checks:
- every abstract method of ``KVConnectorBase_V1`` is implemented by ``RangeKVConnector`` with a
  compatible signature, and every method the connector defines either exists in that base with
  a compatible signature or is a hook that version does not call;
- the hooks that version's configuration and scheduler ask the connector class
  (``supports_sleep_mode``, ``kv_cache_access``, ``supports_lookahead_block_hashes``,
  ``supports_hma_config`` / ``SupportsHMA``) get the answers RangeKV needs;
- the model runner (the V1 mixin, or 0.34's V2 ``gpu/`` and ``cpu/kv_connector.py``) and the
  attention layers call only methods the connector has, and call the ones it relies on;
- the factory loads the class from ``kv_connector_module_path`` by name and constructs it with
  ``(vllm_config, role, kv_cache_config)``, and the config fields the connector reads exist.
The connector itself is read as source too (the installed rangekv/vllm/connector.py).
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rangekv.vllm.versions import TESTED, untested_reason

CACHE = os.environ.get("RANGEKV_WHEEL_CACHE", "/var/cache/rangekv/wheels")
BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
FACTORY = "vllm/distributed/kv_transfer/kv_connector/factory.py"
CONFIG = "vllm/config/vllm.py"
KV_TRANSFER_CONFIG = "vllm/config/kv_transfer.py"
LAYER_HOOKS = "vllm/model_executor/layers/attention/kv_transfer_utils.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
RUNNERS = ("vllm/v1/worker/kv_connector_model_runner_mixin.py",  # V1 runner (<= 0.33)
           "vllm/v1/worker/gpu/kv_connector.py",                 # V2 runner (0.25+)
           "vllm/v1/worker/cpu/kv_connector.py")                 # V2 CPU runner (0.34)

# Methods vLLM's worker and scheduler sides must call for RangeKV to work at all.
RELIED_ON = {"register_kv_caches", "handle_preemptions", "bind_connector_metadata",
             "start_load_kv", "wait_for_save", "clear_connector_metadata",
             "get_block_ids_with_load_errors"}
RELIED_ON_BY_SCHEDULER = {"get_num_new_matched_tokens", "update_state_after_alloc",
                          "build_connector_meta", "request_finished", "update_connector_output",
                          "take_events"}
# Connector methods that some tested version does not have in its base class: harmless there
# because nothing in that version calls them (asserted below), with why RangeKV defines them.
OPTIONAL_HOOKS = {
    "supports_sleep_mode": "0.33+: sleep mode remaps the KV cache the engine holds views of",
    "prefer_cross_layer_blocks": "0.25-0.28: a cross-layer allocation (cross_layer_blocks)",
    "register_cross_layers_kv_cache": "0.25-0.28: the cross-layer allocation's registration",
}
# RangeKV's own API on the class (not vLLM's): must never collide with a vLLM name.
OWN_API = {"min_hit_tokens"}


def _wheel(version: str) -> str:
    """The vllm==version wheel, downloaded into the cache once."""
    folder = os.path.join(CACHE, f"vllm-{version}")
    found = sorted(glob.glob(os.path.join(folder, f"vllm-{version}-*.whl")))
    if found:
        return found[0]
    os.makedirs(folder, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps",
           "--only-binary=:all:", "-d", folder, "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    found = sorted(glob.glob(os.path.join(folder, f"vllm-{version}-*.whl")))
    if proc.returncode != 0 or not found:
        pytest.fail(f"could not download vllm=={version} into {folder} (the contract test needs "
                    f"the network once): {proc.stderr[-2000:]}")
    return found[0]


@dataclass
class Contract:
    version: str
    base: dict[str, ast.FunctionDef]          # KVConnectorBase_V1's methods
    abstract: set[str]
    base_classes: set[str]                    # every class defined in base.py
    runner_calls: set[str]                    # connector methods the model runner calls
    runner_files: list[str]
    layer_calls: set[str]                     # ... that the attention layers call
    scheduler_calls: set[str]                 # ... that the scheduler calls
    hma_methods: set[str]                     # SupportsHMA's (called only on such connectors)
    config_source: str
    factory: ast.Module
    transfer_fields: set[str]                 # KVTransferConfig's fields
    sources: dict[str, str] = field(default_factory=dict)


def _connector_calls(tree: ast.AST) -> set[str]:
    """Names of methods called on a connector object: `<x>.name(...)` where <x> is
    `kv_connector`, `self.kv_connector`, `connector` or `get_kv_transfer_group()`."""
    out = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        if isinstance(target, ast.Name) and target.id in ("kv_connector", "connector"):
            out.add(node.func.attr)
        elif isinstance(target, ast.Attribute) and target.attr in ("kv_connector", "connector"):
            out.add(node.func.attr)
        elif (isinstance(target, ast.Call) and isinstance(target.func, ast.Name)
              and target.func.id == "get_kv_transfer_group"):
            out.add(node.func.attr)
    return out


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}


def _decorators(f: ast.FunctionDef) -> set[str]:
    return {ast.unparse(d) for d in f.decorator_list}


_CONTRACTS: dict[str, Contract] = {}


def contract(version: str) -> Contract:
    if version in _CONTRACTS:
        return _CONTRACTS[version]
    with zipfile.ZipFile(_wheel(version)) as z:
        names = set(z.namelist())

        def read(path: str) -> str:
            return z.read(path).decode()

        base_tree = ast.parse(read(BASE))
        classes = {n.name: n for n in base_tree.body if isinstance(n, ast.ClassDef)}
        base = _methods(classes["KVConnectorBase_V1"])
        abstract = {n for n, f in base.items() if "abstractmethod" in _decorators(f)}
        runner_files = [r for r in RUNNERS if r in names]
        runner_calls = set()
        for r in runner_files:
            runner_calls |= _connector_calls(ast.parse(read(r)))
        layer_calls = _connector_calls(ast.parse(read(LAYER_HOOKS))) if LAYER_HOOKS in names \
            else set()
        transfer = ast.parse(read(KV_TRANSFER_CONFIG))
        fields = set()
        for node in ast.walk(transfer):
            if isinstance(node, ast.ClassDef) and node.name == "KVTransferConfig":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields.add(item.target.id)
                    elif isinstance(item, ast.FunctionDef):
                        fields.add(item.name)
        c = Contract(version, base, abstract, set(classes), runner_calls, runner_files,
                     layer_calls, _connector_calls(ast.parse(read(SCHEDULER))),
                     set(_methods(classes["SupportsHMA"])), read(CONFIG),
                     ast.parse(read(FACTORY)), fields)
    _CONTRACTS[version] = c
    return c


def _ours() -> tuple[ast.ClassDef, ast.Module]:
    """RangeKVConnector and the package's __init__, parsed from the installed package."""
    pkg = Path(importlib.util.find_spec("rangekv").origin).parent / "vllm"
    tree = ast.parse((pkg / "connector.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RangeKVConnector")
    return cls, ast.parse((pkg / "__init__.py").read_text())


def _params(f: ast.FunctionDef) -> tuple[list[str], set[str], bool]:
    """(positional parameter names after self/cls, names with defaults, takes **kwargs)."""
    args = f.args.posonlyargs + f.args.args
    names = [a.arg for a in args][1:]
    with_default = {a.arg for a in args[len(args) - len(f.args.defaults):]} if f.args.defaults \
        else set()
    with_default |= {a.arg for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults) if d}
    return names, with_default, f.args.kwarg is not None


def _compatible(ours: ast.FunctionDef, theirs: ast.FunctionDef) -> str | None:
    """None when `ours` accepts every call `theirs` allows; else what differs."""
    def kind(f: ast.FunctionDef) -> str:
        return ("classmethod" if "classmethod" in _decorators(f) else
                "property" if "property" in _decorators(f) else "method")

    if kind(ours) != kind(theirs):
        return f"{kind(ours)} here, {kind(theirs)} in vLLM"
    o_names, o_defaults, o_kwargs = _params(ours)
    t_names, _, t_kwargs = _params(theirs)
    if o_names[:len(t_names)] != t_names:
        return f"parameters {o_names} here, {t_names} in vLLM"
    extra = [n for n in o_names[len(t_names):] if n not in o_defaults]
    if extra:
        return f"extra parameters without defaults: {extra}"
    if t_kwargs and not o_kwargs:
        return "vLLM passes **kwargs, this method takes none"
    return None


@pytest.fixture(scope="module", params=TESTED)
def c(request) -> Contract:
    return contract(request.param)


def test_every_tested_version_is_in_the_start_up_range():
    for version in TESTED:
        assert untested_reason(version) is None, version
    assert "outside the tested range >=0.25.1, <0.35" in untested_reason("0.35.0")
    assert untested_reason("0.24.0") is not None and untested_reason("dev") is not None
    assert untested_reason("0.34.2.dev7+gabcdef") is None


def test_abstract_methods_are_implemented_with_compatible_signatures(c):
    ours, _ = _ours()
    mine = _methods(ours)
    assert c.abstract == {"start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                          "get_num_new_matched_tokens", "update_state_after_alloc",
                          "build_connector_meta"}, c.abstract
    for name in sorted(c.abstract):
        assert name in mine, f"vLLM {c.version}: {name} is abstract and not implemented"
        why = _compatible(mine[name], c.base[name])
        assert why is None, f"vLLM {c.version}: {name}: {why}"


def test_every_method_the_connector_defines_fits_this_version(c):
    ours, _ = _ours()
    called = c.runner_calls | c.layer_calls | c.scheduler_calls
    for name, f in sorted(_methods(ours).items()):
        if name in c.base:
            why = _compatible(f, c.base[name])
            assert why is None, f"vLLM {c.version}: {name}: {why}"
        else:
            assert name in OPTIONAL_HOOKS or name in OWN_API, (
                f"vLLM {c.version}: RangeKVConnector.{name} is not part of this version's "
                f"contract")
            assert name not in called and f".{name}(" not in c.config_source, name


def test_the_model_runner_calls_what_the_connector_relies_on(c):
    ours, _ = _ours()
    mine = set(_methods(ours)) | set(c.base)
    assert c.runner_files, f"vLLM {c.version}: no model-runner connector file found"
    missing = RELIED_ON - c.runner_calls
    assert not missing, f"vLLM {c.version}: the runner never calls {missing}"
    # Finished transfers: get_transfer_results (0.32+, whose default asks get_finished) or
    # get_finished itself (0.25).
    assert c.runner_calls & {"get_finished", "get_transfer_results"}
    if "get_transfer_results" in c.runner_calls:
        body = ast.unparse(c.base["get_transfer_results"])
        assert "self.get_finished(" in body
    unknown = c.runner_calls - mine - {"prefer_cross_layer_blocks"}
    assert not unknown, f"vLLM {c.version}: the runner calls {unknown}, which nobody defines"
    # The per-layer hooks run inside the attention op.
    assert {"wait_for_layer_load", "save_kv_layer"} <= c.layer_calls, c.layer_calls


def test_the_scheduler_calls_what_the_connector_relies_on(c):
    ours, _ = _ours()
    mine = set(_methods(ours)) | set(c.base)
    missing = RELIED_ON_BY_SCHEDULER - c.scheduler_calls
    assert not missing, f"vLLM {c.version}: the scheduler never calls {missing}"
    # SupportsHMA's methods are asked only of connectors that subclass it (RangeKV does not).
    unknown = c.scheduler_calls - mine - c.hma_methods
    assert not unknown, f"vLLM {c.version}: the scheduler calls {unknown}, which nobody defines"


def test_hooks_this_version_asks_the_class_get_rangekvs_answers(c):
    ours, _ = _ours()
    mine = _methods(ours)
    # Hybrid KV cache manager: RangeKV is not SupportsHMA; this version turns HMA off for such
    # a connector instead of failing.
    assert "SupportsHMA" in c.base_classes
    assert "SupportsHMA" not in {ast.unparse(b) for b in ours.bases}
    assert "Turning off hybrid kv cache manager" in c.config_source
    # Sleep mode remaps the KV cache: the connector says no where vLLM asks.
    if ".supports_sleep_mode(" in c.config_source:
        f = mine["supports_sleep_mode"]
        assert "classmethod" in _decorators(f)
        assert ast.unparse(f.body[-1]) == "return False"
    # 0.34: how workers reach the KV cache. RangeKV's kernels and copies run in the worker
    # process on the tensors vLLM hands over: the default IN_PROCESS is right.
    if "kv_cache_access" in c.base:
        assert "kv_cache_access" not in mine
        assert "KVCacheAccess.IN_PROCESS" in ast.unparse(c.base["kv_cache_access"])
    # 0.34: core lookahead hashing; RangeKV hashes tokens itself, the default False is right.
    if "supports_lookahead_block_hashes" in c.base:
        assert "supports_lookahead_block_hashes" not in mine
        assert ast.unparse(c.base["supports_lookahead_block_hashes"].body[-1]) == "return False"
    # RangeKV's loads are synchronous: may_load_async's default (remote prefill only) holds.
    if "may_load_async" in c.base:
        assert "may_load_async" not in mine


def test_the_factory_loads_the_class_by_module_path_with_three_arguments(c):
    ours, init = _ours()
    src = ast.unparse(c.factory)
    assert "importlib.import_module(connector_module_path)" in src
    assert "getattr(connector_module, connector_name)" in src
    assert "supports_kw(connector_cls, 'kv_cache_config')" in src
    assert "connector_cls(config, role, kv_cache_config)" in src
    names, _, _ = _params(_methods(ours)["__init__"])
    assert names[:3] == ["vllm_config", "role", "kv_cache_config"], names
    # rangekv.vllm resolves the class name on first use (a module __getattr__).
    getattr_fn = next(n for n in init.body if isinstance(n, ast.FunctionDef)
                      and n.name == "__getattr__")
    assert "RangeKVConnector" in ast.unparse(getattr_fn)
    # The fields of KVTransferConfig the connector reads.
    assert {"engine_id", "kv_connector_extra_config", "kv_load_failure_policy",
            "kv_connector_module_path"} <= c.transfer_fields


def test_the_signature_check_catches_incompatible_overrides():
    def fn(src: str) -> ast.FunctionDef:
        return ast.parse(src).body[0]

    base = fn("def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs): pass")
    ok = "def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs): pass"
    assert _compatible(fn(ok), base) is None
    assert "takes none" in _compatible(
        fn("def save_kv_layer(self, layer_name, kv_layer, attn_metadata): pass"), base)
    assert "parameters" in _compatible(
        fn("def save_kv_layer(self, name, kv_layer, attn_metadata, **kw): pass"), base)
    assert "without defaults" in _compatible(
        fn("def save_kv_layer(self, layer_name, kv_layer, attn_metadata, extra, **kw): pass"), base)
    assert _compatible(fn("def save_kv_layer(self, layer_name, kv_layer, attn_metadata, extra=1, "
                          "**kw): pass"), base) is None
    assert "classmethod here" in _compatible(fn("@classmethod\ndef f(cls): pass"),
                                             fn("def f(self): pass"))
    calls = _connector_calls(ast.parse("kv_connector.a()\nself.kv_connector.b(1)\n"
                                       "get_kv_transfer_group().c()\nother.d()"))
    assert calls == {"a", "b", "c"}
