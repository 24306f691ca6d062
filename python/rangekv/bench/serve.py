"""``rangekv bench serve``: client TTFT through a real vLLM OpenAI server on loopback.

What it does:
  1. writes a random-weight Llama checkpoint (transformers ``LlamaForCausalLM(config)``,
     ``initializer_range`` 0.05, safetensors) with Llama-3.1-8B's per-layer KV geometry (8 KV
     heads x 128, bf16: 4 KiB per token per layer) and ``--layers`` layers;
  2. per server configuration, starts ``python -m vllm.entrypoints.openai.api_server`` on
     127.0.0.1 (no tokenizer, eager, block size 32), waits for ``/health``;
  3. runs a separate client process (``rangekv.bench.serve_client``) that sends token-id
     prompts to ``/v1/completions`` with streaming and times submission -> first streamed
     token; stops the server.

Arms:
  recompute   vLLM's prefix cache off, no connector: every prompt computed whole
  resident    vLLM's own prefix cache on: before each measured prompt, a request sharing
              only the prefix puts the prefix in vLLM's cache (the paper's resident control)
  rangekv G   the RangeKV connector (``--connector-module`` / ``--connector-class``), vLLM's
              prefix cache off: a setup request stores the prefix once, then every measured
              prompt (the same prefix, a fresh suffix) restores it from RangeKV. The connector
              looks up at vLLM's block size, so the reuse granularity G (prefix / G logical
              objects) is the server's ``--block-size`` (32..256 on the CPU backend; the resident
              and recompute arms run at 32); ``rangekv LW`` the connector's layerwise mode;
              ablations through the connector's ``ablations`` option
  lmcache / offloading  LMCache's connector and vLLM's OffloadingConnector, tried: each row
              shows TTFT or the error with which the server or the requests failed

Every measured prompt is also sent to the recompute server; each arm's tokens and logprobs are
compared with recompute's. Prompt r of every arm is the same (prefix + suffix r), so the
comparison and the paired differences (arm minus resident at the same r) are per prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ABLATIONS = ("index=scalar", "read_issue=object", "delivery=barrier", "prefetch=dispatch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_model(path: str, *, layers: int, vocab: int, hidden: int, intermediate: int, max_len: int,
                seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=max(8, hidden // 128), num_key_value_heads=8,
                      head_dim=128, max_position_embeddings=max_len, initializer_range=0.05,
                      dtype=torch.bfloat16, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)


class Server:
    """One vLLM OpenAI server process; its log goes to `log_path`."""

    def __init__(self, model_dir: str, extra_args: list[str], env: dict, log_path: str, max_len: int,
                 kv_gib: float, python: str, block_size: int = 32):
        self.port = _free_port()
        self.log_path = log_path
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
               "--served-model-name", "bench", "--skip-tokenizer-init", "--enforce-eager",
               "--block-size", str(block_size), "--host", "127.0.0.1", "--port", str(self.port),
               "--max-model-len", str(max_len), "--seed", "0", "--max-num-seqs", "1",
               "--max-num-batched-tokens", str(max_len)] + extra_args
        full_env = dict(os.environ)
        full_env.update({"VLLM_CPU_KVCACHE_SPACE": str(max(1, int(kv_gib))), "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"})
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
            except Exception:
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
        lines = [l.strip() for l in text.splitlines()
                 if ("Error" in l or "error" in l) and "errors.pydantic.dev" not in l and "ulimit" not in l]
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


def run_client(port: int, requests: list[dict], workdir: str, python: str) -> list[dict]:
    path = os.path.join(workdir, f"requests-{port}.json")
    with open(path, "w") as f:
        json.dump(requests, f)
    out = subprocess.run([python, "-m", "rangekv.bench.serve_client", "--port", str(port), "--model", "bench",
                          "--requests", path], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return [{"id": r["id"], "error": f"client failed: {out.stderr[-800:]}", "ttft_s": None,
                 "token_ids": [], "logprobs": []} for r in requests]
    return json.loads(out.stdout)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def arm_configs(args, store_root: str) -> list[dict]:
    grans = [int(g) for g in args.granularities.split(",")]
    arms = [{"name": "recompute", "kind": "recompute", "args": ["--no-enable-prefix-caching"]},
            {"name": "resident", "kind": "resident", "args": []}]

    # The connector looks up at vLLM's block size: the reuse granularity (and so the prefix's
    # logical object count) is the server's --block-size.
    def connector(name, extra, kind="rangekv", gran=32, layerwise=False):
        cfg = {"kv_connector": args.connector_class, "kv_connector_module_path": args.connector_module,
               "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
               "kv_connector_extra_config": {"store_dir": os.path.join(store_root, name.replace(" ", "_")),
                                             "save_mode": "visible",
                                             **json.loads(args.connector_extra), **extra}}
        arms.append({"name": name, "kind": kind, "granularity": gran, "layerwise": layerwise, "block_size": gran,
                     "args": ["--no-enable-prefix-caching", "--kv-transfer-config", json.dumps(cfg)]})

    if not args.skip_rangekv:
        for g in grans:
            connector(f"rangekv {args.prefix // g}", {}, gran=g)
        connector(f"rangekv {args.prefix // grans[0] * args.layers} LW", {"layerwise": True}, gran=grans[0],
                  layerwise=True)
        if not args.no_ablations:
            for ab in ABLATIONS:
                connector(f"{ab} @ {args.prefix // grans[0]}", {"ablations": f"{ab},object_tokens={grans[0]}"},
                          kind="ablation", gran=grans[0])
    if args.peers:
        arms.append({"name": "lmcache", "kind": "peer", "args": [
            "--no-enable-prefix-caching", "--kv-transfer-config",
            json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]})
        arms.append({"name": "offloading", "kind": "peer", "args": [
            "--no-enable-prefix-caching", "--kv-transfer-config",
            json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                        "kv_connector_extra_config": {"cpu_bytes_to_use": 1 << 30}})]})
    if args.arms:
        keep = set(args.arms.split(","))
        arms = [a for a in arms if a["kind"] in keep or a["name"] in keep]
    if not any(a["kind"] == "recompute" for a in arms):
        arms.insert(0, {"name": "recompute", "kind": "recompute", "args": ["--no-enable-prefix-caching"]})
    return arms


def run(args) -> dict:
    import torch

    python = sys.executable
    work = tempfile.mkdtemp(prefix="rangekv-serve-", dir=args.tmp_dir)
    store_root = args.store_root or os.path.join(work, "stores")
    os.makedirs(store_root, exist_ok=True)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    max_len = args.prefix + args.suffix + args.output_tokens + 64
    model_dir = os.path.join(work, "model")
    log(f"[serve] writing a random {args.layers}-layer model to {model_dir}")
    write_model(model_dir, layers=args.layers, vocab=args.vocab, hidden=args.hidden,
                intermediate=args.intermediate, max_len=max_len, seed=args.seed)
    g = torch.Generator().manual_seed(args.seed)
    prefix = torch.randint(0, args.vocab, (args.prefix,), generator=g).tolist()
    suffixes = [torch.randint(0, args.vocab, (args.suffix,), generator=g).tolist() for _ in range(args.reps)]
    other = [torch.randint(0, args.vocab, (args.suffix,), generator=g).tolist() for _ in range(args.reps + 1)]
    prompts = [prefix + s for s in suffixes]

    arms = arm_configs(args, store_root)
    results = {"workload": "serve", "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "machine": {"node": os.uname().nodename, "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
               "config": {"layers": args.layers, "hidden": args.hidden, "kv_heads": 8, "head_size": 128,
                          "dtype": "bfloat16", "prefix": args.prefix, "suffix": args.suffix,
                          "output_tokens": args.output_tokens, "reps": args.reps, "block_size": 32,
                          "connector": f"{args.connector_module}.{args.connector_class}"},
               "arms": []}
    t0 = time.time()
    reference = None
    for ai, arm in enumerate(arms):
        el = time.time() - t0
        eta = el / ai * (len(arms) - ai) if ai else float("nan")
        log(f"[serve] arm {ai + 1}/{len(arms)} {arm['name']} (elapsed {el:.0f}s, ETA {eta:.0f}s)")
        row = {"name": arm["name"], "kind": arm["kind"], "granularity": arm.get("granularity"),
               "layerwise": arm.get("layerwise", False), "ttft_s": [], "error": None}
        server = Server(model_dir, arm["args"], {}, os.path.join(work, f"server-{ai}.log"), max_len,
                        args.kv_cache_gib, python, block_size=arm.get("block_size", 32))
        try:
            err = server.wait_ready(args.start_timeout)
            if err:
                row["error"] = err
                results["arms"].append(row)
                log(f"[serve]   {arm['name']} did not start: {err}")
                continue
            reqs = [{"id": "warm", "prompt": other[-1][:64] + other[-1], "max_tokens": args.output_tokens}]
            if arm["kind"] in ("rangekv", "ablation", "peer"):
                reqs.append({"id": "store-prefix", "prompt": prefix + other[-1], "max_tokens": 1})
            for r, p in enumerate(prompts):
                if arm["kind"] == "resident":
                    reqs.append({"id": f"prime-{r}", "prompt": prefix + other[r], "max_tokens": 1})
                reqs.append({"id": f"measure-{r}", "prompt": p, "max_tokens": args.output_tokens})
            out = run_client(server.port, reqs, work, python)
        finally:
            server.stop()
        measured = [o for o in out if o["id"].startswith("measure-")]
        row["ttft_s"] = [o["ttft_s"] for o in measured]
        row["token_ids"] = [o["token_ids"] for o in measured]
        row["logprobs"] = [o["logprobs"] for o in measured]
        row["request_errors"] = [o["error"] for o in out if o.get("error")]
        row["median_s"] = _median(row["ttft_s"])
        if arm["kind"] == "recompute":
            reference = row
        elif reference is not None:
            row["tokens_match"] = [a == b for a, b in zip(row["token_ids"], reference["token_ids"])]
            row["max_logprob_diff"] = [
                max((abs(x - y) for x, y in zip(a, b) if x is not None and y is not None), default=None)
                for a, b in zip(row["logprobs"], reference["logprobs"])]
        results["arms"].append(row)
        log(f"[serve]   {arm['name']}: median {row['median_s']} s, samples {row['ttft_s']}")
    resident = next((r for r in results["arms"] if r["kind"] == "resident"), None)
    for r in results["arms"]:
        if resident and r["kind"] in ("rangekv", "ablation", "peer") and r["ttft_s"]:
            diffs = [(a - b) * 1e3 for a, b in zip(r["ttft_s"], resident["ttft_s"]) if a is not None and b is not None]
            r["minus_resident_ms"] = diffs
            r["median_minus_resident_ms"] = _median(diffs)
    results["wall_s"] = time.time() - t0
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        results["workdir"] = work
    return results


def table(results: dict) -> str:
    rows = results["arms"]
    lines = ["| Arm | Median TTFT (s) | minus resident (ms) | tokens = recompute | samples (s) / error |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        med = "-" if r.get("median_s") is None else f"{r['median_s']:.3f}"
        diff = r.get("median_minus_resident_ms")
        diff = "-" if diff is None else f"{diff:.0f}"
        tm = r.get("tokens_match")
        tm = "ref" if r["kind"] == "recompute" else ("-" if tm is None else f"{sum(tm)}/{len(tm)}")
        detail = r["error"] or " ".join("-" if x is None else f"{x:.3f}" for x in r["ttft_s"])
        if r.get("request_errors"):
            detail += f" (request errors: {r['request_errors'][0][:200]})"
        lines.append(f"| {r['name']} | {med} | {diff} | {tm} | {detail} |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="client TTFT through vLLM's OpenAI server with the RangeKV connector")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--prefix", type=int, default=8192, help="cached prefix tokens (multiple of 32)")
    p.add_argument("--suffix", type=int, default=2720, help="new tokens (about a third of the prefix)")
    p.add_argument("--output-tokens", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--granularities", default="256,128,64,32",
                   help="vLLM block sizes of the RangeKV arms (the connector's reuse granularity), coarse first")
    p.add_argument("--arms", default="", help="comma list of arm kinds or names to keep")
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--skip-rangekv", action="store_true", help="only the recompute and resident arms")
    p.add_argument("--peers", action="store_true", help="also try LMCache's and vLLM's offloading connectors")
    p.add_argument("--connector-module", default="rangekv.vllm")
    p.add_argument("--connector-class", default="RangeKVConnector")
    p.add_argument("--connector-extra", default="{}", help="JSON merged into kv_connector_extra_config")
    p.add_argument("--kv-cache-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--store-root", help="where the connector's stores go (default: the work dir)")
    p.add_argument("--tmp-dir", default="/var/tmp")
    p.add_argument("--keep", action="store_true", help="keep the work dir (model, logs, stores)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.prefix % 32:
        raise SystemExit("--prefix must be a multiple of the block size (32)")
    results = run(args)
    results["table"] = table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(results["table"])
    return 0
