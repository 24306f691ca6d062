"""rangekv.hf: RangeKV under a Hugging Face transformers (5.x) Llama-style model.

    pool  = PagedKvPool.for_model(model.config, num_blocks=..., block_size=16, device="cpu")
    eng   = engine_for_model(model.config, store_dir, block_size=16)
    gen   = generate(model, prompt_ids, pool=pool, engine=eng, granularity=256)

``RangeKVCache`` is the ``Cache`` a forward pass runs with: paged KV memory in the
``flash_attn_nhd`` layout that RangeKV's scatter fills and its gather reads, per-layer waits for
the restored prefix, and per-layer hand-off to the store. ``attention.register()`` names an
attention implementation that computes a suffix over a cached prefix without a materialised
mask: load the model with ``attn_implementation=attention.register()``. See
docs/integrations/hf.md.
"""

from . import attention
from .cache import LAYOUT, PagedKvPool, RangeKVCache, RestoreFailed, model_kv_geometry
from .generate import Generation, generate, reference_generate


def engine_for_model(config, store_dir, *, block_size: int = 16, dtype=None, device: str = "auto", **options):
    """A ``rangekv.Engine`` whose geometry is the model's (layers, KV heads, head size, dtype)."""
    import torch

    import rangekv

    g = model_kv_geometry(config)
    # The engine's layer-count-bound default, clipped for shallow models (the layer group's auto
    # value clips itself).
    options.setdefault("lookahead_layers", min(4, g["layers"]))
    return rangekv.Engine(
        str(store_dir),
        layers=g["layers"],
        kv_heads=g["kv_heads"],
        head_size=g["head_size"],
        dtype=dtype or config.dtype or torch.float32,
        block_size=block_size,
        layout=LAYOUT,
        model_id=getattr(config, "_name_or_path", "") or "hf-llama",
        device=device,
        **options,
    )


__all__ = [
    "LAYOUT",
    "attention",
    "Generation",
    "PagedKvPool",
    "RangeKVCache",
    "RestoreFailed",
    "engine_for_model",
    "generate",
    "model_kv_geometry",
    "reference_generate",
]
