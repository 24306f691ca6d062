"""Helpers of the vLLM connector tests: a tiny random Llama made at test time, and one vLLM
engine per configuration run as a child process (run_llm.py) that handles several rounds of
requests. Skipped when vLLM is not importable (run them with scripts/vllm_test.sh)."""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from pathlib import Path



HERE = Path(__file__).parent
BLOCK = 32
VOCAB = 1024


def make_model(d: Path) -> str:
    """A 2-layer Llama (hidden 256, 2 KV heads x 64) with random weights large enough
    (initializer_range 0.05) that outputs depend on the KV cache."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, initializer_range=0.05)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    return str(d)


def rand_tokens(seed: int, n: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(VOCAB) for _ in range(n)]


def kv_config(store_dir, **extra) -> dict:
    cfg = {"store_dir": str(store_dir), "capacity": "256MiB", "stripe_bytes": "1MiB",
           "direct_io": False}
    cfg.update(extra)
    return {"kv_connector": "RangeKVConnector", "kv_connector_module_path": "rangekv.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": cfg}


class EngineRun:
    def __init__(self, rounds, stats, log, rc):
        self.rounds, self.stats, self.log, self.rc = rounds, stats, log, rc


def run_engine(tmp: Path, name: str, model: str, rounds, kv_transfer_config=None,
               llm_kwargs=None, env=None, expect_fail=False) -> EngineRun:
    """Starts one vLLM engine (a child process), runs the rounds, returns the outputs and
    the connector's cumulative counters (rank 0)."""
    job = {"model": model, "kv_transfer_config": kv_transfer_config, "rounds": rounds,
           "llm_kwargs": {"enable_prefix_caching": kv_transfer_config is None,
                          **(llm_kwargs or {})},
           "corrupt_flag": str(tmp / f"{name}.corrupt")}
    jf = tmp / f"{name}.json"
    jf.write_text(json.dumps(job))
    stats = tmp / f"{name}.stats"
    e = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_NUM_OF_RESERVED_CPU="1",
             RANGEKV_VLLM_STATS_FILE=str(stats),
             RANGEKV_VLLM_TEST_CORRUPT_FLAG=job["corrupt_flag"], PYTHONHASHSEED="0")
    e.update(env or {})
    p = subprocess.run([sys.executable, str(HERE / "run_llm.py"), str(jf)], env=e,
                       capture_output=True, text=True, timeout=900)
    log = p.stdout + p.stderr
    (tmp / f"{name}.log").write_text(log)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if expect_fail:
        return EngineRun(None, None, log, p.returncode)
    assert p.returncode == 0 and lines, f"engine {name} failed:\n{log[-6000:]}"
    sf = Path(f"{stats}.rank0")
    st = ast.literal_eval(sf.read_text()) if sf.exists() else {}
    return EngineRun(json.loads(lines[-1][len("RESULT "):]), st, log, p.returncode)
