"""Client process of ``rangekv bench serve``: sends token-id prompts to a vLLM OpenAI server.

    python -m rangekv.bench.serve_client --port P --model NAME --requests FILE

FILE is JSON: a list of {"id": str, "prompt": [token ids], "max_tokens": int}. Requests are sent
one at a time to ``/v1/completions`` with streaming; for each, TTFT is the time from just before
the request is written to the arrival of the first streamed chunk that carries a token. Prints
one JSON list of {"id", "ttft_s", "total_s", "token_ids", "logprobs", "error"} on stdout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time


def complete(host: str, port: int, model: str, prompt: list[int], max_tokens: int, timeout: float) -> dict:
    body = json.dumps({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
        "stream": True, "logprobs": 1, "ignore_eos": True, "return_token_ids": True,
        "return_tokens_as_token_ids": True,  # logprobs without a tokenizer
    }).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    out = {"ttft_s": None, "total_s": None, "token_ids": [], "logprobs": [], "error": None}
    try:
        conn.connect()
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:500].decode(errors='replace')}"
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out["error"] = json.dumps(chunk["error"])[:500]
                break
            for choice in chunk.get("choices", []):
                ids = choice.get("token_ids") or []
                lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
                if ids and out["ttft_s"] is None:
                    out["ttft_s"] = time.perf_counter() - t0
                out["token_ids"].extend(ids)
                out["logprobs"].extend(lp)
        out["total_s"] = time.perf_counter() - t0
    except Exception as e:  # reported per request, the run goes on
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--requests", required=True)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    with open(a.requests) as f:
        reqs = json.load(f)
    results = []
    for r in reqs:
        res = complete(a.host, a.port, a.model, r["prompt"], r.get("max_tokens", 2), a.timeout)
        res["id"] = r["id"]
        results.append(res)
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
