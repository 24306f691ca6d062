"""rangekv.hf: a tiny random Llama generating through RangeKVCache, with the real engine.

Every test compares greedy generation against transformers' own DynamicCache recomputing the
whole prompt: tokens identical, logits within bf16 tolerance. The restored KV reaches the
paged pool through RangeKV's scatter and the stored KV leaves it through RangeKV's gather.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
rangekv = pytest.importorskip("rangekv")
pytest.importorskip("rangekv._core")

from rangekv.hf import PagedKvPool, attention, engine_for_model, generate, reference_generate  # noqa: E402 - after the importorskips

VOCAB = 512
BLOCK = 16
# 2 layers x 2 KV heads x 64 x bf16: 512 bytes per token per layer; W = 64 KiB -> 128 tokens per
# stripe, so a few hundred tokens span several packs.
STRIPE = 64 << 10


def tiny_llama(attn="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        initializer_range=0.05,
    )
    cfg._attn_implementation = attention.register() if attn == "rangekv" else attn
    return LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


# Every test under transformers' sdpa and under rangekv_sdpa (the suffix over the cached prefix
# without a materialised mask): both must reproduce the recomputed generation.
@pytest.fixture(scope="module", params=["sdpa", "rangekv"])
def model(request):
    with torch.no_grad():
        yield tiny_llama(request.param)


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


def make_pool(model, reverse=True):
    pool = PagedKvPool.for_model(model.config, num_blocks=96, block_size=BLOCK,
                                 dtype=torch.bfloat16)
    if reverse:
        # Blocks handed out in descending order: a request's slots are not consecutive, so the
        # cache's gather path (not the view path) and the engine's per-block scatter are used.
        pool._free.reverse()
    return pool


def make_engine(model, store_dir, **opts):
    options = dict(
        device="host",
        stripe_bytes=STRIPE,
        capacity_bytes=64 * 2 * STRIPE,
        max_request_tokens=4096,
        read_banks=4,
        prefetch_banks=2,
        store_banks=2,
        max_inflight_restores=4,
        max_inflight_stores=4,
        checksum="always",
    )
    options.update(opts)
    return engine_for_model(model.config, store_dir, block_size=BLOCK, dtype=torch.bfloat16,
                            model=model, **options)


def tokens(seed, n):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g)


def assert_same_generation(got, ref):
    assert got.tokens == ref.tokens
    for a, b in zip(got.logits, ref.logits):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_paged_cache_recompute_matches_dynamic_cache(model):
    pool = make_pool(model)
    prompt = tokens(1, 200)
    ref = reference_generate(model, prompt, max_new_tokens=4)
    got = generate(model, prompt, pool=pool, max_new_tokens=4)
    assert_same_generation(got, ref)
    assert pool.free_blocks == pool.num_blocks  # blocks returned


def test_resident_prefix_matches_recompute(model):
    pool = make_pool(model, reverse=False)  # consecutive slots: the view path
    prompt = tokens(2, 200)
    first = generate(model, prompt[:128], pool=pool, max_new_tokens=1, keep_blocks=True)
    got = generate(model, prompt, pool=pool, max_new_tokens=4, resident_blocks=first.blocks,
                   resident_tokens=128)
    assert_same_generation(got, reference_generate(model, prompt, max_new_tokens=4))


@pytest.mark.parametrize("store_mode", ["forward", "layer"], ids=["plain", "layerwise"])
def test_restored_prefix_matches_recompute(model, tmp_path, store_mode):
    pool = make_pool(model)
    prefix = tokens(3, 192)
    a = torch.cat([prefix, tokens(4, 40)])
    b = torch.cat([prefix, tokens(5, 50)])
    assert a[192] != b[192]
    with make_engine(model, tmp_path / "store") as eng:
        first = generate(model, a, pool=pool, engine=eng, request_id="a", granularity=16,
                         store_mode=store_mode, max_new_tokens=2)
        assert first.hit_tokens == 0
        assert first.store_disposition == "storing" and first.store_ok
        assert first.store_work["gather_launches"] >= 1

        got = generate(model, b, pool=pool, engine=eng, request_id="b", granularity=16,
                       store_mode=store_mode, max_new_tokens=4)
        assert got.hit_tokens == 192 and got.restored_tokens == 192
        assert got.restore_ok and got.restore_failed == []
        assert got.restore_work["scatter_launches"] >= 1
        assert got.restore_work["ready_events"] == 2
        assert got.store_ok
        assert_same_generation(got, reference_generate(model, b, max_new_tokens=4))

        # The same prompt again: now the prompt itself is cached (never its last token).
        again = generate(model, b, pool=pool, engine=eng, request_id="b2", granularity=16,
                         store_mode=store_mode, max_new_tokens=4)
        assert again.hit_tokens == (b.numel() - 1) // 16 * 16
        assert again.store_disposition in ("cached", "joined", "storing")
        assert_same_generation(again, reference_generate(model, b, max_new_tokens=4))
        assert eng.stats()["payload_allocations"] == 0


def test_partial_hit(model, tmp_path):
    pool = make_pool(model)
    full = tokens(6, 260)
    with make_engine(model, tmp_path / "store") as eng:
        generate(model, full[:101], pool=pool, engine=eng, request_id="short", granularity=16,
                 max_new_tokens=1)
        # 101 tokens stored; a granularity of 32 rounds the hit down inside the record.
        got = generate(model, full, pool=pool, engine=eng, request_id="long", granularity=32,
                       max_new_tokens=3)
        assert got.hit_tokens == 96 and got.restored_tokens == 96 and got.restore_ok
        assert_same_generation(got, reference_generate(model, full, max_new_tokens=3))
        # An endpoint below the hit restores only that much.
        clipped = generate(model, full, pool=pool, engine=eng, request_id="clip", granularity=16,
                           endpoint_tokens=48, max_new_tokens=3)
        assert clipped.hit_tokens == 48 and clipped.restore_ok
        assert_same_generation(clipped, reference_generate(model, full, max_new_tokens=3))


def _flip_token_byte(pack_path, pool, slot, layer):
    """Flips the first byte of the stored row (K then V) of the token held in pool `slot`."""
    flat = pool.flat(layer)
    row = torch.cat([flat[0, slot].reshape(-1), flat[1, slot].reshape(-1)])
    needle = row.view(torch.uint8).numpy().tobytes()
    data = open(pack_path, "rb").read()
    at = data.find(needle)
    assert at >= 0, "stored token row not found in the pack file"
    assert data.find(needle, at + 1) < 0, "stored token row is not unique"
    fd = os.open(pack_path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes([data[at] ^ 0x5A]), at)
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("layer", [0, 1])
def test_failed_span_falls_back_to_recompute(model, tmp_path, layer):
    pool = make_pool(model)
    a = tokens(7, 300)
    b = torch.cat([a, tokens(8, 30)])
    store_dir = tmp_path / "store"
    with make_engine(model, store_dir, checksum="always") as eng:
        first = generate(model, a, pool=pool, engine=eng, request_id="a", granularity=16,
                         max_new_tokens=1, keep_blocks=True)
        assert first.store_ok
        # Token 130 lies in the record of path tokens [128, 256) (128 tokens per stripe).
        slot = first.blocks[130 // BLOCK] * BLOCK + 130 % BLOCK
        _flip_token_byte(store_dir / "packs.rkv", pool, slot, layer)
        pool.free(first.blocks)
        before = eng.stats()

        got = generate(model, b, pool=pool, engine=eng, request_id="b", granularity=16,
                       max_new_tokens=4)
        if got.claim_retried:
            # Found by the lookup's prefetch, before the claim: the pack was dropped, the claim
            # was stale, and the second lookup stops before the corrupt record.
            assert "stale" in (got.restore_error or "").lower()
            assert got.hit_tokens == 128 and got.restore_ok and got.restored_tokens == 128
        else:
            # Found while restoring: exactly that record's tokens fail.
            assert got.hit_tokens == 288
            assert got.restore_ok is False
            assert got.restore_failed and got.restore_failed[0][0] == 128
            assert "orrupt" in (got.restore_error or "")
            # Tokens before the failed record were restored, the rest recomputed.
            assert got.restored_tokens == 128
            assert got.recomputed_prefix_tokens == 160
        assert eng.stats()["checksum_failures"] > before["checksum_failures"]
        assert_same_generation(got, reference_generate(model, b, max_new_tokens=4))

        # The corrupt record was dropped and the recomputed tokens stored again: a later
        # request restores everything, correctly.
        again = generate(model, b, pool=pool, engine=eng, request_id="b2", granularity=16,
                         max_new_tokens=4)
        assert again.restore_ok and again.restored_tokens >= 288
        assert_same_generation(again, reference_generate(model, b, max_new_tokens=4))
