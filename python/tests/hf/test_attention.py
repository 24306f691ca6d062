"""rangekv.hf.attention: rangekv_sdpa computes what transformers' sdpa computes, without a mask.

The same random Llama (grouped-query heads) under both implementations: a whole prompt, a
suffix over a cached prefix (the case sdpa serves with a materialised q x kv mask), and a
decode step. On the CPU both reach PyTorch's reference kernels, so the logits agree exactly;
a padded batch still gets its mask (rangekv_sdpa hands it to sdpa).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rangekv.hf import attention  # noqa: E402 - after the importorskips above


def llama(impl):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                      initializer_range=0.05)
    cfg._attn_implementation = impl
    torch.manual_seed(7)
    return LlamaForCausalLM(cfg).eval()


def run(model, ids, cached):
    from transformers import DynamicCache

    with torch.no_grad():
        whole = model(ids).logits[:, -1]
        cache = DynamicCache(config=model.config)
        model(ids[:, :cached], past_key_values=cache, use_cache=True)
        suffix = model(ids[:, cached:], past_key_values=cache, use_cache=True).logits[:, -1]
        step = model(ids[:, -1:], past_key_values=cache, use_cache=True).logits[:, -1]
    return whole, suffix, step


def test_rangekv_sdpa_equals_sdpa():
    ids = torch.randint(0, 512, (2, 300), generator=torch.Generator().manual_seed(3))
    ref = run(llama("sdpa"), ids, 200)
    got = run(llama(attention.register()), ids, 200)
    for what, a, b in zip(("whole prompt", "suffix over cache", "decode step"), ref, got):
        assert torch.equal(a, b), what
    # The suffix over the cache is the whole prompt's last position (up to float rounding).
    torch.testing.assert_close(got[1], got[0], rtol=1e-4, atol=1e-4)


def test_padding_mask_is_kept():
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, :20] = 0  # left padding in the second row
    with torch.no_grad():
        ref = llama("sdpa")(ids, attention_mask=mask).logits[:, -1]
        got = llama(attention.register())(ids, attention_mask=mask).logits[:, -1]
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_register_is_idempotent():
    assert attention.register() == attention.register() == "rangekv_sdpa"


@pytest.mark.parametrize("heads,kv_heads,past,q", [(8, 2, 40, 24), (4, 4, 1, 7), (6, 3, 100, 2)])
def test_split_attention_is_lower_right_causal_attention(heads, kv_heads, past, q):
    from torch.nn.attention.bias import causal_lower_right

    g = torch.Generator().manual_seed(past + q)
    query = torch.randn(2, heads, q, 16, generator=g)
    key = torch.randn(2, kv_heads, past + q, 16, generator=g)
    value = torch.randn(2, kv_heads, past + q, 16, generator=g)
    rep = heads // kv_heads
    ref = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1),
        attn_mask=causal_lower_right(q, past + q))
    got = attention.split_attention(query, key, value)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # A wrong weighting of the two parts (here: the prefix alone) is far off.
    prefix_only = torch.nn.functional.scaled_dot_product_attention(
        query, key[:, :, :past].repeat_interleave(rep, 1),
        value[:, :, :past].repeat_interleave(rep, 1))
    assert (prefix_only - ref).abs().max() > 1e-2


def test_split_attention_needs_a_prefix():
    x = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="needs a prefix"):
        attention.split_attention(x, x, x)


def test_model_with_split_attention_matches(monkeypatch):
    ids = torch.randint(0, 512, (2, 300), generator=torch.Generator().manual_seed(5))
    ref = run(llama(attention.register()), ids, 200)
    monkeypatch.setattr(attention, "SPLIT", "on")
    attention.PATHS.clear()
    got = run(llama(attention.register()), ids, 200)
    assert attention.PATHS["split: prefix + square causal, merged"] == 2  # the suffix, both layers
    for what, a, b in zip(("whole prompt", "suffix over cache", "decode step"), ref, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4, msg=what)


def test_split_refused_by_the_kernels_falls_back_to_one_lower_right_call(monkeypatch):
    ids = torch.randint(0, 512, (2, 300), generator=torch.Generator().manual_seed(6))
    ref = run(llama(attention.register()), ids, 200)

    def refuse(*a, **k):
        raise RuntimeError("no kernel for these inputs")

    monkeypatch.setattr(attention, "SPLIT", "on")
    monkeypatch.setattr(attention, "_attend_with_lse", refuse)
    attention.PATHS.clear()
    got = run(llama(attention.register()), ids, 200)
    assert attention.PATHS["split refused by the kernels"] == 2
    for what, a, b in zip(("whole prompt", "suffix over cache", "decode step"), ref, got):
        assert torch.equal(a, b), what
