"""What the workloads of ``rangekv bench serve`` share (serve.py: the fixed request;
serve_workloads.py: docqa and break-even): a vLLM OpenAI server process on loopback, the client
process that times requests against it, the connector's configuration for an arm, what an arm's
server reserves and moves, the progress line, and the run's context. Imports point down: serve.py
and serve_workloads.py import this module, never the other way round.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


@dataclasses.dataclass
class Context:
    """One run's settings and places, handed to every workload."""
    args: object
    python: str
    work: str
    store_root: str
    model_dir: str
    max_len: int
    progress: object


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One vLLM OpenAI server process; its log goes to `log_path`."""

    def __init__(self, model_dir: str, extra_args: list[str], env: dict, log_path: str,
                 max_len: int, kv_gib: float, python: str, block_size: int = 32,
                 max_num_seqs: int = 1, num_blocks: int | None = None, dtype: str = "auto"):
        self.port = _free_port()
        self.log_path = log_path
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
               "--served-model-name", "bench", "--skip-tokenizer-init", "--enforce-eager",
               "--block-size", str(block_size), "--host", "127.0.0.1", "--port", str(self.port),
               "--max-model-len", str(max_len), "--seed", "0", "--max-num-seqs", str(max_num_seqs),
               "--max-num-batched-tokens", str(max_len), "--enable-prompt-tokens-details",
               # The model's dtype: vLLM's "auto" would run a float32 checkpoint in 16 bits.
               "--dtype", dtype]
        if num_blocks:
            cmd += ["--num-gpu-blocks-override", str(num_blocks)]
        cmd += extra_args
        full_env = dict(os.environ)
        full_env.update({"VLLM_CPU_KVCACHE_SPACE": str(max(1, int(kv_gib))),
                         "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"})
        full_env.update(env)
        self.cmd = cmd
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)

    def wait_ready(self, timeout: float) -> str | None:
        """None when /health answers; else the reason (process exit and the log's tail)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return f"server exited with {self.proc.returncode}: {self.tail()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return None
            except (OSError, http.client.HTTPException):  # not listening or not answering yet
                pass
            time.sleep(1.0)
        return f"not ready after {timeout:.0f} s: {self.tail()}"

    def tail(self, n: int = 1500) -> str:
        self.log.flush()
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines()
                 if ("Error" in line or "error" in line) and "errors.pydantic.dev" not in line
                 and "ulimit" not in line]
        return (" / ".join(lines[-3:]) if lines else text[-n:]).strip()[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


    def scrape(self) -> dict | None:
        """The server's /metrics, summed over labels (serve_stats.parse_prometheus)."""
        from .serve_client import scrape

        return scrape("127.0.0.1", self.port)

    def memory(self) -> dict:
        """RSS, peak and locked bytes of the server's process tree (its own session)."""
        from .serve_stats import process_tree_memory
        return process_tree_memory(self.proc.pid)


def run_client(port: int, requests, workdir: str, python: str):
    """Runs the client process over `requests` (a list, or {"phases": [...]}, serve_client.py)."""
    path = os.path.join(workdir, f"requests-{port}.json")
    with open(path, "w") as f:
        json.dump(requests, f)
    out = subprocess.run([python, "-m", "rangekv.bench.serve_client", "--port", str(port),
                          "--model", "bench", "--requests", path],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        def failed(rs):
            return [{"id": r["id"], "error": f"client failed: {out.stderr[-800:]}", "ttft_s": None,
                     "token_ids": [], "logprobs": [], "prompt_tokens": len(r.get("prompt", [])),
                     "cached_tokens": None} for r in rs]
        if isinstance(requests, dict):
            return {"phases": [{"name": p.get("name", ""), "concurrency": p.get("concurrency", 1),
                                "wall_s": 0.0, "metrics_before": None, "metrics_after": None,
                                "results": failed(p["requests"])} for p in requests["phases"]]}
        return failed(requests)
    return json.loads(out.stdout)


class Progress:
    """Progress lines with an ETA on stderr: one step per server started."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.done, self.t0, self.quiet = max(1, total), 0, time.time(), quiet

    def log(self, *a) -> None:
        if not self.quiet:
            print(*a, file=sys.stderr, flush=True)

    def step(self, what: str) -> None:
        el = time.time() - self.t0
        eta = f"{el / self.done * (self.total - self.done):.0f}s" if self.done else "?"
        self.done += 1
        self.log(f"[serve] {self.done}/{self.total} {what} (elapsed {el:.0f}s, ETA {eta})")


def store_capacity(args, tokens: int) -> int:
    """Pack-file capacity for a store that must hold `tokens` prompt tokens: twice their KV
    bytes, at least 8 packs, in whole packs (a pack is layers x stripe_bytes). The engine
    allocates the whole file at start-up, so the connector's 16 GiB default would take 16 GiB
    of RAM on /dev/shm and of disk per arm."""
    from ..vllm.config import parse_size

    stripe = parse_size("stripe_bytes",
                        json.loads(args.connector_extra).get("stripe_bytes", 32 << 20))
    pack = args.layers * stripe
    packs = max(8, -(-2 * tokens * kv_bytes_per_token(args) // pack))
    return packs * pack


def connector_extra(args, store_dir: str, tokens: int, **extra) -> dict:
    """The connector's kv_connector_extra_config for an arm whose store holds `tokens` tokens
    (--connector-extra overrides, capacity included)."""
    return {"store_dir": store_dir, "save_mode": "visible",
            "capacity": store_capacity(args, tokens), **json.loads(args.connector_extra), **extra}


# vLLM's API server kills its workers at once on SIGTERM unless --shutdown-timeout is set: the
# connector's shutdown (drain, clean snapshot) would never run and every store would be left
# dirty (reopened from its journal; `rangekv inspect`, which the read ceiling uses, then lists
# no records).
SHUTDOWN_ARGS = ("--shutdown-timeout", "30")


def connector_args(args, extra: dict) -> list[str]:
    cfg = {"kv_connector": args.connector_class, "kv_connector_module_path": args.connector_module,
           "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": extra}
    return ["--kv-transfer-config", json.dumps(cfg), *SHUTDOWN_ARGS]


def arm_resources(server: Server, extra: dict | None, layers: int, kv_cache_bytes: int | None,
                  metrics: dict | None = None) -> dict:
    """What the arm's server reserves and moves (the paper's Figure 9), read before it stops:
    RSS / peak / locked bytes of its process tree, the connector's configured bank bytes,
    vLLM's KV cache bytes, and RangeKV's payload bytes over the server's life (or `metrics`,
    a delta)."""
    from .serve_stats import METRICS, bank_bytes, metrics_delta
    if metrics is None:
        now = server.scrape()
        metrics = metrics_delta({}, now) if now is not None else {}
    return {"memory": server.memory(), "bank_bytes": bank_bytes(extra, layers) if extra else 0,
            "kv_cache_bytes": kv_cache_bytes,
            "payload": {k: v for k, v in metrics.items() if k in METRICS}}


def kv_bytes_per_token(args) -> int:
    return 2 * getattr(args, "kv_heads", 8) * 128 * getattr(args, "dtype_bytes", 2) * args.layers
