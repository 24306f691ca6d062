"""``rangekv bench serve``: client TTFT through a real vLLM OpenAI server on loopback.

What it does:
  1. writes a random-weight Llama checkpoint (transformers ``LlamaForCausalLM(config)``,
     ``initializer_range`` 0.05, safetensors) with Llama-3.1-8B's per-layer KV bytes (4 KiB per
     token per layer: 8 KV heads x 128 in bf16, or 4 x 128 in fp32 on a CPU without fast bf16,
     ``--dtype``) and ``--layers`` layers;
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
              prefix cache on: a setup request stores the prefix once, then every measured
              prompt (the same prefix, a fresh suffix) restores it from RangeKV, vLLM's own cache
              emptied first (POST /reset_prefix_cache), and the same shape is measured with the
              prefix resident in vLLM's cache back to back in the same server. The reuse
              granularity G (prefix / G logical objects) is the connector's
              ``reuse_granularity`` on servers of block size 32 (``--granularity-by connector``,
              the default: every server pages the same way, only the object size moves), or the
              server's ``--block-size`` itself (``--granularity-by block``, 32..256 on the CPU
              backend; how runs before 2026-12-04 did it, which also changes vLLM's own
              attention cost per arm); ``rangekv LW`` the connector's layerwise mode;
              ablations through the connector's ``ablations`` option
  lmcache / offloading  LMCache's connector and vLLM's OffloadingConnector, tried: each row
              shows TTFT or the error with which the server or the requests failed

Every measured prompt is also sent to the recompute server; each arm's tokens and logprobs are
compared with recompute's. Prompt r of every arm is the same (prefix + suffix r), so the
comparison and the paired differences (arm minus resident at the same r) are per prompt.

``--workload`` picks what runs (comma list, or ``all``): ``single`` is the fixed request above;
``docqa`` (many documents, several questions each, at concurrency 1/4/8, vLLM's KV cache smaller
than the documents) and ``breakeven`` (TTFT against prefix length on /dev/shm and disk, and the
connector's break-even threshold) are in serve_workloads.py. Every arm also records what its server
reserves and moves (RSS of its process tree, the connector's bank bytes, vLLM's KV cache,
RangeKV's payload bytes from /metrics). Output: markdown tables on stdout (the fixed request in
the form of the paper's Table 3), ``--json`` with every sample, ``--plot DIR`` PNGs (plots.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from .harness import (
    SHUTDOWN_ARGS,
    Context,
    Progress,
    Server,
    arm_resources,
    connector_extra,
    kv_bytes_per_token,
    run_client,
)
from .serve_stats import median

ABLATIONS = ("index=scalar", "read_issue=object", "delivery=barrier", "prefetch=dispatch")


def write_model(path: str, *, layers: int, vocab: int, hidden: int, intermediate: int, max_len: int,
                seed: int, dtype: str = "bfloat16", kv_heads: int = 8) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dt = getattr(torch, dtype)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=max(8, hidden // 128),
                      num_key_value_heads=kv_heads, head_dim=128, max_position_embeddings=max_len,
                      initializer_range=0.05, dtype=dt, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(dt)
    model.save_pretrained(path, safe_serialization=True)


def resolve_dtype(args) -> None:
    """Sets args.dtype, args.kv_heads and args.dtype_bytes. The KV geometry is Llama-3.1-8B's
    bytes per token per layer (4 KiB): 8 KV heads x 128 in bf16, or, where this CPU computes bf16
    much slower than fp32 (no AVX-512 BF16 or AMX: a dev VM measured 0.8 against 72 GFLOP/s), 4
    KV heads x 128 in fp32, the same bytes per token per layer for the storage path to move, with
    a model the CPU can run at the issue's prefix length. `--dtype auto` measures which."""
    if args.dtype == "auto":
        args.dtype = "bfloat16" if bf16_speed_ratio() >= 0.25 else "float32"
    args.kv_heads = 8 if args.dtype == "bfloat16" else 4
    args.dtype_bytes = 2 if args.dtype == "bfloat16" else 4


def bf16_speed_ratio() -> float:
    """bf16 matmul throughput over fp32 on one thread of this CPU (a ~0.1 s probe)."""
    import torch

    rates = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for dt in (torch.float32, torch.bfloat16):
            a, b = torch.randn(256, 512, dtype=dt), torch.randn(512, 512, dtype=dt)
            a @ b
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < 0.05:
                a @ b
                n += 1
            rates[dt] = n / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return rates[torch.bfloat16] / rates[torch.float32]


def arm_configs(args, store_root: str, shm_root: str | None = None) -> list[dict]:
    grans = [int(g) for g in args.granularities.split(",")]
    arms = [{"name": "recompute", "kind": "recompute", "args": ["--no-enable-prefix-caching"]},
            {"name": "resident", "kind": "resident", "args": []}]

    # The reuse granularity (and so the prefix's logical object count) is the connector's
    # reuse_granularity on block-32 servers, or with --granularity-by block the server's
    # --block-size (the connector's default granularity).
    # Each connector arm's server keeps vLLM's prefix cache on (the realistic deployment) and
    # runs with VLLM_SERVER_DEV_MODE=1 for POST /reset_prefix_cache: every repetition measures
    # the request restored by RangeKV (vLLM's own cache emptied first) and, back to back in the
    # same server, the same shape with the prefix resident in vLLM's cache (run_single).
    def connector(name, extra, kind="rangekv", gran=32, layerwise=False, medium="disk"):
        tokens = args.prefix + (args.suffix + 64) * (2 * args.reps + 3)
        # The shm arm's store lives on tmpfs (RAM), outside the work dir, under a name of this
        # run's own: run_single removes it.
        run_name = os.path.basename(os.path.dirname(store_root))
        root = store_root if medium == "disk" else (
            shm_root or os.path.join(args.shm_dir, run_name + "-single"))
        by_block = args.granularity_by == "block"
        if not by_block:
            extra = {"reuse_granularity": gran, **extra}
        cfg = {"kv_connector": args.connector_class,
               "kv_connector_module_path": args.connector_module, "kv_role": "kv_both",
               "kv_load_failure_policy": "recompute",
               "kv_connector_extra_config": connector_extra(
                   args, os.path.join(root, name.replace(" ", "_").replace("=", "-")), tokens,
                   **extra)}
        arms.append({"name": name, "kind": kind, "granularity": gran, "layerwise": layerwise,
                     "block_size": gran if by_block else 32,
                     "medium": medium, "extra": cfg["kv_connector_extra_config"],
                     "env": {"VLLM_SERVER_DEV_MODE": "1"},
                     "args": ["--kv-transfer-config", json.dumps(cfg), *SHUTDOWN_ARGS]})

    if not args.skip_rangekv:
        # Plain arms deliver the whole prefix before the forward (the connector's layerwise off);
        # the LW arm is the connector's default delivery.
        for g in grans:
            connector(f"rangekv {args.prefix // g}", {"layerwise": False}, gran=g)
        lw_grans = ([int(g) for g in args.lw_granularities.split(",")]
                    if args.lw_granularities else grans[:1])
        for g in lw_grans:
            connector(f"rangekv {args.prefix // g * args.layers} LW", {"layerwise": True}, gran=g,
                      layerwise=True)
        if args.shm_arm:
            connector(f"rangekv {args.prefix // grans[0]} shm", {"layerwise": False}, gran=grans[0],
                      medium="shm")
        if not args.no_ablations:
            for ab in ABLATIONS:
                connector(f"{ab} @ {args.prefix // grans[0]}",
                          {"ablations": f"{ab},object_tokens={grans[0]}", "layerwise": False},
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
        arms.insert(0, {"name": "recompute", "kind": "recompute",
                        "args": ["--no-enable-prefix-caching"]})
    return arms


def run(args) -> dict:
    from . import serve_workloads

    python = sys.executable
    work = tempfile.mkdtemp(prefix="rangekv-serve-", dir=args.tmp_dir)
    store_root = args.store_root or os.path.join(work, "stores")
    os.makedirs(store_root, exist_ok=True)
    workloads = args.workload.split(",") if args.workload != "all" else ["single", "docqa",
                                                                          "breakeven"]
    bad = set(workloads) - {"single", "docqa", "breakeven"}
    if bad:
        raise SystemExit(
            f"--workload: unknown {', '.join(sorted(bad))} (single, docqa, breakeven, all)")
    resolve_dtype(args)
    shm_root = os.path.join(args.shm_dir, os.path.basename(work) + "-single")
    arms = arm_configs(args, store_root, shm_root) if "single" in workloads else []
    steps = len(arms)
    if "docqa" in workloads:
        steps += len(serve_workloads.docqa_arms(args, store_root))
    if "breakeven" in workloads:
        steps += len(serve_workloads.breakeven_arms(args, work)) + 1  # + the gate arm
    progress = Progress(steps, args.quiet)
    log = progress.log
    max_len = max([args.prefix + args.suffix + args.output_tokens + 64] +
                  ([serve_workloads.docqa_max_len(args)] if "docqa" in workloads else []) +
                  ([serve_workloads.breakeven_max_len(args)] if "breakeven" in workloads else []))
    model_dir = os.path.join(work, "model")
    log(f"[serve] writing a random {args.layers}-layer {args.dtype} model "
        f"({args.kv_heads} KV heads x 128) to {model_dir}")
    write_model(model_dir, layers=args.layers, vocab=args.vocab, hidden=args.hidden,
                intermediate=args.intermediate, max_len=max_len, seed=args.seed, dtype=args.dtype,
                kv_heads=args.kv_heads)
    results = {"workload": "serve", "workloads": workloads,
               "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "machine": {"node": os.uname().nodename, "cpus": os.cpu_count(),
                           "load_avg": os.getloadavg()},
               "config": {"layers": args.layers, "hidden": args.hidden, "kv_heads": args.kv_heads,
                          "head_size": 128, "dtype": args.dtype, "dtype_bytes": args.dtype_bytes,
                          "kv_bytes_per_token_layer": kv_bytes_per_token(args) // args.layers,
                          "prefix": args.prefix, "suffix": args.suffix,
                          "output_tokens": args.output_tokens, "reps": args.reps, "block_size": 32,
                          "connector": f"{args.connector_module}.{args.connector_class}",
                          "connector_extra": json.loads(args.connector_extra)},
               "arms": [], "resources": []}
    ctx = Context(args=args, python=python, work=work, store_root=store_root,
                                  model_dir=model_dir, max_len=max_len, progress=progress)
    t0 = time.time()
    if "single" in workloads:
        run_single(ctx, arms, results)
    if "docqa" in workloads:
        results["docqa"] = serve_workloads.run_docqa(ctx, results["resources"])
    if "breakeven" in workloads:
        results["breakeven"] = serve_workloads.run_breakeven(ctx, results["resources"])
    results["machine"]["load_avg_end"] = os.getloadavg()
    results["wall_s"] = time.time() - t0
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        results["workdir"] = work
    return results


def single_requests(kind: str, prefix: list[int], prompts: list[list[int]], other: list[list[int]],
                    resident_suffixes: list[list[int]], output_tokens: int) -> list[dict]:
    """The client's request list for one arm of the fixed request. `other` holds reps + 1 unrelated
    suffixes (warm-up, stores, primes). A paired arm (rangekv, ablation) measures per
    repetition r the restored request "measure-r" (vLLM's own cache emptied first: "reset-r") and
    the same shape with the prefix in vLLM's cache, "resident-r"; RangeKV first in even
    repetitions, the resident run first in odd ones (after a reset and a prime, a short request
    that restores the prefix into vLLM's cache)."""
    reqs = [{"id": "warm", "prompt": other[-1][:64] + other[-1], "max_tokens": output_tokens}]
    # Storing the prefix (and priming vLLM's cache) needs the prefix in a prompt, not a long
    # suffix: 32 more tokens keep those untimed requests short on a slow CPU.
    if kind in ("rangekv", "ablation", "peer"):
        reqs.append({"id": "store-prefix", "prompt": prefix + other[-1][:32], "max_tokens": 1})
    paired = kind in ("rangekv", "ablation")
    for r, p in enumerate(prompts):
        if kind == "resident":
            reqs.append({"id": f"prime-{r}", "prompt": prefix + other[r][:32], "max_tokens": 1})
        if not paired:
            reqs.append({"id": f"measure-{r}", "prompt": p, "max_tokens": output_tokens})
            continue
        res_req = {"id": f"resident-{r}", "prompt": prefix + resident_suffixes[r],
                   "max_tokens": output_tokens}
        if r % 2:
            reqs += [{"id": f"reset-{r}a", "action": "reset"},
                     {"id": f"prime-{r}", "prompt": prefix + other[r][:32], "max_tokens": 1},
                     res_req]
        reqs += [{"id": f"reset-{r}", "action": "reset"},
                 {"id": f"measure-{r}", "prompt": p, "max_tokens": output_tokens}]
        if not r % 2:
            reqs.append(res_req)
    return reqs


def run_single(ctx, arms: list[dict], results: dict) -> None:
    """The fixed request (prefix + a fresh suffix per repetition), one server per arm."""
    shm_roots = {os.path.dirname(a["extra"]["store_dir"]) for a in arms if a.get("medium") == "shm"}
    try:
        _run_single(ctx, arms, results)
    finally:
        # The tmpfs arm's store is RAM: never left behind, whatever stopped the run.
        for root in shm_roots:
            shutil.rmtree(root, ignore_errors=True)


def _run_single(ctx, arms: list[dict], results: dict) -> None:
    import torch

    import rangekv

    from .serve_stats import metrics_delta, phase_means_ms

    args, log = ctx.args, ctx.progress.log
    g = torch.Generator().manual_seed(args.seed)
    prefix = torch.randint(0, args.vocab, (args.prefix,), generator=g).tolist()
    suffixes = [torch.randint(0, args.vocab, (args.suffix,), generator=g).tolist()
                for _ in range(args.reps)]
    other = [torch.randint(0, args.vocab, (args.suffix,), generator=g).tolist()
             for _ in range(args.reps + 1)]
    # The paired resident measurement's own suffixes (same length, never stored before).
    resident_suffixes = [torch.randint(0, args.vocab, (args.suffix,), generator=g).tolist()
                         for _ in range(args.reps)]
    prompts = [prefix + s for s in suffixes]
    kv_cache_bytes = max(1, int(args.kv_cache_gib)) << 30
    reference = None
    ceilings = results.setdefault("prefix_read_ceiling", {})
    for ai, arm in enumerate(arms):
        ctx.progress.step(f"single: {arm['name']}")
        row = {"name": arm["name"], "kind": arm["kind"], "granularity": arm.get("granularity"),
               "layerwise": arm.get("layerwise", False), "ttft_s": [], "error": None}
        server = Server(ctx.model_dir, arm["args"], arm.get("env", {}),
                        os.path.join(ctx.work, f"server-{ai}.log"), ctx.max_len, args.kv_cache_gib,
                        ctx.python, block_size=arm.get("block_size", 32), dtype=args.dtype)
        paired = arm["kind"] in ("rangekv", "ablation")
        try:
            err = server.wait_ready(args.start_timeout)
            if err:
                row["error"] = err
                results["arms"].append(row)
                log(f"[serve]   {arm['name']} did not start: {err}")
                continue
            reqs = single_requests(arm["kind"], prefix, prompts, other, resident_suffixes,
                                   args.output_tokens)
            out = run_client(server.port, reqs, ctx.work, ctx.python)
            scraped = server.scrape()
            res = arm_resources(server, arm.get("extra"), args.layers, kv_cache_bytes,
                                metrics=metrics_delta({}, scraped) if scraped is not None else {})
            results["resources"].append({"workload": "single", "name": arm["name"], **res})
            row["phases_ms"] = phase_means_ms(scraped)
        finally:
            server.stop()
        medium = arm.get("medium")
        try:
            if arm["kind"] == "rangekv" and medium and medium not in ceilings:
                # The medium's ceiling for the prefix's bytes, on the arm's own pack file, right
                # after its server stopped (nothing else reading or writing).
                pack = os.path.join(arm["extra"]["store_dir"], "rank-0", "packs.rkv")
                try:
                    ceiling = best_read_ceiling(pack, args.prefix * kv_bytes_per_token(args),
                                                direct=medium == "disk", prefix_tokens=args.prefix)
                    ceilings[medium] = ceiling
                    log(f"[serve]   {medium} ceiling for the prefix: "
                        f"{ceiling['seconds'] * 1e3:.1f} ms ({ceiling['threads']} threads x "
                        f"{ceiling['block_bytes'] >> 20} MiB)")
                except (OSError, rangekv.Error) as e:  # no ceiling, and the row says why
                    ceilings[medium] = {"error": str(e)}
        finally:
            if medium == "shm":
                shutil.rmtree(arm["extra"]["store_dir"], ignore_errors=True)
        # A repetition whose reset failed was served from vLLM's own cache: not a RangeKV sample.
        failed_resets = {o["id"].removeprefix("reset-") for o in out if o.get("reset") is False}
        measured = [o for o in out if o["id"].startswith("measure-")]
        for o in measured:
            if o["id"].removeprefix("measure-") in failed_resets:
                o["ttft_s"] = None
                o["error"] = (o.get("error")
                              or "vLLM's prefix cache could not be emptied before this run")
        row["ttft_s"] = [o["ttft_s"] for o in measured]
        row["token_ids"] = [o["token_ids"] for o in measured]
        row["logprobs"] = [o["logprobs"] for o in measured]
        row["cached_tokens"] = [o.get("cached_tokens") for o in measured]
        row["request_errors"] = [o["error"] for o in out if o.get("error")]
        row["median_s"] = median(row["ttft_s"])
        if paired:
            pr = [o for o in out if o["id"].startswith("resident-")]
            row["paired_resident_s"] = [o["ttft_s"] for o in pr]
            row["paired_resident_cached_tokens"] = [o.get("cached_tokens") for o in pr]
            row["resets_failed"] = sorted(failed_resets)
            row["medium"] = arm.get("medium")
        if arm["kind"] == "recompute":
            reference = row
        elif reference is not None:
            row["tokens_match"] = [a == b for a, b in zip(row["token_ids"], reference["token_ids"])]
            row["max_logprob_diff"] = [
                max((abs(x - y) for x, y in zip(a, b) if x is not None and y is not None),
                    default=None)
                for a, b in zip(row["logprobs"], reference["logprobs"])]
        # The exact reference for a restored prefix: vLLM serving the same prompts with the prefix
        # in its own cache (a cold prefill splits the attention differently; its logprobs differ
        # in the last bits, and near-tied tokens can flip).
        resident_row = next((r for r in results["arms"] if r["kind"] == "resident"), None)
        if arm["kind"] in ("rangekv", "ablation", "peer") and resident_row is not None:
            row["exact_resident"] = [
                a == b and la == lb
                for a, b, la, lb in zip(row["token_ids"], resident_row["token_ids"],
                                        row["logprobs"], resident_row["logprobs"])]
        results["arms"].append(row)
        log(f"[serve]   {arm['name']}: median {row['median_s']} s, samples {row['ttft_s']}")
    resident = next((r for r in results["arms"] if r["kind"] == "resident"), None)
    recompute = next((r for r in results["arms"] if r["kind"] == "recompute"), None)
    for r in results["arms"]:
        if r["kind"] not in ("rangekv", "ablation", "peer") or not r["ttft_s"]:
            continue
        # Paired arms: the resident run of the same server, back to back; peers: the resident
        # arm's repetition of the same index (another server).
        base = r.get("paired_resident_s") or (resident or {}).get("ttft_s") or []
        diffs = [(a - b) * 1e3 for a, b in zip(r["ttft_s"], base)
                 if a is not None and b is not None]
        r["minus_resident_ms"] = diffs
        r["median_minus_resident_ms"] = median(diffs)
        ceil = ceilings.get(r.get("medium") or "disk", {}).get("seconds")
        if ceil and r["median_minus_resident_ms"] is not None:
            # Acceptance: RangeKV - resident <= 30% of the prefix's read time at the ceiling.
            r["minus_resident_over_ceiling_read"] = r["median_minus_resident_ms"] / 1e3 / ceil
        rec, res_med = (recompute or {}).get("median_s"), median(base)
        if rec and res_med and r.get("median_s"):
            # (recompute / RangeKV) / (recompute / resident): the share of the ideal speedup kept.
            r["speedup_kept"] = res_med / r["median_s"]


def best_read_ceiling(path: str, nbytes: int, direct: bool, prefix_tokens: int) -> dict:
    """The fastest of plain-pread configurations (threads x request size) reading the prefix's
    own bytes in the pack file (ttft_hf.prefix_extents, from `rangekv inspect` of the closed
    store): the medium's best ceiling for the prefix (ttft_hf.read_ceiling per cell)."""
    from .ttft_hf import prefix_extents, read_ceiling

    extents = prefix_extents(os.path.dirname(path), prefix_tokens)
    # 1 MiB on 16 threads is the engine's own default read (O_DIRECT pieces x 4 x read_workers).
    cells = [read_ceiling(path, nbytes, direct, threads=t, block=b << 20, reps=3, extents=extents)
             for t in (1, 2, 4, 8, 16) for b in (1, 4, 8, 32)]
    best = min(cells, key=lambda c: c["seconds"])
    return {**best, "grid": [{"threads": c["threads"], "block_bytes": c["block_bytes"],
                              "seconds": c["seconds"]} for c in cells]}


def table(results: dict) -> str:
    rows = results["arms"]
    lines = ["| Arm | Median TTFT (s) | minus resident (ms) | tokens = recompute "
             "| samples (s) / error |",
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
    p = sub.add_parser("serve",
                       help="client TTFT through vLLM's OpenAI server with the RangeKV connector")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                   help="model and KV dtype: bfloat16 (8 KV heads x 128) or float32 (4 KV heads x "
                        "128), the same 4 KiB per token per layer; auto: bfloat16 unless this CPU "
                        "computes it at under a quarter of fp32's speed")
    p.add_argument("--prefix", type=int, default=8192, help="cached prefix tokens (multiple of 32)")
    p.add_argument("--suffix", type=int, default=2720,
                   help="new tokens (about a third of the prefix)")
    p.add_argument("--output-tokens", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--granularities", default="256,128,64,32",
                   help="vLLM block sizes of the RangeKV arms (the connector's reuse "
                        "granularity), coarse first")
    p.add_argument("--lw-granularities", default="",
                   help="granularities of the layerwise arms (default: the first of "
                        "--granularities only)")
    p.add_argument("--granularity-by", choices=("connector", "block"), default="connector",
                   help="connector: servers of block size 32, the connector's reuse_granularity "
                        "set per arm; block: the server's --block-size is the granularity (runs "
                        "before 2026-12-04)")
    p.add_argument("--arms", default="", help="comma list of arm kinds or names to keep")
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--no-shm-arm", dest="shm_arm", action="store_false",
                   help="leave out the coarse RangeKV arm with its store on --shm-dir (tmpfs)")
    p.add_argument("--skip-rangekv", action="store_true",
                   help="only the recompute and resident arms")
    p.add_argument("--peers", action="store_true",
                   help="also try LMCache's and vLLM's offloading connectors")
    p.add_argument("--connector-module", default="rangekv.vllm")
    p.add_argument("--connector-class", default="RangeKVConnector")
    p.add_argument("--connector-extra", default="{}",
                   help="JSON merged into kv_connector_extra_config")
    p.add_argument("--kv-cache-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--store-root", help="where the connector's stores go (default: the work dir)")
    p.add_argument("--tmp-dir", default="/var/tmp")
    p.add_argument("--keep", action="store_true", help="keep the work dir (model, logs, stores)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workload", default="single",
                   help="comma list of single (the fixed request, arms above), docqa, breakeven; "
                        "or all")
    w = p.add_argument_group("docqa (multi-request workload)")
    w.add_argument("--docs", type=int, default=8, help="documents N")
    w.add_argument("--doc-tokens", type=int, default=8192, help="tokens per document D")
    w.add_argument("--questions", type=int, default=4,
                   help="questions per document Q, per concurrency level")
    w.add_argument("--question-tokens", type=int, default=64)
    w.add_argument("--answer-tokens", type=int, default=16, help="output tokens per question")
    w.add_argument("--concurrency", default="1,4,8", help="concurrency levels")
    w.add_argument("--cache-docs", type=float, default=4.0,
                   help="documents vLLM's KV cache holds (--num-gpu-blocks-override); < --docs")
    w.add_argument("--docqa-arms", default="",
                   help="comma list of arm kinds to keep (prefix, rangekv)")
    b = p.add_argument_group("breakeven")
    b.add_argument("--be-lengths", default="32,64,128,256,512,1024,2048,4096,8192",
                   help="prefix lengths")
    b.add_argument("--be-fit-points", type=int, default=3,
                   help="the gate's lines are fitted to this many shortest lengths (break_even.py "
                        "break_even_inputs_from_short_end)")
    b.add_argument("--be-suffix", type=int, default=32, help="new tokens after each prefix")
    b.add_argument("--be-reps", type=int, default=5)
    b.add_argument("--be-media", default="shm,disk",
                   help="store media: shm (buffered), disk (O_DIRECT)")
    b.add_argument("--be-gate-medium", default="disk", help="the medium the gate arm runs on")
    b.add_argument("--shm-dir", default="/dev/shm")
    b.add_argument("--disk-dir", default="/var/tmp")
    b.add_argument("--be-tolerance-ms", type=float, default=10.0,
                   help="gate check: slower than both lines by more than this (or the fraction) "
                        "is 'worse'")
    b.add_argument("--be-tolerance-frac", type=float, default=0.05)
    p.add_argument("--plot", metavar="DIR", help="write PNG plots here (needs matplotlib)")
    p.add_argument("--json")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.prefix % 32:
        raise SystemExit("--prefix must be a multiple of the block size (32)")
    if "docqa" in args.workload or args.workload == "all":
        if args.cache_docs >= args.docs:
            raise SystemExit(
                "--cache-docs must be < --docs (vLLM's cache must not hold every document)")
    results = run(args)
    report = render(results)
    results["table"] = report
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if args.plot:
        try:
            from .plots import plot_all
            results["plots"] = plot_all(results, args.plot)
        except ImportError as e:
            plots_py = os.path.join(os.path.dirname(__file__), "plots.py")
            print(f"[serve] no plots ({e}); make them later with: python "
                  f"{plots_py} {args.json or 'RESULTS.json'} {args.plot}", file=sys.stderr)
    print(report)
    return 0


def render(results: dict) -> str:
    """Every table of a run (markdown), in the order the workloads ran."""
    from .serve_stats import breakeven_table, docqa_table, resources_table, table3

    parts = []
    if results.get("arms"):
        t3 = table3(results)
        if t3:
            parts += ["Fixed request, in the form of the paper's Table 3 (median TTFT, s):", t3, ""]
        parts += ["Every arm of the fixed request:", table(results), ""]
    if results.get("docqa"):
        d = results["docqa"]
        parts += [f"docqa: {d['docs']} documents x {d['doc_tokens']} tokens, {d['questions']} "
                  f"questions x {d['question_tokens']} tokens, {d['answer_tokens']} output tokens; "
                  f"vLLM KV cache {d['kv_cache_tokens']} tokens ({d['cache_docs']} documents):",
                  docqa_table(d), ""]
    if results.get("breakeven"):
        parts += ["Break-even (median TTFT, s):", breakeven_table(results["breakeven"]), ""]
    if results.get("resources"):
        parts += ["Resources per arm (Figure 9: reserved host memory, payload bytes):",
                  resources_table(results["resources"])]
    return "\n".join(parts)
