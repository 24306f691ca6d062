"""One vLLM engine for the connector tests: reads a JSON job, runs its rounds of prompts through
one `vllm.LLM` (greedy, logprobs), prints one JSON line `RESULT {...}` with every output.

Job: {"corrupt_flag": path (optional), "model": dir, "kv_transfer_config": {...} | null, "max_model_len": int,
      "rounds": [[{"prompt": [ids], "max_tokens": n}, ...], ...], "llm_kwargs": {...}}
"""

import json
import os
import sys


def main() -> None:
    job = json.load(open(sys.argv[1]))
    from vllm import LLM, SamplingParams

    kwargs = dict(model=job["model"], skip_tokenizer_init=True, enforce_eager=True,
                  block_size=32, max_model_len=job.get("max_model_len", 4096), seed=0,
                  enable_prefix_caching=False)
    if job.get("kv_transfer_config") is not None:
        kwargs["kv_transfer_config"] = job["kv_transfer_config"]
    kwargs.update(job.get("llm_kwargs", {}))
    llm = LLM(**kwargs)
    rounds = []
    for batch in job["rounds"]:
        flag = job.get("corrupt_flag")
        if flag:  # test-only: the worker scrambles restored blocks while this file exists
            if any(p.get("corrupt") for p in batch):
                open(flag, "w").close()
            elif os.path.exists(flag):
                os.remove(flag)
        prompts = [{"prompt_token_ids": p["prompt"]} for p in batch]
        params = [SamplingParams(temperature=0, max_tokens=p.get("max_tokens", 8),
                                 ignore_eos=True, logprobs=5) for p in batch]
        outs = llm.generate(prompts, params, use_tqdm=False)
        res = []
        for o in outs:
            c = o.outputs[0]
            lps = [sorted((int(k), float(v.logprob)) for k, v in step.items())
                   for step in (c.logprobs or [])]
            res.append({"tokens": list(c.token_ids), "logprobs": lps,
                        "num_cached_tokens": o.num_cached_tokens})
        rounds.append(res)
    print("RESULT " + json.dumps(rounds), flush=True)
    del llm


if __name__ == "__main__":
    main()
