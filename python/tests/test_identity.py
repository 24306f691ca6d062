"""The KV identity's canonical form (rangekv/identity.py) and what changes its digest, without a
vLLM engine: key order, spellings and defaults, a table of fields that must and must not change
the digest, the weights' identity (metadata, content and its cache, hub commits, unpinned
weights), and the same rule in the vLLM connector and the transformers adapter."""

from __future__ import annotations

import json
import os
import shutil
import struct
import types

import pytest

from rangekv import identity as ident
from rangekv.vllm import model_identity

# ---- canonical form ---------------------------------------------------------------------------

def test_key_order_and_spelling_do_not_matter():
    a = {"rope_theta": 10000, "layers": 4, "rope_scaling": {"type": "linear", "factor": 2.0}}
    b = {"rope_scaling": {"factor": 2, "type": "linear"}, "layers": 4.0, "rope_theta": 10000.0}
    assert ident.canonical_json(a) == ident.canonical_json(b)
    assert ident.canonical_json((1, 2)) == ident.canonical_json([1, 2])
    assert ident.canonical_json({"x": float("nan")}) == '{"x":"nan"}'
    assert ident.canonical_json({"x": 1e-6}) == '{"x":1e-06}'
    # Booleans stay booleans (True is an int in Python), and 1.5 stays a float.
    assert ident.canonical_json([True, 1, 1.5]) == "[true,1,1.5]"


def test_nested_configs_and_dtypes_are_plain_data():
    class Sub:
        def to_dict(self):
            return {"num_hidden_layers": 2, "eos_token_id": 7}

    class TorchDtype:
        __module__ = "torch"

        def __str__(self):
            return "torch.bfloat16"

    TorchDtype.__name__ = "dtype"
    cfg = ident.model_config_fields({"text_config": Sub(), "dtype": "float32",
                                     "x": TorchDtype(), "eos_token_id": 2})
    # Ignored keys go at every depth; objects become their dicts; dtypes their names.
    assert cfg == {"text_config": {"num_hidden_layers": 2}, "x": "bfloat16"}


transformers = pytest.importorskip("transformers")


def _llama(**kw):
    base = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    base.update(kw)
    return transformers.LlamaConfig(**base)


def test_defaults_are_made_explicit():
    # A config that states rope_theta at its default and one that leaves it out are one model.
    assert (ident.model_config_fields(_llama()) ==
            ident.model_config_fields(_llama(rope_theta=10000.0)))
    fields = ident.model_config_fields(_llama())
    assert ident.rope_summary(fields) == {"rope_theta": 10000, "rope_type": "default"}
    for key in ("rms_norm_eps", "hidden_act", "attention_bias", "max_position_embeddings"):
        assert key in fields, key


def _identity(**over):
    cfg = over.pop("config", None) or ident.model_config_fields(_llama())
    args = dict(engine="vllm", model_config=cfg,
                weights={"kind": "files", "mode": "metadata", "files": 1, "bytes": 10,
                         "sha256": "a" * 64},
                dtype="bfloat16", kv_cache_dtype="bfloat16", quantization=None, block_size=32,
                layout="cpu_block", attention_backend="CPU_ATTN", runner="v1", tp_size=1,
                pp_size=1, extra={"sliding_window": None})
    args.update(over)
    return ident.KvIdentity(**args)


# (what, change) -> the digest must change
MUST_CHANGE = [
    ("rope theta", dict(config=ident.model_config_fields(_llama(rope_theta=50000)))),
    ("rope scaling", dict(config=ident.model_config_fields(_llama(
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})))),
    ("sliding window", dict(config=ident.model_config_fields(_llama(sliding_window=512)))),
    ("KV heads", dict(config=ident.model_config_fields(_llama(num_key_value_heads=4)))),
    ("norm epsilon", dict(config=ident.model_config_fields(_llama(rms_norm_eps=1e-5)))),
    ("activation", dict(config=ident.model_config_fields(_llama(hidden_act="gelu")))),
    ("max_position_embeddings", dict(config=ident.model_config_fields(
        _llama(max_position_embeddings=4096)))),
    ("weights", dict(weights={"kind": "files", "mode": "metadata", "files": 1, "bytes": 10,
                              "sha256": "b" * 64})),
    ("dtype", dict(dtype="float16")),
    ("KV cache dtype", dict(kv_cache_dtype="fp8_e4m3")),
    ("fp8 flavour", dict(kv_cache_dtype="fp8_e5m2")),
    ("quantization", dict(quantization="awq")),
    ("block size", dict(block_size=16)),
    ("layout", dict(layout="packed_hnd")),
    ("attention backend", dict(attention_backend="FLASH_ATTN")),
    ("model runner", dict(runner="v2")),
    ("TP size", dict(tp_size=2)),
    ("PP size", dict(pp_size=2)),
    ("engine", dict(engine="transformers")),
    ("effective sliding window", dict(extra={"sliding_window": 4096})),
    ("LongRoPE's long factors", dict(extra={"sliding_window": None, "long_rope": True})),
]

# (what, config) -> the digest must NOT change
MUST_NOT_CHANGE = [
    ("model path", _llama(name_or_path="/models/elsewhere")),
    ("eos token", _llama(eos_token_id=5)),
    ("pad token", _llama(pad_token_id=0)),
    ("use_cache", _llama(use_cache=False)),
    ("tied embeddings", _llama(tie_word_embeddings=True)),
    ("initializer range", _llama(initializer_range=0.5)),
    ("attention dropout", _llama(attention_dropout=0.1)),
    ("config dtype", _llama(dtype="float32")),
]


@pytest.mark.parametrize("what, change", MUST_CHANGE, ids=[w for w, _ in MUST_CHANGE])
def test_fields_that_change_kv_change_the_digest(what, change):
    assert _identity(**change).digest() != _identity().digest(), what


@pytest.mark.parametrize("what, config", MUST_NOT_CHANGE, ids=[w for w, _ in MUST_NOT_CHANGE])
def test_fields_that_leave_kv_unchanged_keep_the_digest(what, config):
    changed = _identity(config=ident.model_config_fields(config))
    assert changed.digest() == _identity().digest(), what


def test_max_model_len_is_out_of_the_key_except_longrope(tmp_path):
    def vllm_config(hf, max_model_len):
        model = types.SimpleNamespace(
            hf_config=hf, model=str(tmp_path / "missing"), revision=None, dtype="torch.bfloat16",
            quantization=None, max_model_len=max_model_len, runner_type="generate",
            get_sliding_window=lambda: None)
        return types.SimpleNamespace(
            model_config=model,
            cache_config=types.SimpleNamespace(cache_dtype="auto", block_size=32,
                                               calculate_kv_scales=False),
            parallel_config=types.SimpleNamespace(tensor_parallel_size=1,
                                                  pipeline_parallel_size=1),
            load_config=types.SimpleNamespace(load_format="auto", download_dir=None),
            compilation_config=types.SimpleNamespace(static_forward_context={}),
            use_v2_model_runner=False)

    weights = {"kind": "named", "name": "w"}

    def key(hf, n):
        i = model_identity.vllm_identity(vllm_config(hf, n), layout="cpu_block", layer_names=[])
        return ident.KvIdentity(**{**i.__dict__, "weights": weights}).digest()

    plain = _llama()
    assert key(plain, 4096) == key(plain, 131072)
    longrope = _llama(max_position_embeddings=131072, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 32,
        "long_factor": [2.0] * 32, "original_max_position_embeddings": 4096})
    assert key(longrope, 2048) == key(longrope, 4096)      # short factors either way
    assert key(longrope, 4096) != key(longrope, 8192)      # long factors from the first token


def test_vllm_settings_are_made_explicit():
    cfg = types.SimpleNamespace(model_config=types.SimpleNamespace(dtype="torch.bfloat16"),
                                cache_config=types.SimpleNamespace(cache_dtype="auto"))
    assert model_identity.kv_cache_dtype(cfg) == "bfloat16"   # auto = the model's dtype
    cfg.cache_config.cache_dtype = "fp8"
    assert model_identity.kv_cache_dtype(cfg) == "fp8_e4m3"   # vLLM's fp8 is e4m3
    assert model_identity.model_runner(types.SimpleNamespace(use_v2_model_runner=False)) == "v1"
    assert model_identity.model_runner(types.SimpleNamespace(use_v2_model_runner=True)) == "v2"
    assert model_identity.model_runner(types.SimpleNamespace()) == "v2"  # 0.34: V2 only


# ---- the weights ------------------------------------------------------------------------------

def _write_safetensors(path, shape=(4,), fill=0):
    header = json.dumps({"w": {"dtype": "U8", "shape": list(shape),
                               "data_offsets": [0, int(sum(shape))]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes([fill]) * int(sum(shape)))


def test_weights_metadata_identity(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    _write_safetensors(model / "model.safetensors")
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    first = ident.weights_identity(str(model))
    assert first["kind"] == "files" and first["files"] == 1 and first["mode"] == "metadata"
    assert ident.weights_identity(str(model)) == first
    # A rewrite (new time) changes it; so does another header with the same size and time.
    st = os.stat(model / "model.safetensors")
    _write_safetensors(model / "model.safetensors", fill=1)
    assert ident.weights_identity(str(model)) != first
    _write_safetensors(model / "model.safetensors", shape=(2, 2))
    os.utime(model / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ident.weights_identity(str(model)) != first
    # Files that are not weights do not count; a copy elsewhere with the times kept is the same.
    _write_safetensors(model / "model.safetensors")
    os.utime(model / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    (model / "tokenizer.json").write_text('{"changed": 1}')
    assert ident.weights_identity(str(model)) == first
    shutil.copytree(model, tmp_path / "copy")
    assert ident.weights_identity(str(tmp_path / "copy")) == first


def test_weights_content_identity_sees_bytes_and_is_cached(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    _write_safetensors(model / "model.safetensors")
    cache = tmp_path / "store"
    first = ident.weights_identity(str(model), mode="content", digest_cache_dir=str(cache))
    assert first["mode"] == "content"
    saved = json.loads((cache / "weight-digests.json").read_text())
    assert len(saved) == 1
    assert oct(os.stat(cache / "weight-digests.json").st_mode & 0o777) == "0o600"
    # Other bytes with the same size and the time put back: metadata cannot tell, content can.
    st = os.stat(model / "model.safetensors")
    meta = ident.weights_identity(str(model))
    _write_safetensors(model / "model.safetensors", fill=9)
    os.utime(model / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ident.weights_identity(str(model)) == meta
    # The cache is keyed by (path, size, mtime), so a preserved time needs a fresh cache here.
    assert ident.weights_identity(str(model), mode="content",
                                  digest_cache_dir=str(tmp_path / "fresh")) != first
    # A digest in the cache is used, not recomputed.
    key = next(iter(saved))
    (cache / "weight-digests.json").write_text(json.dumps({key: "f" * 64}))
    cached = ident.weights_identity(str(model), mode="content", digest_cache_dir=str(cache))
    assert cached != first
    # A copy with new times is the same content.
    shutil.copy(model / "model.safetensors", tmp_path / "copy.safetensors")
    os.makedirs(tmp_path / "c2")
    shutil.move(tmp_path / "copy.safetensors", tmp_path / "c2" / "model.safetensors")
    fresh = ident.weights_identity(str(model), mode="content", digest_cache_dir=str(tmp_path / "a"))
    other = ident.weights_identity(str(tmp_path / "c2"), mode="content",
                                   digest_cache_dir=str(tmp_path / "b"))
    assert fresh == other


def test_hub_ids_are_pinned_by_their_commit_or_never_shared():
    pinned = ident.weights_identity("org/model", resolve_hub=lambda repo, rev: "c" * 40)
    assert pinned == {"kind": "hub", "repo": "org/model", "commit": "c" * 40}
    a = ident.weights_identity("org/model", resolve_hub=lambda repo, rev: None)
    b = ident.weights_identity("org/model", resolve_hub=lambda repo, rev: None)
    assert a["kind"] == "unpinned" and a != b  # a fresh nonce each time: never a hit


# ---- the same rule in the vLLM connector and the transformers adapter ---------------------------

def test_the_connector_and_the_adapter_build_the_same_identity_from_the_same_inputs(tmp_path):
    torch = pytest.importorskip("torch")
    import rangekv.hf

    model_dir = tmp_path / "model"
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(_llama()).to(torch.bfloat16).save_pretrained(model_dir)
    hf_config = transformers.AutoConfig.from_pretrained(model_dir)
    hf = rangekv.hf.model_identity(hf_config, block_size=16, dtype=torch.bfloat16)
    vcfg = types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            hf_config=transformers.AutoConfig.from_pretrained(model_dir), model=str(model_dir),
            revision=None, dtype=torch.bfloat16, quantization=None, max_model_len=2048,
            runner_type="generate", get_sliding_window=lambda: None),
        cache_config=types.SimpleNamespace(cache_dtype="auto", block_size=16,
                                           calculate_kv_scales=False),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
        load_config=types.SimpleNamespace(load_format="auto", download_dir=None),
        compilation_config=types.SimpleNamespace(static_forward_context={}),
        use_v2_model_runner=False)
    vllm = model_identity.vllm_identity(vcfg, layout="flash_attn_nhd", layer_names=[])
    # The same model, the same weights, the same dtypes: only who computes attention differs,
    # and that alone keeps their namespaces apart (their KV is not bit-identical).
    assert vllm.model_config == hf.model_config
    assert vllm.weights == hf.weights and vllm.weights["kind"] == "files"
    assert set(ident.difference(vllm.key(), hf.key())) == {"engine", "attention_backend", "runner"}
