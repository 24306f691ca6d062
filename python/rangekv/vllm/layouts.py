"""How vLLM's KV cache tensors map to RangeKV engine layouts (by shape and strides)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import rangekv


# ---- KV tensor layouts vLLM 0.32 hands over ---------------------------------------------------

@dataclasses.dataclass
class _LayoutSpec:
    name: str                 # what vLLM gave, for logs and errors
    layout: str               # rangekv layout
    heads: int                # kv heads per rank
    head_size: int
    block_size: int
    block_bytes_view: bool    # the layer is handed to the engine as [N, B, s/elt] whole blocks

    def engine_args(self, total_heads: int) -> dict[str, Any]:
        if self.block_bytes_view:
            return dict(layout=self.layout, kv_heads=self.heads, head_size=self.head_size,
                        mla_latent_size=2 * self.heads * self.head_size)
        return dict(layout=self.layout, kv_heads=max(total_heads, self.heads),
                    head_size=self.head_size)

    def view(self, t: torch.Tensor) -> torch.Tensor:
        if self.block_bytes_view:
            # One layer's block is opaque (the CPU attention kernel may pack its interior):
            # handed over as B rows of s bytes each, copied whole, so a restored block holds
            # exactly the bytes that were stored.
            return t.view(t.shape[0], self.block_size, -1)
        return t


_SUPPORTED: dict[str, bool] = {}



def _engine_supports(layout: str) -> bool:
    """Whether this build of the engine implements `layout` (the binding knows every name; an
    engine built before a layout existed refuses it with Unimplemented). Probed once with a
    tiny throw-away store."""
    if layout not in _SUPPORTED:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            try:
                rangekv.Engine(d, layers=4, kv_heads=1, head_size=16, dtype="float16",
                               block_size=16, layout=layout, stripe_bytes=1 << 16,
                               mla_latent_size=32 if layout == "mla" else 0,
                               capacity_bytes=1 << 20, device="host", read_banks=2,
                               prefetch_banks=1, store_banks=1, read_workers=1, group_workers=1,
                               write_workers=1, max_inflight_restores=1, max_inflight_stores=1,
                               max_request_tokens=1024).close()
                _SUPPORTED[layout] = True
            except rangekv.Error:
                _SUPPORTED[layout] = False
    return _SUPPORTED[layout]


def describe_layout(t: torch.Tensor, block_size: int) -> _LayoutSpec:
    """Maps one vLLM 0.32 KV layer tensor to a rangekv layout; anything else fails naming it."""
    shape = tuple(t.shape)
    if t.dim() == 4 and shape[2] == block_size and t.is_contiguous() and not t.is_cuda:
        heads, head_size = shape[1], shape[3] // 2
        if _engine_supports("cpu_block"):
            return _LayoutSpec("cpu [num_blocks, H, B, 2D]", "cpu_block", heads, head_size,
                               block_size, False)
        # Engines built without the cpu_block layout: the same bytes as whole blocks.
        return _LayoutSpec("cpu [num_blocks, H, B, 2D]", "mla", heads, head_size, block_size,
                           True)
    if t.dim() == 4 and t.is_cuda and shape[2] == block_size:
        heads, head_size = shape[1], shape[3] // 2
        if t.is_contiguous():
            return _LayoutSpec("packed HND [N, H, B, 2D]", "packed_hnd", heads, head_size,
                               block_size, False)
        if t.permute(0, 2, 1, 3).is_contiguous():
            return _LayoutSpec("packed NHD [N, H, B, 2D] (physical [N, B, H, 2D])",
                               "packed_nhd", heads, head_size, block_size, False)
    if t.dim() == 5 and shape[0] == 2 and shape[2] == block_size:
        heads, head_size = shape[3], shape[4]
        if t.is_contiguous():
            return _LayoutSpec("flash_attn NHD [2, N, B, H, D]", "flash_attn_nhd", heads,
                               head_size, block_size, False)
        return _LayoutSpec("flash_attn HND [2, N, B, H, D]", "flash_attn_hnd", heads,
                           head_size, block_size, False)
    raise ValueError(f"RangeKVConnector: unsupported KV cache layout: shape {shape}, strides "
                     f"{t.stride()}, dtype {t.dtype}, device {t.device}; supported: the CPU "
                     "backend's [num_blocks, H, B, 2*D], the packed GPU layouts "
                     "[num_blocks, H, B, 2*D] (NHD/HND) and FlashAttention [2, N, B, H, D]")
