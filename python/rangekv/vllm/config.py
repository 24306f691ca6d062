"""The connector's configuration: vLLM's ``kv_connector_extra_config``, validated at start-up.

Every key has a unit and a default (docs/integrations/vllm.md lists them). Unknown keys and bad
values raise :class:`ConfigError` naming them, so a typo fails the server's start instead of
silently running with a default. Pure Python: importable and testable without vLLM.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

from .cpus import parse_cpu_list


class ConfigError(ValueError):
    """A bad ``kv_connector_extra_config``: the message names the key and the value."""


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1000, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40,
}


def resolved_layer_group(layer_group: int, device: str, layers: int | None = None) -> int:
    """EngineOptions' layer group as the engine resolves it at open (include/rangekv/options.h):
    the configured one, or for 0 (auto) 2 on the host device and 4 on CUDA, at most the layers
    and the gather's 8. The memory checks that run before the engine exists use it; a test holds
    it to Engine.options. `device` "auto" counts as CUDA (the larger banks)."""
    if layer_group:
        return layer_group
    group = 2 if device == "host" else 4
    return min(group, layers, 8) if layers else group


def bank_host_bytes(*, stripe_bytes: int, read_banks: int, read_bank_bytes: int,
                    store_banks: int, store_bank_bytes: int, layer_group: int, device: str,
                    layers: int | None) -> int:
    """Host bytes an engine's banks take (docs/integrations/vllm.md "Engine sizing"): read_banks
    x read_bank_bytes (0: stripe_bytes) + store_banks x store_bank_bytes (0: 2 x the resolved
    layer group x stripe_bytes). A host-device engine's banks are host memory, and a CUDA engine
    without GDS has pinned staging of the same size."""
    read = read_banks * (read_bank_bytes or stripe_bytes)
    group = resolved_layer_group(layer_group, device, layers)
    return read + store_banks * (store_bank_bytes or 2 * group * stripe_bytes)


def parse_size(key: str, value: Any) -> int:
    """Bytes from an int or a string such as ``"512GiB"``, ``"32MiB"``, ``"1.5TB"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size (bytes or e.g. '32MiB'), got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ConfigError(f"{key}: expected a size such as '512GiB' or '32MiB', got {value!r}")
        n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    else:
        raise ConfigError(f"{key}: expected a size (bytes or e.g. '32MiB'), got {value!r}")
    if n <= 0:
        raise ConfigError(f"{key}: must be positive, got {value!r}")
    return n


@dataclasses.dataclass(frozen=True)
class _Key:
    default: Any
    kind: str  # "str", "size", "bool", "int", "choice", "int_or_auto", "size_or_probe", "cpus"
    doc: str
    choices: tuple[str, ...] = ()
    minimum: int = 0


# name -> (default, kind, doc). The single list the parser, the docs table and the tests use.
KEYS: dict[str, _Key] = {
    "store_dir": _Key("", "str", "directory of the store (required with store 'embedded'); rank r "
                      "uses <store_dir>/rank-<r>"),
    "store": _Key("embedded", "store", "where the index lives: 'embedded' (in the worker process) "
                  "or 'unix:///run/rangekv.sock' (the node's store service, `rangekv serve`)"),
    "tenant": _Key("default", "str", "quota account at the store service (1-64 of [A-Za-z0-9._-])"),
    "store_service_spin_us": _Key(200, "int", "with a store service: how long a call polls for its "
                                  "reply before sleeping (us; 0 sleeps at once)"),
    "share_reads": _Key(False, "bool", "with a store service: keep this instance's reads to its "
                        "share of the node (read workers and read I/O threads divided by the "
                        "instances reading now)"),
    "read_gate": _Key(True, "bool", "with a store service that runs a read gate (rangekv serve "
                      "does by default): every read of this instance takes one of the node's "
                      "read slots, shared with the other instances as their reads come"),
    "capacity": _Key(16 << 30, "size",
                     "capacity bound of each rank's pack file (bytes or '512GiB')"),
    "stripe_bytes": _Key(32 << 20, "size", "stripe size W (bytes); a pack is layers x W"),
    "io_engine": _Key("auto", "choice", "I/O engine", ("auto", "posix", "uring")),
    "direct_io": _Key(True, "bool", "O_DIRECT where the file system supports it"),
    "device": _Key("auto", "choice", "engine device: 'auto' follows the KV tensors' device",
                   ("auto", "host", "cuda")),
    "layerwise": _Key(True, "bool", "deliver layer by layer, each layer's attention waiting only "
                      "for its own layer (True), or the whole prefix before the forward starts "
                      "(False)"),
    "checksum": _Key("always", "choice", "verify payload digests on restore", ("always", "off")),
    "durability": _Key("periodic:200", "durability", "what a crash may lose (docs/fault-model.md): "
                       "'every_publish' (nothing published), 'periodic:<ms>' (at most that "
                       "window of publications), 'none' (the whole index)"),
    "checkpoint_interval_ms": _Key(60000, "int", "fold a journal that has held records this long "
                                   "into a new snapshot, bounding a dirty reopen's replay (ms; 0: "
                                   "only past 256 MiB and at shutdown; at most a day)", minimum=0),
    "reuse_granularity": _Key(0, "int", "tokens a hit is rounded down to: a multiple or a "
                              "divisor of vLLM's block size (0 = the block size; a divisor still "
                              "loads whole blocks). The Range paper's logical object size; "
                              "RangeKV's own costs do not depend on it", minimum=0),
    "cross_layer_blocks": _Key(False, "bool", "ask vLLM (0.25-0.31, backends whose blocks are "
                               "outermost) for one KV allocation whose blocks hold every layer "
                               "(prefer_cross_layer_blocks); each layer is then a strided view. "
                               "Stripes are per layer either way: no speed-up is expected"),
    "lookup_timeout_ms": _Key(2000, "int", "bound on the scheduler's wait for a rank's lookup "
                              "answer (ms); no answer = no hit", minimum=1),
    "min_hit_tokens": _Key(0, "int_or_auto", "break-even threshold: restores shorter than this "
                           "many tokens (beyond vLLM's own prefix hit) are reported as misses "
                           "(recomputed); 'auto' derives it from the break_even_* keys at "
                           "start-up"),
    "break_even_prefill_tokens_per_s": _Key(0, "int", "with min_hit_tokens 'auto': the server's "
                                            "prefill throughput (tokens/s), measured by `rangekv "
                                            "bench serve --workload breakeven` (required with "
                                            "'auto')"),
    "break_even_restore_bandwidth": _Key("probe", "size_or_probe", "with min_hit_tokens 'auto': "
                                         "restore bandwidth in bytes per second (e.g. '2GiB'), "
                                         "or 'probe': read back 64 MiB written to store_dir at "
                                         "start-up"),
    "break_even_overhead_us": _Key(2000, "int", "with min_hit_tokens 'auto': a restore's fixed "
                                   "cost (lookup, claim, first layer wait) in microseconds"),
    "save_mode": _Key("detach", "choice", "'detach': a step waits only until its KV was "
                      "extracted, writes continue as bounded write debt; 'visible': a step waits "
                      "until the stored prefix is visible to lookups", ("detach", "visible")),
    "ablations": _Key("", "str", "engine ablations, e.g. 'index=scalar,delivery=barrier'"),
    "read_banks": _Key(8, "int", "read banks", minimum=2),
    "read_bank_bytes": _Key(0, "int", "read bank bytes (0 = stripe_bytes)"),
    "read_workers": _Key(4, "int", "read worker threads", minimum=1),
    "read_io_threads": _Key(0, "int", "threads of the read I/O engine (0 = auto: 4 per read "
                            "worker on O_DIRECT, the usable CPUs up to 16 on a buffered file)"),
    "prefetch_banks": _Key(7, "int", "read banks lookup-time prefetch may hold (< read_banks)"),
    "lookahead_layers": _Key(4, "int", "layers read ahead of the lowest unfinished layer",
                             minimum=1),
    "store_banks": _Key(8, "int", "store banks", minimum=1),
    "store_bank_bytes": _Key(0, "int", "store bank bytes (0 = 2 x layer_group x stripe_bytes)"),
    "group_workers": _Key(0, "int", "store gather worker threads (0 = auto: 8 on CUDA, min(8, "
                          "usable CPUs) on the CPU)"),
    "write_workers": _Key(32, "int", "store write worker threads", minimum=1),
    "layer_group": _Key(0, "int", "layers gathered and written together (0 = auto: 4 on CUDA, 2 on "
                        "the CPU, at most the model's layers)"),
    "max_inflight_restores": _Key(16, "int", "restore job slots (prefetching lookups included)",
                                  minimum=1),
    "max_inflight_stores": _Key(16, "int", "store job slots (write debt included)", minimum=1),
    "max_request_tokens": _Key(262144, "int", "largest prompt the engine accepts (tokens)",
                               minimum=1),
    "stats_log_every": _Key(100, "int", "one INFO summary line every N finished requests "
                            "(0 = never)"),
    "cpus": _Key("auto", "cpus", "CPUs of the engine's threads on a CPU worker: 'auto' (vLLM's "
                 "reserved CPUs, off its compute binding), 'inherit', or a list such as '1' or "
                 "'2,4-7' (docs/integrations/vllm.md \"CPU placement\")"),
    "socket_dir": _Key("", "str", "directory of the scheduler<->worker sockets (default: the "
                       "system temporary directory)"),
    "remote": _Key("", "str", "cluster tier: s3://bucket[/prefix] the nodes share "
                   "(docs/scale-out.md); '' = off"),
    "remote_endpoint": _Key("", "str", "cluster tier: S3 endpoint URL (http(s)://host:port; '' = "
                            "AWS S3)"),
    "directory": _Key("", "str", "cluster tier: redis://host:port/db (Redis or Valkey)"),
    "remote_publish": _Key(True, "bool", "cluster tier: an embedded store uploads its sealed packs "
                           "(with a store service, the service publishes)"),
    "remote_lookup_timeout_ms": _Key(250, "int", "cluster tier: bound on a lookup's walk of the "
                                     "cluster directory (ms); past it the hit is the node's own",
                                     minimum=1),
    "identity": _Key("metadata", "choice", "how the weights are pinned in the store's key: "
                     "'metadata' (each weight file's name, size, modification time and "
                     "safetensors header) or 'content' (every byte, digested once and cached in "
                     "store_dir, for files copied with their times preserved)",
                     ("metadata", "content")),
    "allow_untested_vllm": _Key(False, "bool", "start on a vLLM version outside the tested range "
                                "(docs/integrations/vllm.md \"Versions\") instead of refusing"),
}


@dataclasses.dataclass(frozen=True)
class ConnectorConfig:
    store_dir: str
    store: str
    tenant: str
    store_service_spin_us: int
    share_reads: bool
    read_gate: bool
    capacity: int
    stripe_bytes: int
    io_engine: str
    direct_io: bool
    device: str
    layerwise: bool
    checksum: str
    durability: str
    checkpoint_interval_ms: int
    reuse_granularity: int
    cross_layer_blocks: bool
    lookup_timeout_ms: int
    min_hit_tokens: int | str      # tokens, or "auto" (break_even.py derives it at start-up)
    break_even_prefill_tokens_per_s: int
    break_even_restore_bandwidth: int | str  # bytes per second, or "probe"
    break_even_overhead_us: int
    save_mode: str
    ablations: str
    read_banks: int
    read_bank_bytes: int
    read_workers: int
    read_io_threads: int
    prefetch_banks: int
    lookahead_layers: int
    store_banks: int
    store_bank_bytes: int
    group_workers: int
    write_workers: int
    layer_group: int
    max_inflight_restores: int
    max_inflight_stores: int
    max_request_tokens: int
    stats_log_every: int
    cpus: str
    socket_dir: str
    remote: str
    remote_endpoint: str
    directory: str
    remote_publish: bool
    remote_lookup_timeout_ms: int
    identity: str
    allow_untested_vllm: bool

    def engine_options(self) -> dict[str, Any]:
        """Keyword arguments for rangekv.Engine (the sizes and policies above)."""
        return dict(
            stripe_bytes=self.stripe_bytes, capacity_bytes=self.capacity,
            io_engine=self.io_engine, direct_io=self.direct_io, checksum=self.checksum,
            durability=self.durability, checkpoint_interval_ms=self.checkpoint_interval_ms,
            ablations=self.ablations, read_banks=self.read_banks,
            read_bank_bytes=self.read_bank_bytes, read_workers=self.read_workers,
            read_io_threads=self.read_io_threads, prefetch_banks=self.prefetch_banks,
            lookahead_layers=self.lookahead_layers,
            max_inflight_restores=self.max_inflight_restores, store_banks=self.store_banks,
            store_bank_bytes=self.store_bank_bytes, group_workers=self.group_workers,
            write_workers=self.write_workers, layer_group=self.layer_group,
            max_inflight_stores=self.max_inflight_stores,
            max_request_tokens=self.max_request_tokens, remote=self.remote,
            remote_endpoint=self.remote_endpoint, directory=self.directory,
            remote_publish=self.remote_publish,
            remote_lookup_timeout_ms=self.remote_lookup_timeout_ms)


# Keys renamed, old name -> new name: still accepted, with a warning. "gate" names the store
# service's read gate (read_gate) only.
DEPRECATED_KEYS = {
    "gate_prefill_tokens_per_s": "break_even_prefill_tokens_per_s",
    "gate_restore_bandwidth": "break_even_restore_bandwidth",
    "gate_overhead_us": "break_even_overhead_us",
}


def parse_config(extra: Mapping[str, Any] | None) -> ConnectorConfig:
    """Validates ``kv_connector_extra_config``; raises ConfigError naming every bad key."""
    extra = dict(extra or {})
    for old, new in DEPRECATED_KEYS.items():
        if old not in extra:
            continue
        if new in extra:
            raise ConfigError(f"{old}: the old name of {new}; set only {new}")
        logging.getLogger("vllm.rangekv").warning(
            "rangekv: kv_connector_extra_config key %r is deprecated; use %r", old, new)
        extra[new] = extra.pop(old)
    unknown = sorted(set(extra) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"unknown kv_connector_extra_config key(s) {', '.join(map(repr, unknown))}; "
            f"known keys: {', '.join(sorted(KEYS))}")
    values: dict[str, Any] = {}
    for name, key in KEYS.items():
        value = extra.get(name, key.default)
        if key.kind == "store":
            if not isinstance(value, str) or not (
                    value == "embedded" or (value.startswith("unix://") and len(value) > 7)):
                raise ConfigError(f"store: expected 'embedded' or 'unix:///path/to/socket', "
                                  f"got {value!r}")
        elif key.kind == "str":
            if value is None:
                raise ConfigError(f"{name}: required (the directory of the store)")
            if not isinstance(value, str):
                raise ConfigError(f"{name}: expected a string, got {value!r}")
        elif key.kind == "size":
            value = parse_size(name, value)
        elif key.kind == "size_or_probe":
            value = value if value == "probe" else parse_size(name, value)
        elif key.kind == "int_or_auto":
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int)
                                    or value < 0):
                raise ConfigError(f"{name}: expected an integer >= 0 or 'auto', got {value!r}")
        elif key.kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{name}: expected true or false, got {value!r}")
        elif key.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name}: expected an integer, got {value!r}")
            if value < key.minimum:
                raise ConfigError(f"{name}: must be >= {key.minimum}, got {value!r}")
        elif key.kind == "durability":
            ok = isinstance(value, str) and (
                value in ("every_publish", "none", "periodic") or
                (value.startswith("periodic:") and value[9:].isdigit()
                 and 1 <= int(value[9:]) <= 60000))
            if not ok:
                raise ConfigError(f"{name}: expected every_publish, periodic:<ms> (1-60000) or "
                                  f"none, got {value!r}")
        elif key.kind == "cpus":
            if value not in ("auto", "inherit"):
                try:
                    parse_cpu_list(value)
                except ValueError as e:
                    raise ConfigError(f"{name}: {e}") from None
        elif key.kind == "choice":
            if value not in key.choices:
                raise ConfigError(
                    f"{name}: expected one of {', '.join(key.choices)}, got {value!r}")
        values[name] = value
    if not values["store_dir"] and values["store"] == "embedded":
        raise ConfigError("store_dir: required (the directory of the store)")
    if values["prefetch_banks"] >= values["read_banks"]:
        raise ConfigError(f"prefetch_banks: must be < read_banks ({values['read_banks']}), "
                          f"got {values['prefetch_banks']}")
    if values["remote"] and (not values["remote"].startswith("s3://") or not values["directory"]):
        raise ConfigError("remote: expected 's3://bucket[/prefix]' together with directory "
                          f"'redis://host:port/db', got remote={values['remote']!r} "
                          f"directory={values['directory']!r}")
    if values["min_hit_tokens"] == "auto" and values["break_even_prefill_tokens_per_s"] <= 0:
        raise ConfigError("min_hit_tokens: 'auto' needs break_even_prefill_tokens_per_s (the "
                          "server's prefill tokens/s; `python -m rangekv.bench serve --workload "
                          "breakeven` measures it and prints the keys)")
    return ConnectorConfig(**values)
