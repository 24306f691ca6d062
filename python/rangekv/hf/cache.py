"""Paged KV memory and a transformers ``Cache`` over it.

``PagedKvPool`` owns one tensor per layer in the ``flash_attn_nhd`` layout (``[2, num_blocks,
block_size, kv_heads, head_size]``: K at index 0, V at index 1, token-major inside a block),
the same memory a vLLM worker hands to its KV connector. A request's tokens live in slots
``block * block_size + offset`` of blocks it was given, so RangeKV's scatter (restore) and
gather (store) address the pool exactly as they address vLLM's cache.

``RangeKVCache`` is the transformers 5.x ``Cache`` one request uses. Its per-layer ``update``:

1. if a restore is bound, waits for that layer's restored prefix before attention can read
   it (``RestoreHandle.wait_layer``, or ``stream_wait_layer`` on CUDA so the host does not
   block);
2. writes the layer's new K/V into the request's slots;
3. in layerwise store mode hands the layer to the store (``StoreHandle.layer_produced``);
4. returns the layer's K/V for the whole sequence so far as ``[1, H, seq, D]`` (a view of the
   pool when the request's slots are consecutive, else a gather of its slots).

A layer whose restore failed raises ``RestoreFailed`` out of the model's forward; the driver
(``rangekv.hf.generate``) then recomputes from the first token that was not delivered. Wrong
KV is never read: attention only sees a restored layer after its wait succeeded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

LAYOUT = "flash_attn_nhd"


class RestoreFailed(RuntimeError):
    """A layer's restored prefix could not be delivered; its tokens must be recomputed."""

    def __init__(self, layer: int, error: BaseException):
        super().__init__(f"restore of layer {layer} failed: {error}")
        self.layer = layer
        self.error = error


def model_kv_geometry(config) -> dict:
    """Layers, KV heads and head size of a Llama-style transformers config."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_size = getattr(text, "head_dim", None) or text.hidden_size // heads
    return {"layers": text.num_hidden_layers, "kv_heads": kv_heads, "head_size": head_size}


class PagedKvPool:
    """Per-layer paged KV tensors plus a block allocator (one model, one device)."""

    def __init__(
        self,
        *,
        layers: int,
        kv_heads: int,
        head_size: int,
        num_blocks: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.bfloat16,
        device: str | torch.device = "cpu",
    ):
        if block_size not in (16, 32):
            raise ValueError(f"block_size must be 16 or 32, got {block_size}")
        if num_blocks <= 0 or layers <= 0:
            raise ValueError("num_blocks and layers must be positive")
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_size = head_size
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.dtype = dtype
        self.device = torch.device(device)
        self.layout = LAYOUT
        self.kv_layers = [
            torch.zeros(2, num_blocks, block_size, kv_heads, head_size, dtype=dtype,
                        device=self.device)
            for _ in range(layers)
        ]
        # [2, num_blocks * block_size, H, D] views: slot s is row s.
        self._flat = [t.view(2, num_blocks * block_size, kv_heads, head_size)
                      for t in self.kv_layers]
        self._free: list[int] = list(range(num_blocks))

    @classmethod
    def for_model(cls, config, *, num_blocks: int, block_size: int = 16, dtype=None, device="cpu"):
        g = model_kv_geometry(config)
        return cls(
            layers=g["layers"],
            kv_heads=g["kv_heads"],
            head_size=g["head_size"],
            num_blocks=num_blocks,
            block_size=block_size,
            dtype=dtype or config.dtype or torch.float32,
            device=device,
        )

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise MemoryError(f"paged KV pool has {len(self._free)} free blocks, {count} requested")
        got, self._free = self._free[:count], self._free[count:]
        return got

    def free(self, blocks: Sequence[int]) -> None:
        self._free.extend(blocks)
        self._free.sort()

    def slot_mapping(self, blocks: Sequence[int], tokens: int) -> torch.Tensor:
        """int64 slots of the first `tokens` tokens held in `blocks` (block*B + offset)."""
        if tokens > len(blocks) * self.block_size:
            raise ValueError(f"{len(blocks)} blocks hold fewer than {tokens} tokens")
        b = torch.as_tensor(list(blocks), dtype=torch.int64)
        offs = torch.arange(self.block_size, dtype=torch.int64)
        return (b[:, None] * self.block_size + offs[None, :]).reshape(-1)[:tokens].contiguous()

    def flat(self, layer: int) -> torch.Tensor:
        return self._flat[layer]

    def token_bytes(self) -> int:
        """Bytes of one token of one layer (K and V)."""
        return 2 * self.kv_heads * self.head_size * torch.finfo(self.dtype).bits // 8


class _PagedLayer(CacheLayerMixin):
    """One layer's view of the request's slots (bookkeeping only; RangeKVCache drives it)."""

    is_sliding = False
    is_croppable = False

    def __init__(self, cache: RangeKVCache, layer: int):
        super().__init__()
        self._cache = cache
        self._layer = layer
        self.seq = cache.past_tokens
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # pragma: no cover
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        return self._cache.update(key_states, value_states, self._layer)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seq + query_length, 0

    def get_seq_length(self) -> int:
        return self.seq

    def get_max_length(self) -> int:
        return self._cache.capacity_tokens

    def reset(self) -> None:
        self.seq = 0


class RangeKVCache(Cache):
    """A transformers ``Cache`` for one request (batch 1) over a ``PagedKvPool``.

    slots        int64 slot of every token the request may hold (prompt + generated)
    past_tokens  tokens already in the slots when the first forward starts (a restored or
                 resident prefix); the model's positions start there
    restore      a bound ``rangekv.RestoreHandle`` for tokens [0, past_tokens), or None
    store        a ``rangekv.StoreHandle`` over the prompt's slots, or None
    store_mode   "layer": ``layer_produced(l)`` right after layer l's KV is written (the
                 layerwise connector mode); "forward": the driver calls ``produce_all``
                 after the forward (the plain mode)
    stream       CUDA only: the model's stream; restores are waited with
                 ``stream_wait_layer`` (the host does not block) and stores are handed over
                 with an event on it. None: host waits (CPU)
    produce_until  store notifications are sent only while the sequence is within the
                 prompt (decode steps write past it)
    """

    def __init__(
        self,
        pool: PagedKvPool,
        slots: torch.Tensor,
        *,
        past_tokens: int = 0,
        restore=None,
        store=None,
        store_mode: str = "layer",
        stream=None,
        produce_until: int | None = None,
    ):
        if store_mode not in ("layer", "forward"):
            raise ValueError(f"store_mode must be 'layer' or 'forward', got {store_mode!r}")
        self.pool = pool
        self.past_tokens = past_tokens
        self.capacity_tokens = int(slots.numel())
        self._slots_cpu = slots.to(torch.int64).contiguous()
        self._slots = self._slots_cpu.to(pool.device)
        first = int(self._slots_cpu[0]) if self.capacity_tokens else 0
        # Consecutive slots: the layer's K/V are a view of the pool, no gather.
        self._view_base = (
            first
            if self.capacity_tokens
            and torch.equal(self._slots_cpu, torch.arange(first, first + self.capacity_tokens))
            else None
        )
        self.restore = restore
        self.store = store
        self.store_mode = store_mode
        self.stream = stream
        self.produce_until = produce_until
        self._waited: set[int] = set()
        self._produced: set[int] = set()
        # Restore phase marks (ms since `t0`, set by the driver): first / last layer ready.
        self.t0: float | None = None
        self.phases: dict[str, float] = {}
        super().__init__(layers=[_PagedLayer(self, layer) for layer in range(pool.layers)])

    # ---- what transformers asks --------------------------------------------------------------

    @property
    def is_compileable(self) -> bool:
        return False

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].seq

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.capacity_tokens

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return self.layers[layer_idx].get_mask_sizes(query_length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args,
               **kwargs):
        if key_states.shape[0] != 1:
            raise ValueError("RangeKVCache holds one request (batch size 1)")
        layer = self.layers[layer_idx]
        if self.restore is not None and layer_idx not in self._waited:
            self._wait_restored(layer_idx)
        start, q = layer.seq, key_states.shape[-2]
        end = start + q
        if end > self.capacity_tokens:
            raise ValueError(f"request holds {self.capacity_tokens} tokens, {end} needed")
        flat = self.pool.flat(layer_idx)
        # [1, H, q, D] -> [q, H, D] rows of the slots.
        k_rows = key_states[0].transpose(0, 1).to(flat.dtype)
        v_rows = value_states[0].transpose(0, 1).to(flat.dtype)
        if self._view_base is not None:
            base = self._view_base
            flat[0, base + start : base + end].copy_(k_rows)
            flat[1, base + start : base + end].copy_(v_rows)
            keys = flat[0, base : base + end]
            values = flat[1, base : base + end]
        else:
            idx = self._slots[start:end]
            flat[0].index_copy_(0, idx, k_rows)
            flat[1].index_copy_(0, idx, v_rows)
            idx_all = self._slots[:end]
            keys = flat[0].index_select(0, idx_all)
            values = flat[1].index_select(0, idx_all)
        layer.seq = end
        if (
            self.store is not None
            and self.store_mode == "layer"
            and (self.produce_until is None or end >= self.produce_until)
        ):
            self.produce(layer_idx)
        return keys.transpose(0, 1).unsqueeze(0), values.transpose(0, 1).unsqueeze(0)

    # ---- RangeKV hand-offs -------------------------------------------------------------------

    def _wait_restored(self, layer_idx: int) -> None:
        try:
            if self.stream is not None:
                self.restore.stream_wait_layer(layer_idx, self.stream)
            else:
                self.restore.wait_layer(layer_idx)
        except Exception as e:  # the layer's error (rangekv.Error): recompute its tokens
            raise RestoreFailed(layer_idx, e) from e
        self._waited.add(layer_idx)
        if self.t0 is not None:
            now = (time.perf_counter() - self.t0) * 1e3
            self.phases.setdefault("first_layer_ready", now)
            if len(self._waited) == self.pool.layers:
                self.phases["last_layer_ready"] = now

    def produce(self, layer_idx: int) -> None:
        """Hands layer `layer_idx` (written into the prompt's slots) to the store."""
        if self.store is None or layer_idx in self._produced:
            return
        if self.stream is not None:
            self.store.layer_produced(layer_idx, self.stream)
        else:
            self.store.layer_produced(layer_idx)
        self._produced.add(layer_idx)

    def produce_all(self) -> None:
        for layer in range(self.pool.layers):
            self.produce(layer)

    def rewind(self, tokens: int) -> None:
        """Forgets everything from token `tokens` on (the restore is dropped)."""
        for layer in self.layers:
            layer.seq = min(layer.seq, tokens)
        self.past_tokens = tokens
        self.restore = None
        self._waited.clear()

    def set_store(self, store) -> None:
        self.store = store
        self._produced.clear()

    def reset(self) -> None:
        self.rewind(0)

    def crop(self, tokens_to_remove: int) -> None:  # pragma: no cover - not used by greedy decode
        raise NotImplementedError("RangeKVCache does not crop")

    def reorder_cache(self, beam_idx) -> None:  # pragma: no cover
        raise NotImplementedError("RangeKVCache holds one request (no beam search)")
