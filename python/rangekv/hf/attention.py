"""An attention implementation for a suffix computed over a cached prefix: ``"rangekv_sdpa"``.

A request served from a cache computes only its new tokens: ``q`` queries attend to ``kv =
past + q`` keys, causally with the queries aligned to the END of the keys (query ``i`` sees
keys ``[0, past + i]``, "lower-right" alignment). PyTorch's ``is_causal`` aligns to the start,
so transformers' ``sdpa`` implementation handles ``past > 0, q > 1`` by materialising a
``q x kv`` boolean mask (1 GiB for the paper's 16,128 new tokens over 65,280) and calling
SDPA with it, which rules out the flash kernel and repeats the KV heads for grouped-query
models. On the 8B shape that made the suffix's forward twice as slow as the same FLOPs
without a mask, for the resident control and for every restored request alike.

``rangekv_sdpa`` computes the same function without the mask: SDPA with
``torch.nn.attention.bias.causal_lower_right`` (the flash kernel's own causal mode on CUDA;
PyTorch's reference path elsewhere), ``is_causal`` when ``q == kv``, no mask for one query,
and grouped-query heads passed as they are (``enable_gqa``). On CUDA with cuDNN attention
enabled the lower-right case instead runs as two cuDNN attentions merged by log-sum-exp
(``split_attention``; ``SPLIT``), 1.75x faster on the 8B shape on an H200. Whatever needs a
real mask (padding, batches with different lengths, sliding windows) goes to transformers'
``sdpa`` unchanged: the mask function answers ``None`` only for an unpadded batch, and the attention
function hands any mask it is given to ``sdpa``.

    from rangekv.hf import attention
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention.register())
"""

from __future__ import annotations

import os
from collections import Counter

import torch

NAME = "rangekv_sdpa"
# How many attention calls took each path (for benchmarks: which kernel a run relied on).
PATHS: Counter = Counter()


def _unpadded(attention_mask) -> bool:
    """The 2-D padding mask transformers passes (1/True: a real token) masks nothing."""
    return attention_mask is None or bool(attention_mask.all())


def _mask(*, batch_size, q_length, kv_length, q_offset=0, kv_offset=0, attention_mask=None,
          local_size=None, allow_is_causal_skip=True, **kwargs):
    """No mask when causality alone describes the attention (see the module docstring), unless
    the caller asked for a real mask (allow_is_causal_skip=False)."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    plain = (allow_is_causal_skip
             and kwargs.get("mask_function", causal_mask_function) is causal_mask_function
             and local_size is None and kv_offset == 0 and kv_length == q_offset + q_length
             and _unpadded(attention_mask))
    if plain:
        return None
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                     q_offset=q_offset, kv_offset=kv_offset, attention_mask=attention_mask,
                     local_size=local_size,
                     allow_is_causal_skip=allow_is_causal_skip, **kwargs)


def attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers' attention signature: query [B, Hq, q, D], key/value [B, Hkv, kv, D];
    returns ([B, q, Hq, D], None)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is not None or not causal or kwargs.get("position_bias") is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        PATHS["sdpa (mask)"] += 1
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    q_len, kv_len = query.shape[2], key.shape[2]
    gqa = query.shape[1] != key.shape[1]
    if q_len == kv_len or q_len == 1:
        # Square: start and end alignment agree. One query: it sees every key.
        PATHS["causal" if q_len > 1 else "one query"] += 1
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout, scale=scaling, is_causal=q_len > 1,
            enable_gqa=gqa)
    else:
        from torch.nn.attention.bias import causal_lower_right

        if q_len > kv_len:
            raise ValueError(
                f"{q_len} queries over {kv_len} keys: the keys must include the queries")
        if _split_wanted(query):
            try:
                out = split_attention(query, key, value, scale=scaling)
                PATHS["split: prefix + square causal, merged"] += 1
                return out.transpose(1, 2).contiguous(), None
            except RuntimeError:
                # Neither fused kernel takes these inputs (a dtype or head size they do not
                # support): the single lower-right call below computes the same function.
                PATHS["split refused by the kernels"] += 1
        if gqa and query.is_cuda and not _fused_lower_right_takes_gqa(query, key, value, dropout):
            # Without a fused kernel for grouped heads PyTorch would materialise the mask (and a
            # q x kv score matrix per head); repeated KV heads keep the fused kernels.
            groups = query.shape[1] // key.shape[1]
            key = key.repeat_interleave(groups, dim=1)
            value = value.repeat_interleave(groups, dim=1)
            gqa = False
            PATHS["lower-right, KV heads repeated"] += 1
        else:
            PATHS["lower-right" + (" (grouped heads)" if gqa else "")] += 1
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_lower_right(q_len, kv_len), dropout_p=dropout,
            scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous(), None


# When a suffix over a cached prefix is computed as two attentions merged (split_attention):
# "auto" on CUDA where cuDNN's attention is enabled, "on" always, "off" never. ttft-hf's
# --attention-split sets it; RANGEKV_ATTENTION_SPLIT gives the default.
SPLIT = os.environ.get("RANGEKV_ATTENTION_SPLIT", "auto")


def _split_wanted(query) -> bool:
    if SPLIT == "on":
        return True
    if SPLIT != "auto" or not query.is_cuda:
        return False
    return bool(torch.backends.cuda.cudnn_sdp_enabled())


def split_attention(query, key, value, scale=None):
    """Lower-right causal attention of ``q`` queries over ``kv`` keys (the queries are the last
    ``q`` keys), computed as two attentions merged by their log-sum-exp: the queries over the
    ``kv - q`` prefix keys with no mask, and the queries over their own keys, square causal.

    Why: on CUDA the square causal and the unmasked shapes run cuDNN's fused kernel, which
    PyTorch does not offer for lower-right causality (that goes to its FlashAttention-2
    kernel, measured at ~330 against ~570 TFLOP/s on an H200 for the 8B shape). Merging is
    exact up to rounding: with ``l1, l2`` the log-sum-exps of the two parts' scores, the whole
    softmax weighs part 1 by ``sigmoid(l1 - l2)``. Both parts are non-empty for every query
    (every query sees all prefix keys and itself), so no log-sum-exp is -inf.

    query [B, Hq, q, D], key/value [B, Hkv, kv, D] -> [B, Hq, q, D] in the query's dtype."""
    q_len, kv_len = query.shape[2], key.shape[2]
    past = kv_len - q_len
    if past <= 0:
        raise ValueError(f"split attention needs a prefix: {q_len} queries over {kv_len} keys")
    out1, lse1 = _attend_with_lse(query, key[:, :, :past], value[:, :, :past], False, scale)
    out2, lse2 = _attend_with_lse(query, key[:, :, past:], value[:, :, past:], True, scale)
    shape = (query.shape[0], query.shape[1], q_len, 1)
    w1 = torch.sigmoid(lse1.reshape(shape) - lse2.reshape(shape))
    return torch.lerp(out2.float(), out1.float(), w1).to(query.dtype)


def _attend_with_lse(query, key, value, causal: bool, scale):
    """Attention output [B, Hq, q, D] and its natural log-sum-exp (float32, q entries per head):
    cuDNN's kernel on CUDA (FlashAttention's if cuDNN refuses the inputs), plain float32 math
    elsewhere (the CPU runs this path only when asked to, e.g. by tests)."""
    if query.is_cuda:
        if torch.backends.cuda.cudnn_sdp_enabled():
            try:
                r = torch.ops.aten._scaled_dot_product_cudnn_attention(
                    query, key, value, None, True, 0.0, causal, False, scale=scale)
                return r[0], r[1]
            except RuntimeError:
                pass
        r = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, causal,
                                                                False, scale=scale)
        return r[0], r[1]
    groups = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(groups, dim=1)
    v = value.float().repeat_interleave(groups, dim=1)
    if scale is None:
        scale = query.shape[-1] ** -0.5
    scores = query.float() @ k.transpose(-1, -2) * scale
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ v).to(query.dtype), lse


def _fused_lower_right_takes_gqa(query, key, value, dropout) -> bool:
    """Whether PyTorch's flash kernel (the one fused kernel with lower-right causality that takes
    grouped KV heads) accepts these inputs."""
    try:
        from torch.backends.cuda import SDPAParams, can_use_flash_attention

        params = SDPAParams(query, key, value, None, dropout, False, True)
        return bool(can_use_flash_attention(params))
    except (ImportError, TypeError, RuntimeError):
        return False


def register() -> str:
    """Registers ``rangekv_sdpa`` with transformers (idempotent); returns its name for
    ``attn_implementation=``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, _mask)
    return NAME
