"""The identity of a model's KV values: what a store's namespace is bound to.

Two engines may share cached KV only when every input that shapes a KV value is the same: the
model's effective configuration, its weights, the dtypes, the quantization, the paged layout
and the engine that computes attention. `KvIdentity` holds those inputs in a canonical form;
`KvIdentity.key()` is the part that is hashed into the namespace (through the engine's
``semantic_config``, include/rangekv/geometry.h), so any difference is another namespace, and a
lookup there is a miss, never a hit on another model's KV. What is deliberately left out
(``max_model_len``, the served model name, the port, generation settings, token ids, the
tokenizer) changes no KV value, so changing it keeps every hit. docs/integrations/vllm.md
("What is in the key") lists both sides and why.

The vLLM connector (rangekv/vllm/model_identity.py) and the transformers adapter
(rangekv.hf.engine_for_model) both build their identity here, from the same inputs.

Pure Python: no vLLM, no torch needed.
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import hashlib
import json
import math
import os
import secrets
import struct
from collections.abc import Iterable, Mapping
from typing import Any

# RangeKV's own KV format: bumped whenever what a stored block means changes (its byte order,
# what the engine writes into it), so stores of an older meaning are never read as the new one.
KV_FORMAT_VERSION = 1

# Fields of a Hugging Face config that change no KV value. Everything else in the effective
# configuration is in the key: a field wrongly kept in costs a needless miss, a field wrongly
# left out would serve another model's KV, so the list is of fields known to be harmless.
IGNORED_CONFIG_KEYS = frozenset({
    # bookkeeping: where the config came from, which library wrote it
    "_name_or_path", "name_or_path", "transformers_version", "_commit_hash",
    # the attention implementation and the dtype are fields of their own (attention_backend,
    # dtype), taken from what the engine really runs, not from what the file asks for
    "_attn_implementation", "_attn_implementation_autoset", "_attn_implementation_internal",
    "attn_implementation", "torch_dtype", "dtype", "_experts_implementation",
    # what a forward call returns, not what it computes
    "use_cache", "output_attentions", "output_hidden_states", "return_dict", "torchscript",
    "output_scores", "return_dict_in_generate",
    # token ids and labels: the KV of a token id does not depend on which id is "eos"
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
    "tokenizer_class", "prefix", "task_specific_params",
    # generation settings (sampling happens after the KV exists)
    "max_length", "min_length", "max_new_tokens", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    # the output head only (the weights' identity covers its bytes); engines also rewrite it
    # (vLLM unties a checkpoint that ships lm_head)
    "tie_word_embeddings",
    # how the feed-forward is chunked over the sequence, not what it computes
    "chunk_size_feed_forward",
    # training only: how new weights are drawn (loaded ones are pinned by the weights'
    # identity) and dropout, which inference does not apply
    "initializer_range", "initializer_factor", "attention_dropout", "hidden_dropout",
    "dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "classifier_dropout",
})

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".npz", ".msgpack",
                   ".h5")
# Small files beside the weights that some loaders read as part of the model (the index of
# shards, quantization parameters kept outside config.json).
_SIDE_FILES = ("quant_config.json", "quantize_config.json", "hf_quant_config.json",
               "quantization_config.json")
_MAX_SAFETENSORS_HEADER = 100 << 20  # the format's own bound
_DIGEST_CACHE = "weight-digests.json"


class WeightsMode(str, enum.Enum):
    METADATA = "metadata"  # names, sizes, modification times, safetensors headers
    CONTENT = "content"    # every byte, digested once and cached beside the store


# ---- canonical form ---------------------------------------------------------------------------

def canonical(value: Any) -> Any:
    """`value` as plain JSON data with one spelling per meaning: mappings with string keys (the
    JSON text sorts them), tuples and lists alike, integral floats as integers (a config that
    says ``10000`` and one that says ``10000.0`` mean the same rope_theta), non-finite floats
    as strings, torch dtypes by name, objects with ``to_dict()`` (nested configs) as their
    dict. Anything else is named by its type and text, which errs towards a miss."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return canonical(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=canonical_json)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return canonical(to_dict())
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return f"{type(value).__name__}:{value}"


def canonical_json(value: Any) -> str:
    """The one text of `value`: canonical(), sorted keys, no spaces, ASCII."""
    return json.dumps(canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_hex(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def model_config_fields(config: Any) -> dict:
    """The effective model configuration in canonical form without IGNORED_CONFIG_KEYS (at every
    depth: a multimodal config's text_config has token ids too). `config` is a mapping or an
    object with ``to_dict()`` (a transformers ``PretrainedConfig``, which includes every
    default, so a field stated at its default and a field left out are the same)."""
    data = canonical(config)
    if not isinstance(data, dict):
        raise TypeError(f"model config: expected a mapping or a config object, got {config!r}")
    return _drop_ignored(data)


def _drop_ignored(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_ignored(v) for k, v in value.items() if k not in IGNORED_CONFIG_KEYS}
    if isinstance(value, list):
        return [_drop_ignored(v) for v in value]
    return value


def text_config(config: dict) -> dict:
    """The language model's part of a canonical config (multimodal configs nest it)."""
    for key in ("text_config", "language_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return sub
    return config


def rope_summary(config: dict) -> dict:
    """RoPE as the config states it (transformers 5 ``rope_parameters``, older ``rope_theta`` +
    ``rope_scaling``): type, theta and the scaling parameters."""
    cfg = text_config(config)
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params:
        out = dict(params)
    else:
        out = dict(cfg.get("rope_scaling") or {})
        if "rope_theta" in cfg:
            out["rope_theta"] = cfg["rope_theta"]
    out.setdefault("rope_type", out.pop("type", "default"))
    for key in ("partial_rotary_factor", "rotary_pct", "rotary_dim"):
        if key in cfg:
            out[key] = cfg[key]
    return canonical(out)


# ---- the weights ------------------------------------------------------------------------------

def weight_files(model_dir: str) -> list[str]:
    """Files under `model_dir` (relative, sorted) that hold weights or shape how they load:
    WEIGHT_SUFFIXES, shard indexes and quantization side files. Hidden folders (.cache, .git)
    are skipped. Symlinks (the Hugging Face cache) are followed."""
    out = []
    for root, dirs, files in os.walk(model_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if (name.endswith(WEIGHT_SUFFIXES) or name.endswith(".index.json")
                    or name in _SIDE_FILES):
                out.append(os.path.relpath(os.path.join(root, name), model_dir))
    return sorted(out)


def _safetensors_header_sha(path: str) -> str | None:
    """SHA-256 of a safetensors file's header (tensor names, dtypes, shapes, offsets, its
    metadata), or None when the file does not start with a plausible header."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            return None
        (n,) = struct.unpack("<Q", raw)
        if n == 0 or n > _MAX_SAFETENSORS_HEADER:
            return None
        header = f.read(n)
    return sha256_hex(header) if len(header) == n else None


def _file_entry(model_dir: str, rel: str) -> dict:
    path = os.path.join(model_dir, rel)
    st = os.stat(path)
    entry = {"name": rel, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    if rel.endswith(".safetensors"):
        entry["header_sha256"] = _safetensors_header_sha(path)
    return entry


def _content_sha(path: str, st: os.stat_result, cache: dict) -> str:
    key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
    if key not in cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(16 << 20):
                h.update(chunk)
        cache[key] = h.hexdigest()
    return cache[key]


def _with_digest_cache(cache_dir: str | None, fn):
    """Runs fn(cache: dict) under an exclusive lock of `<cache_dir>/weight-digests.json`, loading
    the cache before and saving it (atomically, 0600) after: ranks that start together digest
    each file once. Without a cache_dir, fn runs with an empty cache."""
    if not cache_dir:
        return fn({})
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    path = os.path.join(cache_dir, _DIGEST_CACHE)
    with os.fdopen(os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600), "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                cache = json.load(f)
            if not isinstance(cache, dict):
                cache = {}
        except (OSError, ValueError):
            cache = {}
        before = dict(cache)
        result = fn(cache)
        if cache != before:
            tmp = f"{path}.tmp.{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(cache, f, sort_keys=True, indent=0)
            os.replace(tmp, path)
        return result


def unpinned(why: str) -> dict:
    """Weights nothing can pin: a random nonce, so this engine's KV is never served to another
    engine, nor to this one after a restart."""
    return {"kind": "unpinned", "why": why, "nonce": secrets.token_hex(16)}


def tensors_identity(named_tensors) -> dict:
    """Weights held in memory (a model built or changed in a notebook): SHA-256 over every
    tensor's name, dtype, shape and bytes, in name order."""
    import torch

    h = hashlib.sha256()
    count = total = 0
    for name, t in sorted(named_tensors, key=lambda item: item[0]):
        t = t.detach()
        flat = t.reshape(-1).contiguous().cpu()
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        h.update(canonical_json([name, str(t.dtype), list(t.shape), len(data)]).encode())
        h.update(data)
        count += 1
        total += len(data)
    return {"kind": "tensors", "tensors": count, "bytes": total, "sha256": h.hexdigest()}


def weights_identity(model: str, *, revision: str | None = None, mode: str = "metadata",
                     digest_cache_dir: str | None = None, resolve_hub=None) -> dict:
    """What pins the weights the engine loaded from `model`.

    - A local directory (or a single weights file): one entry per weight file (name, size,
      modification time, and for safetensors the header's SHA-256), so a rewrite of any file
      changes it; with mode "content" each file's SHA-256 instead, computed once and cached in
      `digest_cache_dir` keyed by (real path, size, mtime) for users who copy files with
      preserved times.
    - A hub id: the resolved commit (`resolve_hub(model, revision)` returns it, or None).
    - Anything that cannot be pinned (a hub id whose commit is unknown): a random nonce, so this
      engine's KV is never served to another engine, nor this one after a restart.

    The summary: {"kind", "sha256" (of the canonical entry list), "files", "bytes", "mode"}.
    """
    mode = WeightsMode(mode).value
    if os.path.isfile(model):
        model_dir, names = os.path.dirname(model) or ".", [os.path.basename(model)]
    elif os.path.isdir(model):
        model_dir, names = model, weight_files(model)
    else:
        commit = resolve_hub(model, revision) if (resolve_hub and model) else None
        if commit:
            return {"kind": "hub", "repo": model, "commit": commit}
        return unpinned(f"no local files and no resolved commit for {model!r}")
    if not names:
        return unpinned(f"no weight files under {os.path.abspath(model)}")
    entries = [_file_entry(model_dir, rel) for rel in names]
    if mode == WeightsMode.CONTENT.value:
        def digest_all(cache: dict) -> None:
            for e in entries:
                path = os.path.join(model_dir, e["name"])
                e["content_sha256"] = _content_sha(path, os.stat(path), cache)
                # Times no longer matter: a copy with other times is the same content.
                e.pop("mtime_ns")
                e.pop("header_sha256", None)
        _with_digest_cache(digest_cache_dir, digest_all)
    return {"kind": "files", "mode": mode, "files": len(entries),
            "bytes": sum(e["bytes"] for e in entries),
            "sha256": sha256_hex(canonical_json(entries))}


# ---- the identity -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class KvIdentity:
    """Everything that shapes the KV values an engine computes and stores. `key()` is what the
    namespace binds; `describe()` is one line for logs."""
    engine: str                # "vllm" or "transformers": who computes attention
    model_config: dict         # model_config_fields() of the effective config
    weights: dict              # weights_identity()
    dtype: str                 # the model's compute dtype, e.g. "bfloat16"
    kv_cache_dtype: str        # what the KV cache holds: the dtype, or e.g. "fp8_e4m3"
    quantization: str | None   # the weights' quantization method, resolved (None: none)
    block_size: int            # tokens per paged block
    layout: str                # RangeKV's name of the paged layout (engine layout)
    attention_backend: str     # attention implementation family, e.g. "FLASH_ATTN", "sdpa"
    runner: str                # the engine's model runner, e.g. "v1" / "v2"
    tp_size: int = 1
    pp_size: int = 1
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # engine-specific facts

    def key(self) -> dict:
        """The hashed fields, canonical. The readable summaries (architecture, layers, heads,
        rope, sliding window) are derived from model_config, which is in the key whole."""
        cfg = text_config(self.model_config)
        return canonical({
            "rangekv_kv_format": KV_FORMAT_VERSION,
            "engine": self.engine,
            "architectures": self.model_config.get("architectures"),
            "layers": cfg.get("num_hidden_layers"),
            "heads": cfg.get("num_attention_heads"),
            "kv_heads": cfg.get("num_key_value_heads", cfg.get("num_attention_heads")),
            "head_size": cfg.get("head_dim"),
            "rope": rope_summary(self.model_config),
            "sliding_window": cfg.get("sliding_window"),
            "model_config": self.model_config,
            "weights": self.weights,
            "dtype": self.dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "block_size": self.block_size,
            "layout": self.layout,
            "attention_backend": self.attention_backend,
            "runner": self.runner,
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
            "extra": dict(self.extra),
        })

    def semantic_config(self) -> str:
        """The text the engine's namespace hashes (ModelSpec::semantic_config) and the store's
        identity record keeps."""
        return canonical_json(self.key())

    def digest(self) -> str:
        return sha256_hex(self.semantic_config())

    def describe(self) -> str:
        k = self.key()
        w = self.weights
        kind = w.get("kind")
        if kind == "files":
            weights = (f"{w['files']} file(s), {w['bytes']} bytes, {w['mode']} sha256 "
                       f"{w['sha256'][:12]}")
        elif kind == "hub":
            weights = f"{w['repo']}@{w['commit']}"
        elif kind == "tensors":
            weights = f"{w['tensors']} tensors in memory, sha256 {w['sha256'][:12]}"
        elif kind == "named":
            weights = f"named {w['name']!r} by the caller"
        else:
            weights = f"unpinned ({w.get('why')}): never shared"
        rope = ", ".join(f"{a}={b}" for a, b in sorted(k["rope"].items()))
        arch = ",".join(k["architectures"] or ["?"])
        return (f"identity {self.digest()[:16]}: {self.engine} {arch}, {k['layers']} layers, "
                f"{k['heads']} heads / {k['kv_heads']} KV heads x {k['head_size']}, rope "
                f"({rope}), sliding window {k['sliding_window']}, weights {weights}, dtype "
                f"{self.dtype}, KV {self.kv_cache_dtype}, quantization {self.quantization}, "
                f"block {self.block_size}, layout {self.layout}, attention "
                f"{self.attention_backend}, runner {self.runner}, TP {self.tp_size}, PP "
                f"{self.pp_size}" + (f", {canonical_json(self.extra)}" if self.extra else ""))


def difference(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields where two keys differ (for the log line of a store whose
    identity changed)."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out.extend(difference(x, y, f"{prefix}{k}."))
        elif x != y:
            out.append(prefix + k)
    return out


def flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted name, leaf) pairs of a canonical value, for readable listings."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from flatten(value[k], f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), value
