"""RangeKV: a KV-cache storage engine for LLM serving (Python binding).

Quick start (README.md "Python" has the full, tested example)::

    import numpy as np, rangekv
    with rangekv.Engine("/tmp/store", layers=4, kv_heads=2, head_size=16, dtype="bfloat16",
                        layout="flash_attn_nhd", stripe_bytes=4096, capacity_bytes=1 << 20,
                        device="host") as eng:
        kv = [np.random.randint(0, 1 << 16, (2, 8, 16, 2, 16), dtype=np.uint16)
              for _ in range(4)]
        s = eng.begin_store(rangekv.Envelope("req-1"), range(100), kv, range(100))
        for layer in range(4):
            s.layer_produced(layer)
        assert s.finish().ok
        hit, ticket = eng.lookup(range(100), rangekv.Envelope("req-2"))  # 96

See ``rangekv.Engine`` and README.md "Python". ``rangekv.build_info()["cuda_kernels"]`` says
whether this build can deliver into GPU memory (empty: built without nvcc, host device only).
Tensors: torch, numpy or any DLPack array (no framework is linked); bf16 accepts
``torch.bfloat16`` or ``uint16`` holding the bits (numpy has no bfloat16). Every blocking call
releases the GIL.
"""

from __future__ import annotations

import dataclasses

from . import _core, _errors
from ._core import (
    Engine,
    RestoreHandle,
    RestoreOutcome,
    StoreHandle,
    StoreOutcome,
    __version__,
    build_info,
)

# Every error class, re-exported: __all__ below adds _errors.__all__, which ruff cannot read.
from ._errors import *  # noqa: F403
from ._errors import ClosedError, Error  # noqa: F401
from ._offline import fsck, inspect

LAYOUTS: tuple[str, ...] = tuple(_core.layouts().split(", "))
"""Every layout name the binding knows (some may be missing from an older engine build)."""


@dataclasses.dataclass(frozen=True)
class Envelope:
    """Who a request is. Tickets are bound to it: a claim with another envelope fails with
    ForeignOwner. Frozen and picklable (it crosses from the scheduler to the workers)."""

    request_id: str
    session_id: int = 0
    attempt: int = 0
    rank: int = 0


__all__ = [
    "Engine",
    "Envelope",
    "RestoreHandle",
    "RestoreOutcome",
    "StoreHandle",
    "StoreOutcome",
    "inspect",
    "fsck",
    "LAYOUTS",
    "build_info",
    "__version__",
] + list(_errors.__all__)
