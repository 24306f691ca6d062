"""How vLLM's KV cache tensors map to RangeKV engine layouts (by shape and strides)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import rangekv

# vLLM hands the connector one tensor per layer (register_kv_caches), or with
# prefer_cross_layer_blocks one tensor of every layer (register_cross_layers_kv_cache). Which
# shape and memory order depends on the version and the attention backend (docs/integrations/
# vllm.md, "KV cache layouts"); every one is matched by shape AND strides here:
#   vLLM 0.25 FlashAttention / FlashInfer / Triton (GPU)   [N, 2, B, H, D]  NHD or HND order,
#       or a strided view of a cross-layer allocation [N, L, 2, B, H, D] / [N, H, L, 2, B, D]
#   older FlashAttention                                     [2, N, B, H, D]  NHD or HND order
#   vLLM >= 0.26 FlashAttention / FlashInfer (GPU)           [N, H, B, 2D]    NHD or HND order
#   vLLM's CPU backend                                       [N, H, B, 2D]    opaque blocks
#   MLA                                                      [N, B, latent]
# The stripe format does not depend on the paged memory's order (a stripe row is the token's K
# heads, then its V heads), so only the engine's views differ between them; the engine layout
# named here is still part of the namespace.

@dataclasses.dataclass
class _LayoutSpec:
    name: str                 # what vLLM gave, for logs and errors
    layout: str               # rangekv layout
    heads: int                # kv heads per rank
    head_size: int
    block_size: int
    block_bytes_view: bool    # the layer is handed to the engine as [N, B, s/elt] whole blocks
    strided: bool = False     # a strided view (not dense in the layout's order)
    mla: bool = False         # one latent vector per token (heads == 1, head_size = latent)

    def engine_args(self, total_heads: int) -> dict[str, Any]:
        if self.mla:
            return dict(layout="mla", kv_heads=1, head_size=self.head_size,
                        mla_latent_size=self.head_size)
        if self.block_bytes_view:
            return dict(layout=self.layout, kv_heads=self.heads, head_size=self.head_size,
                        mla_latent_size=2 * self.heads * self.head_size)
        return dict(layout=self.layout, kv_heads=max(total_heads, self.heads),
                    head_size=self.head_size)

    def view(self, t: torch.Tensor) -> torch.Tensor:
        if self.mla and t.dim() == 4:  # vLLM >= 0.29 hands MLA layers as [N, 1, B, latent]
            return t.squeeze(1)
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


def _dense_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims of a tensor from outermost to innermost when its memory is dense (no gaps, no
    overlap) in some order of its dims, else None. Size-1 dims keep their place."""
    if any(s < 0 for s in strides):
        return None
    big = sorted((i for i in range(len(shape)) if shape[i] != 1), key=lambda i: -strides[i])
    expect = 1
    for i in reversed(big):
        if strides[i] != expect:
            return None
        expect *= shape[i]
    rest = iter(big)
    return tuple(i if shape[i] == 1 else next(rest) for i in range(len(shape)))


def describe_layout(t: torch.Tensor, block_size: int, *, mla: bool = False,
                    cuda: bool | None = None) -> _LayoutSpec:
    """Maps one vLLM KV layer tensor to a rangekv layout by its shape and strides; anything else
    fails with a ValueError naming what it saw. `mla`: the model uses MLA (vLLM's
    model_config.use_mla: one latent vector per token, no K/V split). `cuda` overrides t.is_cuda
    (tests)."""
    cuda = t.is_cuda if cuda is None else cuda
    shape, strides = tuple(t.shape), tuple(t.stride())
    B = block_size
    order = _dense_order(shape, strides)
    if mla:
        if t.dim() == 3 and shape[1] == B and order == (0, 1, 2):
            return _LayoutSpec("MLA [N, B, latent]", "mla", 1, shape[2], B, False, mla=True)
        if t.dim() == 4 and shape[1] == 1 and shape[2] == B and t.squeeze(1).is_contiguous():
            return _LayoutSpec("MLA [N, 1, B, latent]", "mla", 1, shape[3], B, False, mla=True)
        raise ValueError(f"RangeKVConnector: unsupported MLA KV cache layout: shape {shape}, "
                         f"strides {strides}, dtype {t.dtype}, device {t.device}, block size {B}; "
                         "supported: a dense [N, B, latent] or [N, 1, B, latent] per layer")

    def strided_ok() -> bool:  # a strided view the engine can address
        return all(s >= 0 for s in strides) and (strides[-1] == 1 or shape[-1] == 1)

    if t.dim() == 4 and not cuda and shape[2] == B and t.is_contiguous():
        heads, head_size = shape[1], shape[3] // 2
        if _engine_supports("cpu_block"):
            return _LayoutSpec("cpu [num_blocks, H, B, 2D]", "cpu_block", heads, head_size, B,
                               False)
        # Engines built without the cpu_block layout: the same bytes as whole blocks.
        return _LayoutSpec("cpu [num_blocks, H, B, 2D]", "mla", heads, head_size, B, True)
    if t.dim() == 4 and cuda and shape[2] == B and shape[3] % 2 == 0:
        heads, head_size = shape[1], shape[3] // 2
        if order == (0, 1, 2, 3):
            return _LayoutSpec("packed HND [N, H, B, 2D]", "packed_hnd", heads, head_size, B, False)
        if order == (0, 2, 1, 3):
            return _LayoutSpec("packed NHD [N, H, B, 2D] (physical [N, B, H, 2D])", "packed_nhd",
                               heads, head_size, B, False)
        if strided_ok():
            return _LayoutSpec("packed [N, H, B, 2D], strided", "packed_hnd", heads, head_size, B,
                               False, strided=True)
    if t.dim() == 5 and shape[2] == B and (shape[0] == 2) != (shape[1] == 2):
        heads, head_size = shape[3], shape[4]
        if shape[0] == 2:  # planes outermost: [2, N, B, H, D]
            what, nhd, hnd = "FlashAttention [2, N, B, H, D]", "flash_attn_nhd", "flash_attn_hnd"
        else:  # blocks outermost (vLLM 0.25): [N, 2, B, H, D]
            what, nhd, hnd = "blocks-first [N, 2, B, H, D]", "flashinfer_nhd", "flashinfer_hnd"
        if order == (0, 1, 2, 3, 4):
            return _LayoutSpec(f"{what} NHD", nhd, heads, head_size, B, False)
        if order == (0, 1, 3, 2, 4):
            physical = "[2, N, H, B, D]" if shape[0] == 2 else "[N, 2, H, B, D]"
            return _LayoutSpec(f"{what} HND (physical {physical})", hnd, heads, head_size, B,
                               False)
        if strided_ok():
            return _LayoutSpec(f"{what}, strided (a cross-layer allocation)", nhd, heads,
                               head_size, B, False, strided=True)
    raise ValueError(f"RangeKVConnector: unsupported KV cache layout: shape {shape}, strides "
                     f"{strides}, dtype {t.dtype}, device {t.device}, block size {B}; supported "
                     "(matched by shape and strides): [N, 2, B, H, D] (vLLM 0.25 FlashAttention/"
                     "FlashInfer/Triton: NHD, HND, or a cross-layer strided view), "
                     "[2, N, B, H, D] (NHD/HND), the packed GPU layouts [N, H, B, 2D] (NHD/HND), "
                     "the CPU backend's [N, H, B, 2D] (and, for MLA models, [N, B, latent])")
