"""The identity of the KV a vLLM instance computes (rangekv/identity.py), read from vLLM's
resolved configuration in the worker, after the model loaded and the KV cache exists: the
effective HF config (after ``--hf-overrides`` and whatever the model's own code set in it while
loading), the weights, the dtypes, the quantization, the block size, the layout RangeKV maps the
KV tensors to, the attention backends of the KV layers, the model runner and the parallel sizes.

``max_model_len`` is out, except where vLLM computes other KV values by it: Phi-3's LongRoPE
uses its long factors from the first token once ``max_model_len`` exceeds
``original_max_position_embeddings``, so that fact (not the length) is in the key. Llama 4's
attention temperature tuning, the other such switch found in vLLM 0.32, is written into the HF
config by the model's own code, and so is in the effective config already.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..identity import KvIdentity, model_config_fields, rope_summary, unpinned, weights_identity

log = logging.getLogger("vllm.rangekv")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def kv_cache_dtype(vllm_config) -> str:
    """What the KV cache holds: "auto" made explicit (the model's dtype), "fp8" as vLLM reads it
    (e4m3)."""
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype == "auto":
        return _dtype_name(vllm_config.model_config.dtype)
    if cache_dtype == "fp8":
        return "fp8_e4m3"
    return cache_dtype


def attention_backends(vllm_config, layer_names) -> str:
    """The attention backends of the KV layers (names joined, sorted), from vLLM's layer table;
    "unknown" where this vLLM does not expose them."""
    context = getattr(vllm_config.compilation_config, "static_forward_context", None) or {}
    names = set()
    for name in layer_names:
        layer = context.get(name)
        get = getattr(layer, "get_attn_backend", None)
        if get is None:
            continue
        try:
            names.add(str(get().get_name()))
        except Exception:  # noqa: BLE001 - a layer without a backend names none
            continue
    return ",".join(sorted(names)) or "unknown"


def _hub_commit(download_dir: str | None):
    def resolve(repo: str, revision: str | None) -> str | None:
        """The commit of the snapshot vLLM loaded (already in the local cache)."""
        try:
            from huggingface_hub import snapshot_download

            path = snapshot_download(repo, revision=revision, cache_dir=download_dir,
                                     local_files_only=True)
        except Exception:  # noqa: BLE001 - not in the cache, ModelScope, ...: unpinned
            return None
        commit = os.path.basename(os.path.normpath(path))
        return commit if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit) \
            else None
    return resolve


def model_runner(vllm_config) -> str:
    """vLLM's model runner: "v1" or "v2" where the switch exists (0.25-0.33), "v2" where it is
    the only one (0.34 has no switch and no V1 runner)."""
    flag = getattr(vllm_config, "use_v2_model_runner", None)
    return "v1" if flag is False else "v2"


def max_model_len_effects(vllm_config, config: dict) -> dict:
    """The facts derived from max_model_len that change KV values (module docstring)."""
    out = {}
    rope = rope_summary(config)
    original = rope.get("original_max_position_embeddings")
    if rope.get("rope_type") == "longrope" and original:
        out["long_rope"] = vllm_config.model_config.max_model_len > original
    return out


def vllm_identity(vllm_config, *, layout: str, layer_names, weights_mode: str = "metadata",
                  digest_cache_dir: str | None = None) -> KvIdentity:
    """The identity of this instance's KV (call it in the worker, once the model loaded)."""
    model = vllm_config.model_config
    cache = vllm_config.cache_config
    parallel = vllm_config.parallel_config
    config = model_config_fields(model.hf_config)
    load = getattr(vllm_config, "load_config", None)
    load_format = str(getattr(load, "load_format", "auto"))
    if load_format == "dummy":
        # Random weights drawn at start-up: nothing any other engine computed matches them.
        weights = unpinned("--load-format dummy: random weights")
    else:
        weights = weights_identity(str(model.model), revision=model.revision, mode=weights_mode,
                                   digest_cache_dir=digest_cache_dir,
                                   resolve_hub=_hub_commit(getattr(load, "download_dir", None)))
    extra: dict[str, Any] = {
        "sliding_window": model.get_sliding_window(),  # effective (--disable-sliding-window)
        "runner_type": str(getattr(model, "runner_type", "generate")),
        "calculate_kv_scales": bool(getattr(cache, "calculate_kv_scales", False)),
    }
    extra.update(max_model_len_effects(vllm_config, config))
    return KvIdentity(
        engine="vllm", model_config=config, weights=weights, dtype=_dtype_name(model.dtype),
        kv_cache_dtype=kv_cache_dtype(vllm_config), quantization=model.quantization,
        block_size=cache.block_size, layout=layout,
        attention_backend=attention_backends(vllm_config, layer_names),
        runner=model_runner(vllm_config),
        tp_size=parallel.tensor_parallel_size, pp_size=parallel.pipeline_parallel_size,
        extra=extra)
