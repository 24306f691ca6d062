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


def model_identity(config, *, block_size: int = 16, dtype=None, model=None, weights=None,
                   weights_mode: str = "metadata", digest_cache_dir=None):
    """The identity of the KV this adapter computes for the model (rangekv/identity.py, the rule
    the vLLM connector follows too). The weights are pinned, in this order, by `weights` (a
    name the caller vouches for, e.g. "random seed 0"), by `model`'s tensors in memory, by the
    files or hub commit of ``config._name_or_path``; with none of these they are unpinned and
    the engine's KV is never shared (every open is a new namespace)."""
    import torch

    from .. import identity as ident

    if weights is not None:
        w = {"kind": "named", "name": str(weights)}
    elif model is not None:
        w = ident.tensors_identity(model.state_dict().items())
    else:
        w = ident.weights_identity(getattr(config, "_name_or_path", "") or "", mode=weights_mode,
                                   digest_cache_dir=digest_cache_dir,
                                   resolve_hub=_hub_commit)
    dtype = str(dtype or config.dtype or torch.float32).removeprefix("torch.")
    quant = getattr(config, "quantization_config", None)
    if quant is not None and not isinstance(quant, dict):
        quant = quant.to_dict()
    return ident.KvIdentity(
        engine="transformers", model_config=ident.model_config_fields(config), weights=w,
        dtype=dtype, kv_cache_dtype=dtype,
        quantization=quant.get("quant_method") if quant else None,
        block_size=block_size, layout=LAYOUT,
        attention_backend=str(getattr(config, "_attn_implementation", None) or "sdpa"),
        runner="rangekv.hf",
        # The facts the vLLM connector adds, as this adapter has them (model_identity.py there).
        extra={"sliding_window": getattr(config, "sliding_window", None)
               if getattr(config, "use_sliding_window", True) else None,
               "runner_type": "generate", "calculate_kv_scales": False})


def _hub_commit(repo: str, revision):
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the local cache: unpinned
        return None
    import os

    commit = os.path.basename(os.path.normpath(path))
    return commit if len(commit) == 40 else None


def engine_for_model(config, store_dir, *, block_size: int = 16, dtype=None, device: str = "auto",
                     model=None, weights=None, weights_mode: str = "metadata", **options):
    """A ``rangekv.Engine`` whose geometry is the model's (layers, KV heads, head size, dtype) and
    whose namespace is bound to the model's KV identity (`model_identity`; pass `model` or
    `weights` for a model that exists only in memory). A store of another identity in
    `store_dir` is replaced, never served (``on_store_mismatch="replace"``)."""
    import torch

    import rangekv

    g = model_kv_geometry(config)
    identity = model_identity(config, block_size=block_size, dtype=dtype, model=model,
                              weights=weights, weights_mode=weights_mode,
                              digest_cache_dir=str(store_dir))
    # The engine's layer-count-bound default, clipped for shallow models (the layer group's auto
    # value clips itself).
    options.setdefault("lookahead_layers", min(4, g["layers"]))
    options.setdefault("on_store_mismatch", "replace")
    return rangekv.Engine(
        str(store_dir),
        layers=g["layers"],
        kv_heads=g["kv_heads"],
        head_size=g["head_size"],
        dtype=dtype or config.dtype or torch.float32,
        block_size=block_size,
        layout=LAYOUT,
        semantic_config=identity.semantic_config(),
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
    "model_identity",
    "model_kv_geometry",
    "reference_generate",
]
