"""Greedy generation of one request through a ``RangeKVCache``, with RangeKV restore and store.

``generate`` is what the tests and ``rangekv bench ttft-hf`` drive:

    lookup -> start_restore -> bind_slots  (the restored prefix is scattered into the pool)
    begin_store                            (the prompt's uncached suffix will be gathered)
    forward(prompt[hit:])                  (each layer waits for its restored prefix, writes
                                            its KV, and is handed to the store)
    first token                            (TTFT ends here)
    decode steps, then restore.finish / store.finish

A restore that fails (a span that could not be read or failed its checksum) stops the forward
at the first layer that cannot be delivered (host waits) or is found at ``finish`` (stream
waits). The driver then recomputes from the first token that was not delivered, with a new
store for what the failed store did not cover: the request's output is the recomputed one's,
and nothing read from a failed span reaches attention's result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .cache import PagedKvPool, RangeKVCache, RestoreFailed


@dataclass
class Generation:
    tokens: list[int]
    logits: list[torch.Tensor]  # float32 [vocab] per generated token (CPU)
    ttft_s: float
    prompt_tokens: int
    hit_tokens: int = 0  # lookup hit (after endpoint clipping)
    restored_tokens: int = 0  # tokens whose KV came from RangeKV
    recomputed_prefix_tokens: int = 0  # hit tokens recomputed after a failed restore
    resident_tokens: int = 0
    restore_ok: bool | None = None
    restore_failed: list[tuple[int, int]] = field(default_factory=list)
    restore_error: str | None = None
    claim_retried: bool = False  # the first claim was stale: looked up again
    store_disposition: str | None = None
    store_ok: bool | None = None
    store_error: str | None = None
    restore_work: dict = field(default_factory=dict)
    store_work: dict = field(default_factory=dict)
    phases_ms: dict = field(default_factory=dict)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _forward(model, ids: torch.Tensor, cache: RangeKVCache) -> torch.Tensor:
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1]


def generate(
    model,
    prompt,
    *,
    pool: PagedKvPool,
    max_new_tokens: int = 2,
    engine=None,
    request_id: str = "hf-request",
    granularity: int = 256,
    endpoint_tokens: int | None = None,
    restore: bool = True,
    store: bool = True,
    store_mode: str = "layer",
    resident_blocks: list[int] | None = None,
    resident_tokens: int = 0,
    keep_blocks: bool = False,
    wait_store: bool = True,
    use_stream: bool | None = None,
    load_prefix=None,
) -> Generation:
    """Greedy generation of `prompt` (1-D ints) with RangeKV restore/store when `engine` is set.

    granularity      the reuse granularity (tokens) of the lookup: where a partial hit may end
    endpoint_tokens  restore at most this many tokens of the hit (None: the whole hit)
    store_mode       "layer" (layerwise: layer_produced as each layer is written) or
                     "forward" (plain: all layers after the forward)
    resident_blocks  blocks of `pool` already holding the first `resident_tokens` tokens (the
                     resident-prefix control: no restore, the KV is in memory); they are not
                     freed
    keep_blocks      return with the request's blocks still allocated (``Generation`` then
                     carries them as ``.blocks``), e.g. to make them resident for a later run
    use_stream       CUDA: wait and hand over on the current stream (default: on CUDA)
    load_prefix      (tokens, fn): another loader of the first `tokens` tokens, timed like a
                     restore: fn(prompt, slots) must have written their KV into the slots when
                     it returns (the per-object model's synchronous get; a returned dict's
                     "work" becomes restore_work); no engine is used
    """
    import rangekv  # the engine's package; only needed with an engine

    device = pool.device
    prompt_t = torch.as_tensor(prompt, dtype=torch.int64).reshape(-1)
    n = int(prompt_t.numel())
    if n < 2:
        raise ValueError("prompt needs at least 2 tokens")
    if load_prefix is not None and not (engine is None and resident_blocks is None
                                        and 0 < load_prefix[0] < n):
        raise ValueError("load_prefix loads tokens [0, loaded) of a prompt of more than `loaded` "
                         "tokens, without an engine or resident blocks")
    if use_stream is None:
        use_stream = device.type == "cuda"
    stream = torch.cuda.current_stream(device) if use_stream else None
    # The engine takes the CPU tensor as it is (a 64K-token Python list cost milliseconds to
    # build and again to convert, three times per request).
    prompt_cpu = prompt_t.cpu()
    total = n + max_new_tokens
    B = pool.block_size
    phases: dict[str, float] = {}

    _sync(device)
    t0 = time.perf_counter()

    def mark(name: str) -> None:
        phases[name] = (time.perf_counter() - t0) * 1e3

    # Blocks: resident prefix blocks first (shared, not freed), then new ones.
    if resident_blocks is not None:
        if resident_tokens % B:
            raise ValueError("resident_tokens must be a multiple of the block size")
        own = pool.allocate(pool.blocks_for(total) - resident_tokens // B)
        blocks = list(resident_blocks[: resident_tokens // B]) + own
    else:
        own = pool.allocate(pool.blocks_for(total))
        blocks = own
    slots = pool.slot_mapping(blocks, total)
    gen = Generation(tokens=[], logits=[], ttft_s=0.0, prompt_tokens=n,
                     resident_tokens=resident_tokens)

    env = rangekv.Envelope(request_id) if engine is not None else None
    handle = None
    cache = None
    past = resident_tokens
    try:
        if load_prefix is not None:
            loaded, fn = load_prefix
            got = fn(prompt_cpu, slots[:loaded])
            if isinstance(got, dict) and isinstance(got.get("work"), dict):
                gen.restore_work = dict(got["work"])
            _sync(device)
            mark("prefix_loaded")
            past = loaded
            gen.hit_tokens = loaded
        if engine is not None and restore and resident_blocks is None:
            hit, ticket = engine.lookup(prompt_cpu, env, granularity)
            mark("lookup")
            if endpoint_tokens is not None:
                hit = min(hit, endpoint_tokens)
            if hit > 0:
                try:
                    handle = engine.start_restore(ticket, env, prompt_cpu, endpoint_tokens=hit)
                except rangekv.StaleTicket as e:
                    # The index changed since the lookup (a pack failed verification during the
                    # lookup's prefetch, or was evicted): the lookup is asked again, once.
                    gen.restore_error, gen.claim_retried = repr(e), True
                    engine.release_request(env)
                    hit, ticket = engine.lookup(prompt_cpu, env, granularity)
                    if endpoint_tokens is not None:
                        hit = min(hit, endpoint_tokens)
                    if hit > 0:
                        handle = engine.start_restore(ticket, env, prompt_cpu, endpoint_tokens=hit)
            gen.hit_tokens = hit
            if handle is not None:
                mark("claim")
                handle.bind_slots(pool.kv_layers, slots[:hit])
                mark("bind")
                past = hit
            else:
                engine.release_request(env)
        store_h = None
        if engine is not None and store:
            store_h = engine.begin_store(env, prompt_cpu, pool.kv_layers, slots[:n])
            gen.store_disposition = store_h.disposition
            mark("store_admitted")

        cache = RangeKVCache(
            pool, slots, past_tokens=past, restore=handle, store=store_h, store_mode=store_mode,
            stream=stream, produce_until=n,
        )
        cache.t0 = t0
        ids = prompt_t[past:].to(device).unsqueeze(0)
        failed_at = None
        try:
            logits = _forward(model, ids, cache)
        except RestoreFailed:
            failed_at = "wait"
        mark("forward_done")
        if handle is not None:
            out = handle.finish()
            handle = None
            mark("restore_finished")
            gen.restore_ok = bool(out.ok)
            gen.restore_failed = [tuple(f) for f in out.failed]
            gen.restore_work = dict(out.work)
            if not out.ok:
                gen.restore_error = repr(out.status)
                failed_at = failed_at or "finish"
        if failed_at is not None:
            # Recompute from the first token not delivered (tokens before it were delivered in
            # every layer and their scatters completed before finish returned).
            first_bad = min([f[0] for f in gen.restore_failed] or [0])
            if store_h is not None:
                store_h.finish()  # aborted: not every layer was produced
                store_h = engine.begin_store(env, prompt_cpu, pool.kv_layers, slots[:n])
                gen.store_disposition = store_h.disposition
            cache.rewind(first_bad)
            cache.set_store(store_h)
            gen.recomputed_prefix_tokens = past - first_bad
            past = first_bad
            ids = prompt_t[past:].to(device).unsqueeze(0)
            logits = _forward(model, ids, cache)
            mark("recomputed")
        gen.restored_tokens = past if resident_blocks is None and load_prefix is None else 0
        if store_h is not None and store_mode == "forward":
            cache.produce_all()
        nxt = int(torch.argmax(logits).item())  # synchronises the device
        gen.ttft_s = time.perf_counter() - t0
        mark("first_token")
        gen.tokens.append(nxt)
        gen.logits.append(logits.detach().float().cpu())
        for _ in range(max_new_tokens - 1):
            logits = _forward(model, torch.tensor([[nxt]], device=device), cache)
            nxt = int(torch.argmax(logits).item())
            gen.tokens.append(nxt)
            gen.logits.append(logits.detach().float().cpu())
        if store_h is not None:
            if wait_store:
                sout = store_h.finish()
            else:
                sout = store_h.finish(detach=True)
            store_h = None
            gen.store_ok = bool(sout.ok)
            gen.store_error = None if sout.ok else repr(sout.status)
            gen.store_work = dict(sout.work)
            mark("store_finished")
        if engine is not None:
            engine.release_request(env)
    finally:
        if handle is not None:
            handle.cancel()
            handle.finish()
        gen.phases_ms = phases
        if cache is not None:
            phases.update(cache.phases)
        if keep_blocks:
            gen.blocks = blocks  # type: ignore[attr-defined]
        else:
            pool.free(own)
    return gen


def reference_generate(model, prompt, *, max_new_tokens: int = 2, device="cpu") -> Generation:
    """Greedy generation with transformers' own DynamicCache (full recompute), no RangeKV."""
    from transformers import DynamicCache

    prompt_t = torch.as_tensor(prompt, dtype=torch.int64).reshape(1, -1).to(device)
    cache = DynamicCache(config=model.config)
    dev = torch.device(device)
    _sync(dev)
    t0 = time.perf_counter()
    out = model(input_ids=prompt_t, past_key_values=cache, use_cache=True, logits_to_keep=1)
    logits = out.logits[0, -1]
    nxt = int(torch.argmax(logits).item())
    gen = Generation(tokens=[nxt], logits=[logits.float().cpu()], ttft_s=time.perf_counter() - t0,
                     prompt_tokens=prompt_t.shape[1])
    for _ in range(max_new_tokens - 1):
        out = model(input_ids=torch.tensor([[nxt]], device=dev), past_key_values=cache,
                    use_cache=True, logits_to_keep=1)
        logits = out.logits[0, -1]
        nxt = int(torch.argmax(logits).item())
        gen.tokens.append(nxt)
        gen.logits.append(logits.float().cpu())
    return gen
