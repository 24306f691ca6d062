"""Layers that are strided views (vLLM's cross-layer KV cache) and the connector's layout mapping.

vLLM 0.25's FlashAttention/FlashInfer backends can allocate one tensor for every layer, physical
[N, L, 2, B, H, D] (NHD) or [N, H, L, 2, B, D] (HND), and hand each layer as a strided view of
logical shape [N, 2, B, H, D]. The engine takes such views with explicit strides: a store from
them and a restore into them move the same bytes as dense layers, every layer lands only in its
own positions, and views that would share a byte are refused. The same tests run on CUDA
tensors when torch sees a GPU (scripts/gpu/run.sh).
"""

from __future__ import annotations

import numpy as np
import pytest

import rangekv

from conftest import B, D, H, L, engine_kwargs, env, random_layers, token_rows

torch = pytest.importorskip("torch", reason="torch is not installed")

N = 12
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def cross_layer(hnd: bool, device: str, fill: int | None = None, seed: int = 0):
    """A cross-layer allocation and its per-layer logical [N, 2, B, H, D] views (int16 bits)."""
    shape = (N, H, L, 2, B, D) if hnd else (N, L, 2, B, H, D)
    g = torch.Generator().manual_seed(seed)
    whole = (torch.full(shape, fill, dtype=torch.int16) if fill is not None else
             torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16, generator=g))
    whole = whole.to(device).view(torch.bfloat16)
    if hnd:  # [N, H, L, 2, B, D] -> layer i: [N, 2, B, H, D]
        layers = [whole[:, :, i].permute(0, 2, 3, 1, 4) for i in range(L)]
    else:
        layers = [whole[:, i] for i in range(L)]
    return whole, layers


def rows(layer: torch.Tensor, slots) -> np.ndarray:
    """Each slot's token bytes of a logical [N, 2, B, H, D] layer: K heads then V heads."""
    p = layer.cpu().contiguous().view(torch.int16).numpy()
    out = []
    for s in np.asarray(slots, dtype=np.int64):
        b, o = divmod(int(s), B)
        out.append(np.ascontiguousarray(p[b, :, o]).view(np.uint8).ravel())
    return np.stack(out)


def make(tmp_path, device: str, name: str, layout: str = "flashinfer_nhd"):
    try:
        return rangekv.Engine(str(tmp_path / name), **engine_kwargs(layout, device=device))
    except rangekv.NotSupported as e:
        pytest.skip(f"the engine has no {device} device in this build: {e}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hnd", [False, True], ids=["nhd", "hnd"])
def test_cross_layer_views_store_and_restore_bit_for_bit(tmp_path, device, hnd):
    eng = make(tmp_path, "host" if device == "cpu" else "cuda", f"x-{hnd}")
    rng = np.random.default_rng(7)
    _, src = cross_layer(hnd, device, seed=3)
    tokens = list(range(150))
    store_slots = rng.permutation(N * B)[:150]
    s = eng.begin_store(env("s"), tokens, src, store_slots)
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    e = env("r")
    hit, ticket = eng.lookup(tokens, e, B)
    assert hit == 144
    h = eng.start_restore(ticket, e, tokens)
    whole, dst = cross_layer(hnd, device, fill=0x5A5A)
    slots = rng.permutation(N * B)[:hit]
    h.bind_slots(dst, slots)
    for layer in range(L):
        h.wait_layer(layer)
    assert h.finish().ok
    for layer in range(L):
        np.testing.assert_array_equal(rows(dst[layer], slots), rows(src[layer], store_slots[:hit]))
    # Nothing else was written: every position outside the restored slots keeps its fill.
    untouched = whole.view(torch.int16).cpu().numpy().copy()
    for layer in range(L):
        view = (untouched[:, :, layer].transpose(0, 2, 3, 1, 4) if hnd else untouched[:, layer])
        for sl in slots:
            b, o = divmod(int(sl), B)
            view[b, :, o] = 0x5A5A
    assert (untouched == 0x5A5A).all()


@pytest.mark.parametrize("device", DEVICES)
def test_dense_store_restores_into_cross_layer_views(tmp_path, device):
    """The stripe format does not depend on the paged memory's order: a prefix stored from dense
    [N, 2, B, H, D] layers restores into a cross-layer allocation (and back)."""
    eng = make(tmp_path, "host" if device == "cpu" else "cuda", "mixed")
    src = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
           for a in random_layers("flashinfer_nhd", N, seed=9)]
    tokens = list(range(64))
    s = eng.begin_store(env("s"), tokens, src, list(range(64)))
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    e = env("r")
    hit, ticket = eng.lookup(tokens, e, B)
    h = eng.start_restore(ticket, e, tokens)
    _, dst = cross_layer(True, device, fill=0)
    slots = list(range(N * B - hit, N * B))
    h.bind_slots(dst, slots)
    assert h.finish().ok
    for layer in range(L):
        want = token_rows("flashinfer_nhd", src[layer].cpu().view(torch.int16).numpy(),
                          range(hit))
        np.testing.assert_array_equal(rows(dst[layer], slots), want)


def test_aliasing_views_are_refused_and_nothing_is_written(tmp_path):
    eng = make(tmp_path, "host", "alias")
    _, src = cross_layer(False, "cpu", seed=1)
    tokens = list(range(32))
    s = eng.begin_store(env("s"), tokens, src, list(range(32)))
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    whole, dst = cross_layer(False, "cpu", fill=0)
    e = env("r")
    hit, ticket = eng.lookup(tokens, e, B)
    h = eng.start_restore(ticket, e, tokens)
    aliased = [dst[0], dst[0]] + dst[2:]  # two layers at one place
    with pytest.raises(rangekv.InvalidArgument, match="share bytes"):
        h.bind_slots(aliased, list(range(hit)))
    h.cancel()
    assert (whole.view(torch.int16) == 0).all()
    # Layers that mix dense and strided memory, or differ in strides, are refused too.
    dense = torch.zeros((N, 2, B, H, D), dtype=torch.bfloat16)
    with pytest.raises(rangekv.InvalidArgument, match="same memory order"):
        eng.begin_store(env("s2"), tokens, [dst[0], dense] + dst[2:], list(range(32)))
    _, hnd_layers = cross_layer(True, "cpu", fill=0)
    with pytest.raises(rangekv.InvalidArgument, match="same strides"):
        eng.begin_store(env("s3"), tokens, [dst[0], hnd_layers[1]] + dst[2:], list(range(32)))


# ---- the connector's mapping of vLLM's tensors (rangekv.vllm.layouts) -------------------------

def _layouts():
    return pytest.importorskip("rangekv.vllm.layouts")


def _as(shape, physical_order):
    """A tensor of logical `shape` whose memory is dense in `physical_order` (dims of shape)."""
    phys = torch.zeros([shape[i] for i in physical_order], dtype=torch.bfloat16)
    inverse = [physical_order.index(i) for i in range(len(shape))]
    return phys.permute(*inverse)


@pytest.mark.parametrize("shape,order,want", [
    # vLLM 0.25 FlashAttention / FlashInfer / Triton: (N, 2, B, H, D)
    ((64, 2, B, 4, 64), (0, 1, 2, 3, 4), "flashinfer_nhd"),
    ((64, 2, B, 4, 64), (0, 1, 3, 2, 4), "flashinfer_hnd"),
    # planes outermost: (2, N, B, H, D)
    ((2, 64, B, 4, 64), (0, 1, 2, 3, 4), "flash_attn_nhd"),
    ((2, 64, B, 4, 64), (0, 1, 3, 2, 4), "flash_attn_hnd"),
    # packed (N, H, B, 2D)
    ((64, 4, B, 128), (0, 1, 2, 3), "packed_hnd"),
    ((64, 4, B, 128), (0, 2, 1, 3), "packed_nhd"),
])
def test_connector_maps_gpu_layouts_by_shape_and_strides(shape, order, want):
    spec = _layouts().describe_layout(_as(shape, order), B, cuda=True)
    assert spec.layout == want and not spec.strided, spec


def test_connector_maps_cross_layer_views_as_strided():
    layouts = _layouts()
    _, nhd = cross_layer(False, "cpu", fill=0)
    _, hnd = cross_layer(True, "cpu", fill=0)
    for views in (nhd, hnd):
        spec = layouts.describe_layout(views[1], B, cuda=True)
        assert spec.strided and spec.layout == "flashinfer_nhd", spec
        assert (spec.heads, spec.head_size) == (H, D)


@pytest.mark.parametrize("shape,order", [
    ((64, 2, B, 4, 64), (0, 1, 2, 4, 3)),     # head vectors not contiguous
    ((2, 2, B, 4, 64), (0, 1, 2, 3, 4)),      # planes or blocks first: ambiguous
    ((64, 3, B, 4, 64), (0, 1, 2, 3, 4)),     # no K/V dimension
    ((64, B, 4), (0, 2, 1)),                  # 3-D, not [N, B, latent] order
])
def test_connector_refusal_names_shape_and_strides(shape, order):
    t = _as(shape, order)
    with pytest.raises(ValueError) as e:
        _layouts().describe_layout(t, B, cuda=True)
    assert f"shape {tuple(t.shape)}" in str(e.value)
    assert f"strides {tuple(t.stride())}" in str(e.value)


@pytest.mark.parametrize("shape", [(64, B, 576), (64, 1, B, 576)])
def test_connector_maps_mla_layers(shape):
    spec = _layouts().describe_layout(torch.zeros(shape, dtype=torch.bfloat16), B, mla=True,
                                      cuda=True)
    assert spec.layout == "mla" and spec.head_size == 576
    assert spec.engine_args(8)["mla_latent_size"] == 576
    assert tuple(spec.view(torch.zeros(shape)).shape) == (64, B, 576)
    # Without the model's MLA flag a 4-D [N, 1, B, 576] would read as packed K|V: the flag decides.
    with pytest.raises(ValueError, match="MLA"):
        _layouts().describe_layout(torch.zeros((64, B, 2, 576)), B, mla=True, cuda=True)
