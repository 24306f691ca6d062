"""Store / restore through Python, bit for bit, for every layout and tensor kind; partial and
divergent hits; dispositions; persistence across reopen."""

from __future__ import annotations

import numpy as np
import pytest

import rangekv

from conftest import (
    ALL_LAYOUTS,
    LAYOUTS,
    B,
    L,
    W,
    block_bytes,
    dims,
    env,
    physical_shape,
    random_layers,
    restore,
    store_all,
    token_rows,
    zero_layers,
)

N = 16  # blocks per layer tensor: 256 slots


def block_aligned_slots(n_tokens: int, rng, n_blocks: int = N) -> np.ndarray:
    blocks = rng.permutation(n_blocks)[: (n_tokens + B - 1) // B]
    return (blocks[:, None] * B + np.arange(B)).ravel()[:n_tokens].astype(np.int64)




@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_roundtrip_numpy(make_engine, layout):
    rng = np.random.default_rng(1)
    eng = make_engine(layout)
    src = random_layers(layout, N, seed=2)
    tokens = rng.integers(0, 50000, size=100).tolist()
    if layout == "cpu_block":
        store_slots = block_aligned_slots(100, rng)
    else:
        store_slots = rng.permutation(N * B)[:100]
    store_all(eng, tokens, src, store_slots)
    dst = zero_layers(layout, N)
    pick = (lambda n: block_aligned_slots(n, rng)) if layout == "cpu_block" else (
        lambda n: rng.permutation(N * B)[:n])
    hit, out, slots = restore(eng, tokens, dst, pick)
    assert hit == 96 and out.ok and out.delivered_tokens == 96 and out.failed == []
    assert out.requested == (0, 96)
    for layer in range(L):
        if layout == "cpu_block":
            nb = 96 // B
            assert np.array_equal(block_bytes(src[layer], store_slots[: nb * B: B] // B),
                                  block_bytes(dst[layer], slots[: nb * B: B] // B))
        else:
            assert np.array_equal(token_rows(layout, src[layer], store_slots[:96]),
                                  token_rows(layout, dst[layer], slots))
            # Nothing outside the bound slots was written.
            untouched = np.setdiff1d(np.arange(N * B), slots)
            assert not token_rows(layout, dst[layer], untouched).any()


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_roundtrip_torch(make_engine, layout):
    torch = pytest.importorskip("torch", reason="torch is not installed: torch tensor tests skip")
    rng = np.random.default_rng(3)
    eng = make_engine(layout)
    src_np = random_layers(layout, N, seed=4)
    src = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in src_np]
    tokens = torch.tensor(rng.integers(0, 50000, size=70), dtype=torch.int64)
    if layout == "cpu_block":
        store_slots = torch.from_numpy(block_aligned_slots(70, rng))
    else:
        store_slots = torch.randperm(N * B)[:70]
    store_all(eng, tokens, src, store_slots)
    dst = [torch.zeros(physical_shape(layout, N), dtype=torch.bfloat16) for _ in range(L)]
    pick = (lambda n: torch.from_numpy(block_aligned_slots(n, rng))) if layout == "cpu_block" \
        else (lambda n: torch.randperm(N * B)[:n])
    hit, out, slots = restore(eng, tokens.to(torch.int32), dst, pick)
    assert hit == 64 and out.ok
    for layer in range(L):
        if layout == "cpu_block":
            # Compare bits: random bf16 bit patterns include NaNs, which torch.equal calls unequal.
            assert torch.equal(src[layer][store_slots[:64:B] // B].view(torch.int16),
                               dst[layer][slots[::B] // B].view(torch.int16))
        else:
            assert np.array_equal(token_rows(layout, src[layer], store_slots[:64].numpy()),
                                  token_rows(layout, dst[layer], slots.numpy()))


@pytest.mark.parametrize("layout", ["flash_attn_hnd", "flashinfer_hnd"])
def test_logical_views_of_hnd_memory(make_engine, layout):
    """vLLM hands HND caches as logical (.., B, H, D) views over (.., H, B, D) memory."""
    phys, logi = LAYOUTS[layout]
    perm = [phys.index(c) for c in logi]
    rng = np.random.default_rng(5)
    eng = make_engine(layout)
    src = random_layers(layout, N, seed=6)
    src_views = [a.transpose(perm) for a in src]
    assert src_views[0].shape == dims(layout, logi, N) and not src_views[0].flags.c_contiguous
    tokens = list(range(1000, 1050))
    store_slots = rng.permutation(N * B)[:50]
    store_all(eng, tokens, src_views, store_slots)
    dst = zero_layers(layout, N)
    hit, out, slots = restore(eng, tokens, [d.transpose(perm) for d in dst],
                              lambda n: rng.permutation(N * B)[:n])
    assert out.ok and hit == 48
    for layer in range(L):
        assert np.array_equal(token_rows(layout, src[layer], store_slots[:48]),
                              token_rows(layout, dst[layer], slots))


@pytest.mark.parametrize("dtype,np_dtype", [("float16", np.float16), ("float32", np.float32),
                                            ("fp8", np.uint8), ("fp8_e5m2", np.int8)])
def test_other_dtypes(make_engine, dtype, np_dtype):
    rng = np.random.default_rng(7)
    eng = make_engine("flash_attn_nhd", dtype=dtype)
    assert eng.geometry["dtype_bytes"] == np.dtype(np_dtype).itemsize
    src = random_layers("flash_attn_nhd", N, seed=8, dtype=np_dtype)
    tokens = list(range(40))
    store_slots = rng.permutation(N * B)[:40]
    store_all(eng, tokens, src, store_slots)
    dst = zero_layers("flash_attn_nhd", N, dtype=np_dtype)
    hit, out, slots = restore(eng, tokens, dst, lambda n: rng.permutation(N * B)[:n])
    assert out.ok and hit == 32
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", src[layer], store_slots[:32]),
                              token_rows("flash_attn_nhd", dst[layer], slots))


def test_partial_hit_with_local_prefix_and_endpoint(make_engine):
    rng = np.random.default_rng(9)
    eng = make_engine()
    src = random_layers("flash_attn_nhd", N, seed=10)
    path = list(range(5000, 5100))
    store_slots = rng.permutation(N * B)[:64]
    store_all(eng, path[:64], src, store_slots)  # only the first 64 tokens are cached
    dst = zero_layers("flash_attn_nhd", N)
    # The serving engine holds tokens [0, 16) itself and wants [16, 48) of the 64-token hit.
    hit, out, slots = restore(eng, path, dst, lambda n: rng.permutation(N * B)[:n],
                              begin_token=16, endpoint=48)
    assert hit == 64 and out.ok and out.requested == (16, 48) and out.delivered_tokens == 32
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", src[layer], store_slots[16:48]),
                              token_rows("flash_attn_nhd", dst[layer], slots))


def test_divergent_paths_share_their_prefix(make_engine):
    rng = np.random.default_rng(11)
    eng = make_engine()
    a = list(range(100))
    b = a[:40] + list(range(9000, 9060))
    src_a = random_layers("flash_attn_nhd", N, seed=12)
    slots_a = rng.permutation(N * B)[:100]
    store_all(eng, a, src_a, slots_a, name="a")
    dst = zero_layers("flash_attn_nhd", N)
    hit, out, slots = restore(eng, b, dst, lambda n: rng.permutation(N * B)[:n], name="b")
    assert hit == 32 and out.ok  # 40 shared tokens, rounded down to the block size
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", src_a[layer], slots_a[:32]),
                              token_rows("flash_attn_nhd", dst[layer], slots))
    # Storing b adds only its uncached suffix; then b hits in full (minus the last token).
    src_b = random_layers("flash_attn_nhd", N, seed=13)
    slots_b = rng.permutation(N * B)[:100]
    s = eng.begin_store(env("b-store"), b, src_b, slots_b)
    assert s.disposition == "storing" and s.stored_tokens[0] >= 32
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    assert eng.lookup(b, env("b2"), B)[0] == 96


def test_second_store_of_the_same_tokens_is_cached(make_engine):
    eng = make_engine()
    src = random_layers("flash_attn_nhd", N, seed=14)
    tokens = list(range(64))
    store_all(eng, tokens, src, list(range(64)))
    s = eng.begin_store(env("again"), tokens, src, list(range(64)))
    assert s.disposition == "cached" and s.extracted
    out = s.finish()
    assert out.ok and out.disposition == "cached" and out.stored == (0, 0)
    stats = eng.stats()
    assert stats["stores_cached"] == 1 and stats["stores_published"] == 1


def test_reopen_loads_the_index(store_dir, make_engine):
    rng = np.random.default_rng(15)
    eng = make_engine()
    ns = eng.namespace
    src = random_layers("flash_attn_nhd", N, seed=16)
    tokens = list(range(300, 380))
    store_slots = rng.permutation(N * B)[:80]
    store_all(eng, tokens, src, store_slots)
    eng.close()
    eng2 = make_engine()
    assert eng2.namespace == ns
    assert eng2.recovery["loaded"] and eng2.recovery["packs_loaded"] >= 1
    dst = zero_layers("flash_attn_nhd", N)
    hit, out, slots = restore(eng2, tokens, dst, lambda n: rng.permutation(N * B)[:n])
    assert hit == 64 and out.ok
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", src[layer], store_slots[:64]),
                              token_rows("flash_attn_nhd", dst[layer], slots))


def test_handles_keep_their_tensors_alive(make_engine):
    """The caller may drop its references right after begin_store / bind_slots."""
    rng = np.random.default_rng(17)
    eng = make_engine()
    src = random_layers("flash_attn_nhd", N, seed=18)
    copy = [a.copy() for a in src]
    tokens = list(range(64))
    store_slots = rng.permutation(N * B)[:64]
    s = eng.begin_store(env("s"), tokens, src, store_slots)
    del src
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    e = env("r")
    hit, ticket = eng.lookup(tokens + [1], e, B)
    h = eng.start_restore(ticket, e, tokens + [1])
    dst = zero_layers("flash_attn_nhd", N)
    keep = dst
    slots = rng.permutation(N * B)[:hit]
    h.bind_slots(list(dst), slots)
    del dst
    for layer in range(L):
        h.wait_layer(layer)
    assert h.finish().ok
    for layer in range(L):
        assert np.array_equal(token_rows("flash_attn_nhd", copy[layer], store_slots[:hit]),
                              token_rows("flash_attn_nhd", keep[layer], slots))


def test_engine_properties(make_engine):
    eng = make_engine("flashinfer_hnd", model_id="m", tags=("lora-1",))
    g = eng.geometry
    assert g["layers"] == L and g["token_bytes"] == 2 * 2 * 16 * 2
    assert g["layout"] == "flashinfer_hnd"
    assert g["tokens_per_stripe"] == 4096 // 128 and g["pack_bytes"] == L * 4096
    assert len(eng.namespace) == 32 and int(eng.namespace, 16) >= 0
    assert eng.backends.startswith("device=host") and eng.layout == "flashinfer_hnd"
    assert eng.recovery["created"] and eng.recovery["reason"] == "new_store"
    assert set(eng.stats()) >= {"lookups", "bytes_read", "bytes_written", "payload_allocations"}
    assert rangekv.__version__ == "0.1.0"
    assert set(rangekv.LAYOUTS) == set(LAYOUTS)


def test_envelope_is_frozen_and_picklable():
    import dataclasses
    import pickle

    e = rangekv.Envelope("req", session_id=3, attempt=1, rank=2)
    assert pickle.loads(pickle.dumps(e)) == e
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.rank = 5  # type: ignore[misc]


def test_evicted_packs_are_drained_as_removed_ranges(make_engine):
    """StoreOutcome.packs names the packs a store wrote; drain_removed_ranges names them again,
    with the path tokens they stopped serving, when eviction takes them (T = 32 tokens)."""
    rng = np.random.default_rng(7)
    eng = make_engine(capacity_bytes=3 * L * W)  # three packs
    src = random_layers("flash_attn_nhd", N, seed=8)
    a = store_all(eng, rng.integers(0, 50000, size=80).tolist(), src,
                  rng.permutation(N * B)[:80], name="a")
    assert [(b, e) for _, _, b, e in a.packs] == [(0, 32), (32, 64), (64, 80)]
    assert eng.drain_removed_ranges() == []
    # One more pack: the least recently used one without dependents, a's tail, makes room.
    store_all(eng, rng.integers(0, 50000, size=32).tolist(), src, rng.permutation(N * B)[:32],
              name="b")
    slot, gen, _, _ = a.packs[2]
    assert eng.drain_removed_ranges() == [(slot, gen, 64, 80, True)]
    assert eng.drain_removed_ranges() == []
    assert eng.stats()["removed_events_dropped"] == 0


def test_read_share_of_an_embedded_engine_is_its_full_counts(make_engine):
    # share_reads divides the read concurrency only by the readers a store service reports;
    # an embedded engine keeps its own counts, with share_reads or without (the default).
    # read_gate (on by default) too needs a store service: embedded, the engine reads ungated
    # (gate_slots 0), with it on or off.
    ungated = {"gate_slots": 0, "gate_passes": 0, "gate_waited": 0, "gate_timed_out": 0}
    e = make_engine(read_workers=3, read_io_threads=5, share_reads=True, read_gate=False)
    assert e.options["share_reads"] is True
    assert e.options["read_gate"] is False
    assert e.read_share() == {"readers": 1, "read_workers": 3, "read_io_threads": 5, **ungated}
    e.close()
    off = make_engine(read_workers=2, read_io_threads=4)
    assert off.options["share_reads"] is False
    assert off.options["read_gate"] is True
    assert off.read_share() == {"readers": 1, "read_workers": 2, "read_io_threads": 4, **ungated}
