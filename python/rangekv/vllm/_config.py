"""`kv_connector_extra_config` of the RangeKV vLLM connector: every key, its unit and default.

Parsed once per process (scheduler and worker) at start-up; an unknown key or a bad value
raises ValueError naming it, so vLLM fails to start instead of serving without the cache.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1000, "m": 1 << 20,
          "mib": 1 << 20, "mb": 1000**2, "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3,
          "t": 1 << 40, "tib": 1 << 40, "tb": 1000**4}


def parse_bytes(key: str, value: Any) -> int:
    """An int, or a string such as "512GiB", "32MiB", "4096"."""
    if isinstance(value, bool):
        raise ValueError(f"RangeKVConnector: {key}={value!r} is not a byte size")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"RangeKVConnector: {key}={value!r} is not a byte size "
                             "(use an integer or e.g. \"512GiB\", \"32MiB\")")
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ValueError(f"RangeKVConnector: {key}={value!r} is not a byte size")
    if n <= 0:
        raise ValueError(f"RangeKVConnector: {key}={value!r} must be > 0")
    return n


@dataclasses.dataclass(frozen=True)
class ConnectorConfig:
    store_dir: str                     # required; one sub-directory rank-N per TP rank
    capacity: int = 16 << 30           # bytes per rank ("512GiB" accepted)
    stripe_bytes: int = 32 << 20       # bytes per stripe (the store's write/read unit)
    io_engine: str = "auto"            # "auto" | "posix" | "uring"
    direct_io: bool = True             # O_DIRECT on the pack files
    device: str = "auto"               # "auto" | "host" | "cuda"
    layerwise: bool = False            # per-layer restore (wait_for_layer_load waits per layer)
    checksum: str = "always"           # "always" | "off": verify restored bytes
    lookup_timeout_ms: int = 2000      # scheduler's bounded wait for each rank's lookup answer
    summary_every: int = 100           # INFO summary line every N finished requests (0 = off)
    read_banks: int = 8
    read_workers: int = 4
    prefetch_banks: int = 7
    store_banks: int = 8
    group_workers: int = 8
    write_workers: int = 32
    max_inflight_restores: int = 16
    max_inflight_stores: int = 16


_BOOL = ("direct_io", "layerwise")
_BYTES = ("capacity", "stripe_bytes")
_CHOICES = {"io_engine": ("auto", "posix", "uring"), "device": ("auto", "host", "cuda"),
            "checksum": ("always", "off")}
_INTS = {"lookup_timeout_ms": 1, "summary_every": 0, "read_banks": 1, "read_workers": 1,
         "prefetch_banks": 0, "store_banks": 1, "group_workers": 1, "write_workers": 1,
         "max_inflight_restores": 1, "max_inflight_stores": 1}


def parse_config(extra: dict[str, Any] | None) -> ConnectorConfig:
    extra = dict(extra or {})
    known = {f.name for f in dataclasses.fields(ConnectorConfig)}
    unknown = sorted(set(extra) - known)
    if unknown:
        raise ValueError(f"RangeKVConnector: unknown kv_connector_extra_config key(s) {unknown}; "
                         f"known keys: {sorted(known)}")
    if not isinstance(extra.get("store_dir"), str) or not extra["store_dir"]:
        raise ValueError("RangeKVConnector: kv_connector_extra_config.store_dir (a directory "
                         "path) is required")
    out: dict[str, Any] = {"store_dir": extra.pop("store_dir")}
    for key, value in extra.items():
        if key in _BOOL:
            if not isinstance(value, bool):
                raise ValueError(f"RangeKVConnector: {key}={value!r} must be true or false")
            out[key] = value
        elif key in _BYTES:
            out[key] = parse_bytes(key, value)
        elif key in _CHOICES:
            if value not in _CHOICES[key]:
                raise ValueError(f"RangeKVConnector: {key}={value!r} must be one of "
                                 f"{list(_CHOICES[key])}")
            out[key] = value
        else:
            lo = _INTS[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"RangeKVConnector: {key}={value!r} must be an integer >= {lo}")
            out[key] = value
    return ConnectorConfig(**out)
