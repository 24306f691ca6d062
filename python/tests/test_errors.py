"""Bad input at the Python boundary: each gets a clear rangekv.Error of the right class, and the
store stays intact (a good restore afterwards still delivers every byte)."""

from __future__ import annotations

import ctypes
import pickle

import numpy as np
import pytest

import rangekv
from rangekv import _core

from conftest import (
    B,
    L,
    engine_kwargs,
    env,
    physical_shape,
    random_layers,
    restore,
    store_all,
    token_rows,
    zero_layers,
)

N = 16
LAYOUT = "flash_attn_nhd"
TOKENS = list(range(2000, 2100))


@pytest.fixture
def stored(make_engine):
    """An engine holding TOKENS (stored from slots 0..99), the source layers, and a checker."""
    eng = make_engine(LAYOUT)
    src = random_layers(LAYOUT, N, seed=21)
    store_slots = np.arange(100)
    store_all(eng, TOKENS, src, store_slots)
    rng = np.random.default_rng(22)

    def check_intact(name="check"):
        dst = zero_layers(LAYOUT, N)
        hit, out, slots = restore(eng, TOKENS, dst, lambda n: rng.permutation(N * B)[:n],
                                  name=name)
        assert hit == 96 and out.ok, out
        for layer in range(L):
            assert np.array_equal(token_rows(LAYOUT, src[layer], store_slots[:96]),
                                  token_rows(LAYOUT, dst[layer], slots))

    return eng, src, check_intact


def claim(eng, name="claim", tokens=TOKENS):
    e = env(name)
    hit, ticket = eng.lookup(tokens, e, B)
    return e, hit, ticket, eng.start_restore(ticket, e, tokens)


class FakeCudaTensor:
    """A DLPack exporter that claims its memory is on cuda:0 (the data is host memory that is
    never touched: the device check must refuse it first)."""

    class _Device(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class _Dtype(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class _Tensor(ctypes.Structure):
        pass

    class _Managed(ctypes.Structure):
        pass

    _Tensor._fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                        ("dtype", _Dtype), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.POINTER(ctypes.c_int64)),
                        ("byte_offset", ctypes.c_uint64)]
    _Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                         ("deleter", ctypes.c_void_p)]

    def __init__(self, like: np.ndarray):
        self.backing = like
        self.shape = (ctypes.c_int64 * like.ndim)(*like.shape)
        self.mt = self._Managed()
        t = self.mt.dl_tensor
        t.data = like.ctypes.data
        t.device = self._Device(2, 0)  # kDLCUDA
        t.ndim = like.ndim
        t.dtype = self._Dtype(4, 16, 1)  # bfloat16
        t.shape = self.shape
        t.strides = None
        t.byte_offset = 0

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *args, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.mt), b"dltensor", None)


# ---- tensors -----------------------------------------------------------------------------


def test_wrong_dtype(stored):
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    bad = [np.zeros(physical_shape(LAYOUT, N), dtype=np.float32) for _ in range(L)]
    with pytest.raises(rangekv.GeometryMismatch, match="dtype float32.*bf16"):
        h.bind_slots(bad, np.arange(hit))
    with pytest.raises(rangekv.GeometryMismatch, match="dtype"):
        h.bind_slots([a.view(np.int16) for a in zero_layers(LAYOUT, N)], np.arange(hit))
    assert not h.bound
    h.cancel()
    h.finish()
    with pytest.raises(rangekv.GeometryMismatch, match="dtype"):
        eng.begin_store(env("s"), TOKENS, [np.zeros(a.shape, np.float16) for a in src],
                        np.arange(100))
    check()


def test_wrong_dtype_torch(stored):
    torch = pytest.importorskip("torch", reason="torch is not installed: torch tensor tests skip")
    eng, src, check = stored
    with pytest.raises(rangekv.GeometryMismatch, match="float16"):
        eng.begin_store(env("s"), list(range(64)),
                        [torch.zeros(physical_shape(LAYOUT, N), dtype=torch.float16)] * L,
                        list(range(64)))
    check()


def test_wrong_device(stored):
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    fake = [FakeCudaTensor(a) for a in zero_layers(LAYOUT, N)]
    # The message names the fix: a build without CUDA kernels needs a reinstall with nvcc, one
    # with them an engine opened on the GPU.
    fix = ('device="cuda"' if rangekv.build_info()["cuda_kernels"]
           else "no CUDA kernels; reinstall rangekv where the CUDA toolkit's nvcc is")
    with pytest.raises(rangekv.InvalidArgument, match="cuda:0.*host") as raised:
        h.bind_slots(fake, np.arange(hit))
    assert fix in str(raised.value), raised.value
    with pytest.raises(rangekv.InvalidArgument, match="cuda:0"):
        eng.begin_store(env("s"), list(range(64)), fake, list(range(64)))
    h.finish()
    check()


def test_wrong_shape_and_layer_count(stored):
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    cases = [
        [np.zeros((2, N, B, 2, 8), dtype=np.uint16)] * L,  # head size
        [np.zeros((2, N, 8, 2, 16), dtype=np.uint16)] * L,  # block size
        [np.zeros((N, 2, B, 2, 16), dtype=np.uint16)] * L,  # another layout's shape
        [np.zeros((2, N * B, 2, 16), dtype=np.uint16)] * L,  # flattened
    ]
    for bad in cases:
        with pytest.raises(rangekv.GeometryMismatch, match="shape"):
            h.bind_slots(bad, np.arange(hit))
    with pytest.raises(rangekv.GeometryMismatch, match="3 tensors.*4 layers"):
        h.bind_slots(zero_layers(LAYOUT, N)[:3], np.arange(hit))
    mixed = zero_layers(LAYOUT, N)
    mixed[2] = np.zeros(physical_shape(LAYOUT, N + 1), dtype=np.uint16)
    with pytest.raises(rangekv.GeometryMismatch, match="blocks"):
        h.bind_slots(mixed, np.arange(hit))
    with pytest.raises(rangekv.InvalidArgument, match="list of 4 tensors"):
        h.bind_slots(np.zeros((L,) + physical_shape(LAYOUT, N), dtype=np.uint16), np.arange(hit))
    with pytest.raises(rangekv.InvalidArgument, match="expected a tensor"):
        h.bind_slots(["x"] * L, np.arange(hit))
    h.finish()
    check()


def test_strided_tensors(stored):
    """Strided views (vLLM's cross-layer KV cache, a slice, a transposed view) are taken with
    their own strides; what the engine cannot address is refused, and refusals write nothing."""
    eng, src, check = stored
    # Head vectors not contiguous (Fortran order), and layers that share bytes: refused.
    e, hit, ticket, h = claim(eng)
    fortran = [np.asfortranarray(a) for a in zero_layers(LAYOUT, N)]
    with pytest.raises(rangekv.InvalidArgument, match="last dimension contiguous"):
        h.bind_slots(fortran, np.arange(hit))
    big = [np.zeros((2, 2 * N, B, 2, 16), dtype=np.uint16) for _ in range(L)]
    sliced = [a[:, ::2] for a in big]  # right shape, every other block of a larger allocation
    with pytest.raises(rangekv.InvalidArgument, match="overlap in memory"):
        h.bind_slots([sliced[0]] * L, np.arange(hit))
    with pytest.raises(rangekv.InvalidArgument, match="strides"):
        eng.begin_store(env("s"), list(range(64)), fortran, list(range(64)))
    h.cancel()
    assert all(not a.any() for a in big + fortran)
    # Every other block of a larger allocation: restored into exactly those blocks.
    e, hit, ticket, h = claim(eng, "sliced")
    slots = np.arange(hit)
    h.bind_slots(sliced, slots)
    assert h.finish().ok
    for layer in range(L):
        assert np.array_equal(token_rows(LAYOUT, sliced[layer], slots),
                              token_rows(LAYOUT, src[layer], np.arange(hit)))
        assert not big[layer][:, 1::2].any()  # the blocks in between untouched
    # A transposed view of other memory (the HND order through the NHD shape): taken as is.
    e, hit, ticket, h = claim(eng, "swapped")
    swapped = [np.zeros((2, N, 2, B, 16), dtype=np.uint16).swapaxes(2, 3) for _ in range(L)]
    h.bind_slots(swapped, slots)
    assert h.finish().ok
    for layer in range(L):
        assert np.array_equal(token_rows(LAYOUT, swapped[layer], slots),
                              token_rows(LAYOUT, src[layer], np.arange(hit)))
    check()


def test_read_only_and_overlapping_restore_targets(stored):
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    ro = zero_layers(LAYOUT, N)
    for a in ro:
        a.flags.writeable = False
    with pytest.raises(rangekv.InvalidArgument, match="read-only"):
        h.bind_slots(ro, np.arange(hit))
    one = np.zeros(physical_shape(LAYOUT, N), dtype=np.uint16)
    with pytest.raises(rangekv.InvalidArgument, match="overlap"):
        h.bind_slots([one] * L, np.arange(hit))
    h.finish()
    # A store may read read-only arrays.
    store_all(eng, list(range(7000, 7040)), ro, np.arange(40), name="ro-store")
    check()


# ---- slot mappings ------------------------------------------------------------------------


def test_bad_slot_mappings(stored):
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    dst = zero_layers(LAYOUT, N)
    ok = np.arange(hit)
    with pytest.raises(rangekv.OutOfRange, match=r"slot_mapping\[5\] = 256"):
        h.bind_slots(dst, np.where(ok == 5, N * B, ok))
    with pytest.raises(rangekv.InvalidArgument, match="repeats"):
        h.bind_slots(dst, np.where(ok == 7, 3, ok))
    with pytest.raises(rangekv.InvalidArgument, match="negative"):
        h.bind_slots(dst, np.where(ok == 0, -1, ok))
    with pytest.raises(rangekv.InvalidArgument, match="95 entries, expected 96"):
        h.bind_slots(dst, ok[:-1])
    with pytest.raises(rangekv.InvalidArgument, match="1-D"):
        h.bind_slots(dst, ok.reshape(2, -1))
    with pytest.raises(rangekv.InvalidArgument, match="integers"):
        h.bind_slots(dst, ok.astype(np.float64))
    with pytest.raises(rangekv.InvalidArgument, match="not an int"):
        h.bind_slots(dst, [0.5] * hit)
    assert not h.bound
    # int32 and a list are fine; the handle binds once.
    h.bind_slots(dst, ok.astype(np.int32).tolist())
    with pytest.raises(rangekv.FailedPrecondition, match="already bound"):
        h.bind_slots(dst, ok)
    for layer in range(L):
        h.wait_layer(layer)
    assert h.finish().ok
    with pytest.raises(rangekv.OutOfRange):
        eng.begin_store(env("s"), list(range(64)), src, np.arange(64) + N * B - 10)
    with pytest.raises(rangekv.InvalidArgument, match="entries"):
        eng.begin_store(env("s"), list(range(64)), src, np.arange(63))
    check()


def test_bad_tokens(stored):
    eng, src, check = stored
    with pytest.raises(rangekv.InvalidArgument, match="does not fit"):
        eng.lookup([1, 2, 1 << 40], env("t"), B)
    with pytest.raises(rangekv.InvalidArgument, match="sequence of ints"):
        eng.lookup("abc", env("t"), B)
    with pytest.raises(rangekv.InvalidArgument):
        eng.lookup([], env("t"), B)
    with pytest.raises(rangekv.InvalidArgument, match="granularity"):
        eng.lookup(TOKENS, env("t"), 0)
    check()


# ---- tickets and claims -------------------------------------------------------------------


def test_truncated_forged_and_foreign_tickets(stored, make_engine, tmp_path):
    eng, src, check = stored
    e = env("t1")
    hit, ticket = eng.lookup(TOKENS, e, B)
    assert isinstance(ticket, bytes) and hit == 96
    with pytest.raises(rangekv.CorruptTicket):
        eng.start_restore(ticket[: len(ticket) // 2], e, TOKENS, 0, hit)
    forged = bytearray(ticket)
    forged[len(forged) // 2] ^= 0xFF
    with pytest.raises(rangekv.CorruptTicket):
        eng.start_restore(bytes(forged), e, TOKENS, 0, hit)
    with pytest.raises(rangekv.InvalidArgument, match="bytes"):
        eng.start_restore(ticket.decode("latin-1"), e, TOKENS, 0, hit)
    with pytest.raises(rangekv.ForeignOwner):
        eng.start_restore(ticket, env("someone-else"), TOKENS, 0, hit)
    with pytest.raises(rangekv.TokenMismatch):
        eng.start_restore(ticket, e, [t + 1 for t in TOKENS], 0, hit)
    with pytest.raises(rangekv.EndpointBeyondTicket):
        eng.start_restore(ticket, e, TOKENS, 0, hit + 1)
    # A ticket of another store (same model, another directory).
    other = make_engine(LAYOUT, directory=str(tmp_path / "other"))
    store_all(other, TOKENS, src, np.arange(100))
    e2 = env("t2")
    hit2, ticket2 = other.lookup(TOKENS, e2, B)
    with pytest.raises(rangekv.Error) as info:
        eng.start_restore(ticket2, e2, TOKENS, 0, hit2)
    assert info.value.code in {"corrupt_ticket", "foreign_owner", "namespace_mismatch",
                               "stale_generation", "wrong_store"}, info.value
    # endpoint_tokens=None works for this engine's own tickets only.
    with pytest.raises(rangekv.InvalidArgument, match="endpoint_tokens"):
        eng.start_restore(ticket2, e2, TOKENS)
    # The original ticket is still good.
    h = eng.start_restore(ticket, e, TOKENS)
    assert h.tokens == (0, 96)
    h.finish()
    eng.release_request(e)
    check()


def test_closed_engine(make_engine):
    eng = make_engine()
    src = random_layers(LAYOUT, N, seed=23)
    store_all(eng, list(range(64)), src, np.arange(64))
    e = env("c")
    hit, ticket = eng.lookup(list(range(65)), e, B)
    h = eng.start_restore(ticket, e, list(range(65)))
    eng.close()
    assert eng.closed
    eng.close()  # idempotent
    for call in (lambda: eng.lookup([1, 2, 3], e, B), lambda: eng.stats(),
                 lambda: eng.begin_store(e, list(range(64)), src, np.arange(64)),
                 lambda: eng.start_restore(ticket, e, list(range(65)), 0, hit),
                 lambda: eng.release_request(e), lambda: eng.namespace):
        with pytest.raises(rangekv.ClosedError):
            call()
    # A handle that outlived close is inert: finishing reports, does not hang.
    out = h.finish()
    assert not out.ok


# ---- engine options and errors ------------------------------------------------------------


def test_engine_option_errors(store_dir, tmp_path):
    with pytest.raises(rangekv.InvalidArgument, match="unknown layout"):
        rangekv.Engine(store_dir, **engine_kwargs(layout="nhd"))
    with pytest.raises(rangekv.InvalidArgument, match="unknown dtype"):
        rangekv.Engine(store_dir, **engine_kwargs(dtype="int4"))
    with pytest.raises(rangekv.GeometryMismatch, match="MLA"):
        rangekv.Engine(store_dir, **engine_kwargs(layout="mla", mla_latent_size=0))
    with pytest.raises(rangekv.InvalidArgument, match="device"):
        rangekv.Engine(store_dir, **engine_kwargs(device="tpu"))
    with pytest.raises(rangekv.InvalidArgument, match="ablation|index"):
        rangekv.Engine(store_dir, **engine_kwargs(ablations="index=bogus"))
    with pytest.raises(rangekv.InvalidArgument, match="checkpoint_interval_ms"):
        rangekv.Engine(store_dir, **engine_kwargs(checkpoint_interval_ms=86_400_001))
    with pytest.raises(rangekv.InvalidArgument, match="store_service_spin_us"):
        rangekv.Engine(store_dir, **engine_kwargs(store_service_spin_us=10_001))
    rangekv.Engine(store_dir, **engine_kwargs()).close()
    with pytest.raises(rangekv.GeometryMismatch):
        rangekv.Engine(store_dir, **engine_kwargs(head_size=32))
    e = rangekv.Engine(str(tmp_path / "ablated"),
                       **engine_kwargs(ablations="index=scalar, delivery=barrier"))
    e.close()


def test_every_status_code_has_a_class():
    from rangekv import _errors

    for code in _core.status_code_names():
        if code == "ok":
            continue
        err = _errors.from_status(code, "m")
        assert isinstance(err, rangekv.Error) and err.code == code and err.message == "m"
        assert type(err) is not rangekv.Error, code
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and again.code == code
    assert issubclass(rangekv.InvalidArgument, ValueError)
    assert issubclass(rangekv.ClosedError, rangekv.FailedPrecondition)
    assert rangekv.StaleTicket.code == "stale_generation"


def test_missing_things_map_to_distinct_classes():
    """unavailable (transient), not_supported (backend) and device_fault are three classes."""
    from rangekv import _errors

    names = _core.status_code_names()
    want = {"unavailable": rangekv.Unavailable, "not_supported": rangekv.NotSupported,
            "device_fault": rangekv.DeviceFault}
    for code, cls in want.items():
        assert code in names
        assert type(_errors.from_status(code, "m")) is cls
    assert len(set(want.values())) == 3
    assert not issubclass(rangekv.NotSupported, rangekv.Unavailable)
    assert not issubclass(rangekv.DeviceFault, rangekv.Unavailable)


def test_cuda_refused_as_not_supported_where_unusable(tmp_path):
    """device='cuda' without CUDA kernels or a usable GPU is NotSupported (permanent), not
    Unavailable (transient)."""
    try:
        rangekv.Engine(str(tmp_path / "s"), **engine_kwargs(device="cuda")).close()
    except rangekv.NotSupported as e:
        if not _core.build_info()["cuda_kernels"]:
            assert "no CUDA kernels" in str(e), e
        return
    pytest.skip("a CUDA device is usable here")


def test_streams_on_the_host_device(stored):
    """The host device has no native streams: stream arguments are refused clearly."""
    eng, src, check = stored
    e, hit, ticket, h = claim(eng)
    h.bind_slots(zero_layers(LAYOUT, N), np.arange(hit))
    with pytest.raises(rangekv.Unimplemented):
        h.stream_wait_layer(0, 12345)
    with pytest.raises(rangekv.InvalidArgument, match="stream"):
        h.stream_wait_layer(0, "default")
    for layer in range(L):
        h.wait_layer(layer)
    assert h.finish().ok
    s = eng.begin_store(env("s"), list(range(8000, 8040)), src, np.arange(40))
    with pytest.raises(rangekv.Unimplemented):
        s.layer_produced(0, 12345)
    for layer in range(L):
        s.layer_produced(layer)
    assert s.finish().ok
    check()
