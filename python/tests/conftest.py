"""Fixtures and helpers of the rangekv Python tests (python/tests/, not the vLLM tests).

A small geometry keeps everything fast: L=4 layers, H=2 KV heads of D=16, block size B=16,
bf16 (s = 128 bytes per token per layer), stripes of W=4096 bytes (T=32 tokens), on the host
device. Layer tensors are built in each layout's physical order with numpy (uint16 = raw bf16
bits) or torch; `token_rows` reads back one token's bytes of a layer in a canonical order so a
store from one slot mapping and a restore into another compare bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import rangekv

L, H, D, B = 4, 2, 16, 16
LATENT = 32
W = 4096

# name -> (physical dims, logical dims); the binding's table (python/src/layouts.cc).
LAYOUTS = {
    "flash_attn_nhd": ("2NBHD", "2NBHD"),
    "flash_attn_hnd": ("2NHBD", "2NBHD"),
    "flashinfer_nhd": ("N2BHD", "N2BHD"),
    "flashinfer_hnd": ("N2HBD", "N2BHD"),
    "mla": ("NBL", "NBL"),
    "packed_nhd": ("NBHP", "NHBP"),
    "packed_hnd": ("NHBP", "NHBP"),
    "cpu_block": ("NHBP", "NHBP"),
}
def layout_param(name: str):
    return pytest.param(name, id=name)


ALL_LAYOUTS = [layout_param(n) for n in LAYOUTS]


def dims(layout: str, order: str, n: int) -> tuple[int, ...]:
    size = {"2": 2, "N": n, "B": B, "H": H, "D": D, "P": 2 * D, "L": LATENT}
    return tuple(size[c] for c in order)


def physical_shape(layout: str, n: int) -> tuple[int, ...]:
    return dims(layout, LAYOUTS[layout][0], n)


def engine_kwargs(layout: str = "flash_attn_nhd", **over):
    kw = dict(layers=L, kv_heads=H, head_size=D, dtype="bfloat16", block_size=B, layout=layout,
              stripe_bytes=W, capacity_bytes=64 * L * W, device="host", layer_group=2,
              read_banks=4, prefetch_banks=2, store_banks=4, max_request_tokens=4096)
    if layout == "mla":
        kw.update(mla_latent_size=LATENT)
    kw.update(over)
    return kw


@pytest.fixture
def store_dir(tmp_path):
    d = tmp_path / "store"
    return str(d)


@pytest.fixture
def make_engine(store_dir):
    engines = []

    def make(layout: str = "flash_attn_nhd", directory: str | None = None, **over):
        e = rangekv.Engine(directory or store_dir, **engine_kwargs(layout, **over))
        engines.append(e)
        return e

    yield make
    for e in engines:
        e.close()


def random_layers(layout: str, n: int, seed: int, dtype=np.uint16) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    out = []
    for _ in range(L):
        if info is not None:
            a = rng.integers(0, int(info.max) + 1, size=physical_shape(layout, n), dtype=dtype)
        else:
            a = rng.integers(0, 1 << 16, size=physical_shape(layout, n), dtype=np.uint16)
            a = a.view(np.float16) if dtype == np.float16 else a.astype(dtype)
        out.append(a)
    return out


def zero_layers(layout: str, n: int, dtype=np.uint16) -> list[np.ndarray]:
    return [np.zeros(physical_shape(layout, n), dtype=dtype) for _ in range(L)]


def as_numpy(t) -> np.ndarray:
    """A physical-order numpy view of a layer (numpy array or torch tensor, any int/bf16)."""
    if isinstance(t, np.ndarray):
        return t
    import torch

    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.contiguous().numpy()


def token_rows(layout: str, layer, slots) -> np.ndarray:
    """The bytes of each slot's token in `layer` (physical order), canonical [n, ...]."""
    p = as_numpy(layer)
    phys = LAYOUTS[layout][0]
    rows = []
    for s in np.asarray(slots, dtype=np.int64):
        b, o = divmod(int(s), B)
        if phys == "2NBHD":
            r = p[:, b, o]
        elif phys == "2NHBD":
            r = p[:, b, :, o]
        elif phys == "N2BHD":
            r = p[b, :, o]
        elif phys == "N2HBD":
            r = p[b, :, :, o]
        elif phys == "NBL":
            r = p[b, o]
        elif phys == "NBHP":
            r = p[b, o]
        else:  # NHBP
            r = p[b, :, o]
        rows.append(np.ascontiguousarray(r).view(np.uint8).ravel())
    return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.uint8)


def block_bytes(layer, blocks) -> np.ndarray:
    p = as_numpy(layer)
    return np.stack([np.ascontiguousarray(p[b]).view(np.uint8).ravel() for b in blocks])


def env(name: str, **kw) -> rangekv.Envelope:
    return rangekv.Envelope(name, **kw)


def store_all(eng, tokens, layers, slots, name="store"):
    s = eng.begin_store(env(name), tokens, layers, slots)
    for layer in range(L):
        s.layer_produced(layer)
    out = s.finish()
    assert out.ok, out
    return out


def restore(eng, tokens, dst, slots_fn, name="restore", granularity=B, begin_token=0,
            endpoint=None):
    """lookup + start_restore + bind + wait every layer + finish; returns (hit, outcome,
    slots)."""
    e = env(name)
    hit, ticket = eng.lookup(tokens, e, granularity)
    assert hit > 0, "expected a hit"
    h = eng.start_restore(ticket, e, tokens, begin_token, endpoint)
    begin, end = h.tokens
    slots = slots_fn(end - begin)
    h.bind_slots(dst, slots)
    for layer in range(L):
        h.wait_layer(layer)
    out = h.finish()
    return hit, out, slots


def pytest_report_header(config):
    try:
        import torch

        t = f"torch {torch.__version__}"
    except ImportError:
        t = "torch absent (torch tests skip)"
    return [f"rangekv {rangekv.__version__} from {os.path.dirname(rangekv.__file__)}; {t}"]
