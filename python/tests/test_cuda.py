"""The binding on the CUDA device: torch CUDA tensors through DLPack, producer streams and
stream waits, device checks. Skips unless torch sees a GPU and the package was built with CUDA
(RANGEKV_CUDA=ON|AUTO at build time); `bash scripts/gpu/run.sh tests` runs it on the GPU machine."""

from __future__ import annotations

import numpy as np
import pytest

import rangekv

from conftest import B, L, engine_kwargs, env, physical_shape, random_layers, token_rows

torch = pytest.importorskip("torch", reason="torch is not installed: CUDA tests skip")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

N = 16


@pytest.fixture
def cuda_engine(tmp_path):
    def make(layout="flash_attn_nhd"):
        try:
            return rangekv.Engine(str(tmp_path / layout), **engine_kwargs(layout, device="cuda"))
        except rangekv.NotSupported as e:
            pytest.skip(f"the engine has no CUDA device in this build: {e}")

    return make


def to_cuda_bf16(a: np.ndarray):
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()


@pytest.mark.parametrize("layout", ["flash_attn_nhd", "flash_attn_hnd", "flashinfer_nhd",
                                    "flashinfer_hnd"])
def test_cuda_roundtrip_with_streams(cuda_engine, layout):
    eng = cuda_engine(layout)
    assert "device=host" not in eng.backends and eng.backends.startswith("device="), eng.backends
    rng = np.random.default_rng(51)
    src_np = random_layers(layout, N, seed=52)
    src = [to_cuda_bf16(a) for a in src_np]
    tokens = list(range(100))
    store_slots = rng.permutation(N * B)[:100]
    producer = torch.cuda.Stream()
    s = eng.begin_store(env("s"), tokens, src, store_slots)
    for layer in range(L):
        s.layer_produced(layer, producer)  # gathers wait on the producer stream
    assert s.finish().ok
    e = env("r")
    hit, ticket = eng.lookup(tokens, e, B)
    assert hit == 96
    h = eng.start_restore(ticket, e, tokens)
    dst = [torch.zeros(physical_shape(layout, N), dtype=torch.bfloat16, device="cuda")
           for _ in range(L)]
    slots = torch.from_numpy(rng.permutation(N * B)[:hit])
    h.bind_slots(dst, slots)
    model = torch.cuda.Stream()
    for layer in range(L):
        h.stream_wait_layer(layer, model if layer % 2 else model.cuda_stream)
    model.synchronize()
    out = h.finish()
    assert out.ok, out
    for layer in range(L):
        assert np.array_equal(token_rows(layout, src_np[layer], store_slots[:hit]),
                              token_rows(layout, dst[layer].cpu(), slots.numpy()))


def test_cuda_engine_refuses_host_tensors_and_device_slot_mappings(cuda_engine):
    eng = cuda_engine()
    cpu = [torch.zeros(physical_shape("flash_attn_nhd", N), dtype=torch.bfloat16)] * L
    with pytest.raises(rangekv.InvalidArgument, match="is on cpu.*cuda:0"):
        eng.begin_store(env("s"), list(range(32)), cpu, list(range(32)))
    gpu = [to_cuda_bf16(a) for a in random_layers("flash_attn_nhd", N, seed=53)]
    with pytest.raises(rangekv.InvalidArgument, match=r"\.cpu\(\)"):
        eng.begin_store(env("s"), list(range(32)), gpu, torch.arange(32, device="cuda"))
    with pytest.raises(rangekv.InvalidArgument, match="stream"):
        s = eng.begin_store(env("s2"), list(range(32)), gpu, list(range(32)))
        try:
            s.layer_produced(0, "not a stream")
        finally:
            s.finish()
