"""Client process of ``rangekv bench serve``: sends token-id prompts to a vLLM OpenAI server.

    python -m rangekv.bench.serve_client --port P --model NAME --requests FILE

FILE is JSON, either a list of {"id": str, "prompt": [token ids], "max_tokens": int}, sent one
at a time (an entry {"id": str, "action": "reset"} instead empties vLLM's own prefix cache
through ``POST /reset_prefix_cache``, which a server started with VLLM_SERVER_DEV_MODE=1 has;
its result is {"id", "reset": bool, "error"}), or
{"phases": [{"name": str, "concurrency": int, "metrics": bool, "requests": [...]}, ...]}: each
phase's requests are sent in order by `concurrency` threads (each takes the next request when
its previous one finished), and with "metrics" the server's /metrics is read before and after
the phase. Every request goes to ``/v1/completions`` with streaming; TTFT is the time
from just before the request is written to the arrival of the first streamed chunk that carries
a token. Prints on stdout, for a list: a JSON list of {"id", "ttft_s", "total_s", "start_s",
"token_ids", "logprobs", "prompt_tokens", "cached_tokens", "error"}; for phases: {"phases":
[{"name", "concurrency", "wall_s", "metrics_before", "metrics_after", "results": [...]}]}.
``cached_tokens`` is the server's usage.prompt_tokens_details.cached_tokens (None unless the
server runs with --enable-prompt-tokens-details).
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import sys
import threading
import time

try:
    from rangekv.bench.serve_stats import parse_prometheus
except ImportError:  # run as a plain script
    from serve_stats import parse_prometheus  # type: ignore


def complete(host: str, port: int, model: str, prompt: list[int], max_tokens: int,
             timeout: float) -> dict:
    body = json.dumps({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
        "stream": True, "logprobs": 1, "ignore_eos": True, "return_token_ids": True,
        "return_tokens_as_token_ids": True,  # logprobs without a tokenizer
        "stream_options": {"include_usage": True},  # the last chunk: usage with cached tokens
    }).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    out = {"ttft_s": None, "total_s": None, "start_s": None, "token_ids": [], "logprobs": [],
           "prompt_tokens": len(prompt), "cached_tokens": None, "error": None}
    try:
        conn.connect()
        t0 = time.perf_counter()
        out["start_s"] = t0
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
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
            usage = chunk.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                out["cached_tokens"] = int(details["cached_tokens"])
            for choice in chunk.get("choices") or []:
                ids = choice.get("token_ids") or []
                lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
                if ids and out["ttft_s"] is None:
                    out["ttft_s"] = time.perf_counter() - t0
                out["token_ids"].extend(ids)
                out["logprobs"].extend(lp)
        out["total_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - reported per request, the run goes on
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return out


def _http(host: str, port: int, method: str, path: str, timeout: float) -> tuple[int, str]:
    """(status, body) of one plain HTTP request."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def reset_prefix_cache(host: str, port: int, timeout: float = 30.0, tries: int = 20) -> dict:
    """Empties vLLM's local prefix cache (not the connector's). vLLM refuses while blocks are
    held (a request still finishing): retried a few times."""
    err = None
    for _ in range(tries):
        try:
            status, body = _http(host, port, "POST", "/reset_prefix_cache", timeout)
            if status == 200 and json.loads(body).get("success"):
                return {"reset": True, "error": None}
            err = f"HTTP {status}: {body[:200]}"
        except Exception as e:  # noqa: BLE001 - retried, and the last one is reported
            err = f"{type(e).__name__}: {e}"
        time.sleep(0.25)
    return {"reset": False, "error": err}


def scrape(host: str, port: int, timeout: float = 10.0) -> dict | None:
    """The server's /metrics as {name: value summed over labels}; None when unreadable."""
    try:
        status, text = _http(host, port, "GET", "/metrics", timeout)
        return parse_prometheus(text) if status == 200 else None
    except Exception:  # noqa: BLE001 - unreadable, whatever the reason: the row has no metrics
        return None


def run_concurrent(host: str, port: int, model: str, reqs: list[dict], concurrency: int,
                   timeout: float) -> list[dict]:
    """Sends `reqs` in order through `concurrency` threads; results in request order."""
    todo: queue.Queue = queue.Queue()
    for i, r in enumerate(reqs):
        todo.put((i, r))
    results: list[dict | None] = [None] * len(reqs)

    def worker() -> None:
        while True:
            try:
                i, r = todo.get_nowait()
            except queue.Empty:
                return
            res = complete(host, port, model, r["prompt"], r.get("max_tokens", 2), timeout)
            res["id"] = r["id"]
            results[i] = res

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results  # type: ignore[return-value]


def run_phases(host: str, port: int, model: str, phases: list[dict], timeout: float) -> dict:
    out = []
    for ph in phases:
        before = scrape(host, port) if ph.get("metrics") else None
        t0 = time.perf_counter()
        res = run_concurrent(host, port, model, ph["requests"], ph.get("concurrency", 1), timeout)
        wall = time.perf_counter() - t0
        # vLLM publishes its counters on its periodic stats tick: let the last one land.
        if ph.get("metrics"):
            time.sleep(ph.get("metrics_settle_s", 0.0))
        after = scrape(host, port) if ph.get("metrics") else None
        for r in res:
            r["start_s"] = r["start_s"] - t0 if r["start_s"] is not None else None
        out.append({"name": ph.get("name", ""), "concurrency": ph.get("concurrency", 1),
                    "wall_s": wall, "metrics_before": before, "metrics_after": after,
                    "results": res})
    return {"phases": out}


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
    if isinstance(reqs, dict):
        json.dump(run_phases(a.host, a.port, a.model, reqs["phases"], a.timeout), sys.stdout)
        return 0
    results = []
    for r in reqs:
        if r.get("action") == "reset":
            results.append({"id": r["id"], **reset_prefix_cache(a.host, a.port)})
            continue
        res = complete(a.host, a.port, a.model, r["prompt"], r.get("max_tokens", 2), a.timeout)
        res["id"] = r["id"]
        results.append(res)
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
