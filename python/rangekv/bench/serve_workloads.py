"""The multi-request and break-even workloads of ``rangekv bench serve``.

docqa (LMCache's long-document QA shape): N documents of D tokens, each asked Q short questions.
  One warm-up phase sends every document once (concurrency 1, not measured: it is what fills
  the caches); then, per concurrency level (1, 4, 8 by default), every document is asked Q
  fresh questions, round-robin (question q of every document before question q + 1 of any), so
  between two questions about one document all the others pass. vLLM's KV cache is sized with
  --num-gpu-blocks-override to hold about --cache-docs documents (fewer than N): its own prefix
  cache evicts a document before it is asked again, and what the storage tier keeps decides.
  Arms: recompute (prefix cache off), vLLM's prefix cache alone, RangeKV with vLLM's prefix
  cache on (the realistic deployment). Every request's tokens are compared with recompute's.

breakeven: TTFT of recompute and of RangeKV against the cached prefix length (a short fixed
  suffix), with the store on /dev/shm (buffered: tmpfs has no O_DIRECT) and on a disk directory
  (O_DIRECT). Straight lines fitted to the medians at the shortest lengths (--be-fit-points)
  give the break-even threshold's inputs (break_even.py break_even_inputs_from_short_end:
  1 / prefill throughput, restore bandwidth, fixed overhead); the crossing of the measured
  medians is the shortest hit worth restoring. A last arm runs the connector with
  ``min_hit_tokens: "auto"`` fed those inputs, on the disk medium, over the same lengths: per
  length its median is compared with min(recompute, RangeKV without the gate), and whether it
  restored (usage.cached_tokens) with the gate's threshold.
"""

from __future__ import annotations

import math
import os
import shutil

from ..vllm.break_even import break_even_inputs_from_short_end, break_even_tokens
from .harness import (
    Context,
    Server,
    arm_resources,
    connector_args,
    connector_extra,
    kv_bytes_per_token,
    run_client,
)
from .serve_stats import crossing, median, metrics_delta, tokens_match, workload_summary

BLOCK = 32


def _tokens(gen, vocab: int, n: int) -> list[int]:
    import torch

    return torch.randint(0, vocab, (n,), generator=gen).tolist()


def _start(ctx: Context, name: str, args: list[str], max_len: int, **kw):
    a = ctx.args
    log_name = f"server-{name.replace(' ', '_').replace('+', '')}.log"
    server = Server(ctx.model_dir, args, {}, os.path.join(ctx.work, log_name), max_len,
                    a.kv_cache_gib, ctx.python, dtype=getattr(a, "dtype", "auto"), **kw)
    err = server.wait_ready(a.start_timeout)
    if err:
        server.stop()
        ctx.progress.log(f"[serve]   {name} did not start: {err}")
        return None, err
    return server, None


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


# ---- docqa ----------------------------------------------------------------------------------

def docqa_max_len(args) -> int:
    return args.doc_tokens + args.question_tokens + args.answer_tokens + 64


def docqa_blocks(args) -> int:
    """vLLM KV cache blocks that hold about --cache-docs documents (at least one full-length
    request: vLLM refuses a cache smaller than max_model_len)."""
    per_doc = args.doc_tokens + args.question_tokens + args.answer_tokens
    want = math.ceil(args.cache_docs * per_doc / BLOCK)
    return max(want, math.ceil(docqa_max_len(args) / BLOCK)) + 1


def docqa_arms(args, store_root: str) -> list[dict]:
    levels = len(args.concurrency.split(","))
    tokens = args.docs * (args.doc_tokens + (args.question_tokens + args.answer_tokens + BLOCK)
                          * (1 + args.questions * levels))
    extra = connector_extra(args, os.path.join(store_root, "docqa"), tokens)
    arms = [{"name": "recompute", "kind": "recompute", "args": ["--no-enable-prefix-caching"]},
            {"name": "vllm prefix cache", "kind": "prefix", "args": []},
            {"name": "rangekv + prefix cache", "kind": "rangekv", "extra": extra,
             "args": connector_args(args, extra)}]
    keep = set(args.docqa_arms.split(",")) if args.docqa_arms else None
    return [a for a in arms if keep is None or a["kind"] in keep or a["kind"] == "recompute"]


def docqa_requests(args) -> tuple[list[dict], dict]:
    """The warm-up phase and the measured phases (one per concurrency level)."""
    import torch

    g = torch.Generator().manual_seed(args.seed + 101)
    docs = [_tokens(g, args.vocab, args.doc_tokens) for _ in range(args.docs)]
    warm = [{"id": f"warm-d{d}", "prompt": docs[d] + _tokens(g, args.vocab, args.question_tokens),
             "max_tokens": 1} for d in range(args.docs)]
    phases = [{"name": "warm", "concurrency": 1, "metrics": False, "requests": warm}]
    for c in [int(x) for x in args.concurrency.split(",")]:
        reqs = []
        for q in range(args.questions):
            for d in range(args.docs):
                reqs.append({"id": f"c{c}-q{q}-d{d}",
                             "prompt": docs[d] + _tokens(g, args.vocab, args.question_tokens),
                             "max_tokens": args.answer_tokens})
        phases.append({"name": f"c{c}", "concurrency": c, "metrics": True, "metrics_settle_s": 1.0,
                       "requests": reqs})
    meta = {"docs": args.docs, "doc_tokens": args.doc_tokens, "questions": args.questions,
            "question_tokens": args.question_tokens, "answer_tokens": args.answer_tokens,
            "concurrency": [int(x) for x in args.concurrency.split(",")],
            "cache_docs": args.cache_docs, "num_gpu_blocks": docqa_blocks(args),
            "kv_cache_tokens": docqa_blocks(args) * BLOCK,
            "all_documents_tokens": args.docs * args.doc_tokens}
    return phases, meta


def run_docqa(ctx: Context, resources: list[dict]) -> dict:
    args, log = ctx.args, ctx.progress.log
    phases, meta = docqa_requests(args)
    blocks = docqa_blocks(args)
    max_seqs = max(meta["concurrency"])
    out = {**meta, "arms": []}
    reference: dict[str, list[int]] = {}
    for arm in docqa_arms(args, ctx.store_root):
        ctx.progress.step(f"docqa: {arm['name']}")
        row = {"name": arm["name"], "kind": arm["kind"], "error": None, "phases": []}
        server, err = _start(ctx, f"docqa {arm['name']}", arm["args"], docqa_max_len(args),
                             max_num_seqs=max_seqs, num_blocks=blocks)
        if server is None:
            row["error"] = err
            out["arms"].append(row)
            continue
        try:
            got = run_client(server.port, {"phases": phases}, ctx.work, ctx.python)
            total = {}
            for ph in got["phases"]:
                if ph["name"] == "warm":
                    continue
                delta = metrics_delta(ph["metrics_before"], ph["metrics_after"])
                for k, v in delta.items():
                    total[k] = total.get(k, 0.0) + v
            # Payload over the measured phases (the warm-up's stores excluded).
            res = arm_resources(server, arm.get("extra"), args.layers,
                                blocks * BLOCK * kv_bytes_per_token(args), metrics=total)
            resources.append({"workload": "docqa", "name": arm["name"], **res})
        finally:
            server.stop()
        for ph in got["phases"]:
            if ph["name"] == "warm":
                continue
            delta = metrics_delta(ph["metrics_before"], ph["metrics_after"])
            summary = workload_summary(ph["results"], ph["wall_s"], delta)
            rec = {"concurrency": ph["concurrency"], "summary": summary, "samples": [
                {k: r.get(k) for k in ("id", "ttft_s", "total_s", "start_s", "prompt_tokens",
                                       "cached_tokens", "error", "token_ids")}
                for r in ph["results"]]}
            if arm["kind"] == "recompute":
                reference.update({r["id"]: r["token_ids"] for r in ph["results"]})
            else:
                rec["tokens_match"] = tokens_match([r["token_ids"] for r in ph["results"]],
                                                   [reference.get(r["id"]) for r in ph["results"]])
            row["phases"].append(rec)
            t = summary["ttft"]
            log(f"[serve]   {arm['name']} c={ph['concurrency']}: TTFT p50 {_fmt(t['p50'])} p99 "
                f"{_fmt(t['p99'])} s, {_fmt(summary['requests_per_s'])} req/s, hit rate "
                f"{_fmt(summary['hit_rate'])}, errors {summary['errors']}")
        out["arms"].append(row)
    return out


# ---- break-even ------------------------------------------------------------------------------

def breakeven_lengths(args) -> list[int]:
    return sorted({int(x) // BLOCK * BLOCK for x in args.be_lengths.split(",") if int(x) >= BLOCK})


def breakeven_tokens(args) -> int:
    """Tokens one break-even store holds: every length's prefix and its stored suffixes."""
    return sum(n + (args.be_suffix + BLOCK) * (args.be_reps + 1) for n in breakeven_lengths(args))


def breakeven_max_len(args) -> int:
    return max(breakeven_lengths(args)) + args.be_suffix + args.output_tokens + 64


def breakeven_arms(args, work: str) -> list[dict]:
    arms = [{"name": "recompute", "kind": "recompute", "medium": None,
             "args": ["--no-enable-prefix-caching"]}]
    media = {"shm": os.path.join(args.shm_dir, os.path.basename(work) + "-be"),
             "disk": os.path.join(args.disk_dir, os.path.basename(work) + "-be")}
    for m in args.be_media.split(","):
        extra = connector_extra(args, media[m], breakeven_tokens(args), direct_io=(m == "disk"))
        arms.append({"name": f"rangekv {m}", "kind": "rangekv", "medium": m, "store_dir": media[m],
                     "extra": extra,
                     "args": ["--no-enable-prefix-caching"] + connector_args(args, extra)})
    return arms


def breakeven_requests(args) -> tuple[list[dict], dict]:
    """Per length: a distinct prefix; a store request (a different suffix, 1 token), then
    --be-reps measured requests (prefix + fresh suffix). The recompute arm ignores the stores'
    effect (its prefix cache is off)."""
    import torch

    g = torch.Generator().manual_seed(args.seed + 202)
    reqs = [{"id": "warm", "prompt": _tokens(g, args.vocab, 256), "max_tokens": args.output_tokens}]
    for n in breakeven_lengths(args):
        prefix = _tokens(g, args.vocab, n)
        reqs.append({"id": f"store-{n}", "prompt": prefix + _tokens(g, args.vocab, args.be_suffix),
                     "max_tokens": 1})
        for r in range(args.be_reps):
            reqs.append({"id": f"measure-{n}-{r}",
                         "prompt": prefix + _tokens(g, args.vocab, args.be_suffix),
                         "max_tokens": args.output_tokens})
    return reqs, {"prefix_lengths": breakeven_lengths(args), "suffix": args.be_suffix,
                  "reps": args.be_reps}


def _per_length(results: list[dict], lengths: list[int], key: str) -> list[list]:
    by = {n: [] for n in lengths}
    for r in results:
        if r["id"].startswith("measure-"):
            n = int(r["id"].split("-")[1])
            by[n].append(r.get(key))
    return [by[n] for n in lengths]


def _run_be_arm(ctx: Context, arm: dict, reqs: list[dict], meta: dict,
                resources: list[dict]) -> dict:
    args = ctx.args
    row = {"name": arm["name"], "kind": arm["kind"], "medium": arm.get("medium"), "error": None}
    server, err = _start(ctx, f"breakeven {arm['name']}", arm["args"], breakeven_max_len(args))
    if server is None:
        row["error"] = err
        return row
    try:
        got = run_client(server.port, reqs, ctx.work, ctx.python)
        res = arm_resources(server, arm.get("extra"), args.layers,
                            (max(1, int(args.kv_cache_gib)) << 30))
        resources.append({"workload": "breakeven", "name": arm["name"], **res})
    finally:
        server.stop()
    lengths = meta["prefix_lengths"]
    row["ttft_s"] = _per_length(got, lengths, "ttft_s")
    row["cached_tokens"] = _per_length(got, lengths, "cached_tokens")
    row["token_ids"] = _per_length(got, lengths, "token_ids")
    row["median_s"] = [median(x) for x in row["ttft_s"]]
    row["request_errors"] = [r["error"] for r in got if r.get("error")]
    ctx.progress.log(f"[serve]   {arm['name']}: medians (s) "
                     f"{', '.join(_fmt(m) for m in row['median_s'])}, cached tokens "
                     f"{[c[0] if c else None for c in row['cached_tokens']]}")
    return row


def _check_tokens(row: dict, rec: dict) -> None:
    if row.get("error") or rec.get("error"):
        return
    row["tokens_match"] = [tokens_match(a, b) for a, b in zip(row["token_ids"], rec["token_ids"])]


def run_breakeven(ctx: Context, resources: list[dict]) -> dict:
    args = ctx.args
    reqs, meta = breakeven_requests(args)
    bpt = kv_bytes_per_token(args)
    out = {**meta, "kv_bytes_per_token": bpt, "arms": [], "fits": {}, "crossings": {}}
    arms = breakeven_arms(args, ctx.work)
    try:
        return _breakeven(ctx, resources, arms, reqs, meta, out, bpt)
    finally:
        # The stores live outside the work dir (on the media under test): /dev/shm is RAM.
        for a in arms:
            if a.get("store_dir") and (a["medium"] == "shm" or not args.keep):
                for d in (a["store_dir"], a["store_dir"] + "-gate"):
                    shutil.rmtree(d, ignore_errors=True)


def _breakeven(ctx: Context, resources: list[dict], arms: list[dict], reqs: list[dict],
               meta: dict, out: dict, bpt: int) -> dict:
    args = ctx.args
    lengths = meta["prefix_lengths"]
    for arm in arms:
        ctx.progress.step(f"breakeven: {arm['name']}")
        out["arms"].append(_run_be_arm(ctx, arm, reqs, meta, resources))
    rec = out["arms"][0]
    for row in out["arms"][1:]:
        _check_tokens(row, rec)
        if row["error"] or rec["error"]:
            continue
        out["crossings"][row["name"]] = crossing(lengths, rec["median_s"], row["median_s"])
        try:
            out["fits"][row["name"]] = break_even_inputs_from_short_end(
                lengths, rec["median_s"], row["median_s"], bpt, args.be_fit_points)
        except ValueError:
            continue
    # The gate arm: min_hit_tokens "auto" fed the fitted inputs of --be-gate-medium.
    ctx.progress.step("breakeven: gate")
    medium = args.be_gate_medium
    base = next((a for a in arms if a.get("medium") == medium), None)
    fit = out["fits"].get(f"rangekv {medium}")
    if base is None or fit is None:
        out["gate"] = {"medium": medium, "error": "no fitted lines for this medium (an arm failed "
                       "or the medium is not in --be-media)"}
        return out
    gate_cfg = break_even_config(fit, lengths)
    threshold = break_even_tokens(
        prefill_tokens_per_s=gate_cfg["break_even_prefill_tokens_per_s"],
        restore_bytes_per_s=gate_cfg["break_even_restore_bandwidth"], bytes_per_token=bpt,
        overhead_s=gate_cfg["break_even_overhead_us"] * 1e-6, block_size=BLOCK,
        never=breakeven_max_len(args) + BLOCK)
    extra = connector_extra(args, base["store_dir"] + "-gate", breakeven_tokens(args),
                            direct_io=(medium == "disk"), **gate_cfg)
    gate_arm = {"name": f"rangekv {medium} + gate", "kind": "gate", "medium": medium,
                "extra": extra,
                "args": ["--no-enable-prefix-caching"] + connector_args(args, extra)}
    row = _run_be_arm(ctx, gate_arm, reqs, meta, resources)
    _check_tokens(row, rec)
    out["arms"].append(row)
    out["gate"] = gate_verdict(row, rec, next(a for a in out["arms"] if a["name"] == base["name"]),
                               lengths, threshold, gate_cfg, medium, args.be_tolerance_ms,
                               args.be_tolerance_frac)
    return out


def break_even_config(fit: dict, lengths: list[int]) -> dict:
    """The kv_connector_extra_config keys that feed `fit` (break_even_inputs_from_fits) to the
    connector's break-even threshold.
    A flat or falling recompute line (noise) gives a prefill rate as if the longest length
    took no time, i.e. everything restores; a flat RangeKV line gives an unbounded bandwidth
    capped at 1 TiB/s."""
    prefill = fit.get("prefill_tokens_per_s") or (max(lengths) * 1e6)
    restore = fit.get("restore_bytes_per_s") or float(1 << 40)
    return {"min_hit_tokens": "auto", "break_even_prefill_tokens_per_s": max(1, int(prefill)),
            "break_even_restore_bandwidth": max(1, int(min(restore, 1 << 40))),
            "break_even_overhead_us": int(round(fit.get("overhead_s", 0.0) * 1e6))}


def gate_verdict(gate: dict, rec: dict, plain: dict, lengths: list[int], threshold: int,
                 gate_cfg: dict, medium: str, tol_ms: float, tol_frac: float) -> dict:
    """Whether the gate ever made TTFT worse, per length.

    The gate arm's decision at a length is read from its requests (cached tokens > 0: it
    restored; 0: it recomputed) and checked against the threshold (`decisions_ok`). Whether a
    decision made TTFT worse is judged on the two arms measured without the gate: the path it
    chose (recompute or plain RangeKV) minus the path it declined, in ms (`chosen_minus_other_ms`);
    `worse` lists the lengths where the gate recomputed and that is above max(tol_ms, tol_frac x
    the faster one). A restore decision is the ungated path itself, so it cannot be worse than
    not gating; where recomputing would have been faster it is listed in `missed`. The gate
    arm's own median minus the faster of the two (`excess_ms`) is reported too: it carries the
    gate arm's own run-to-run noise on top.
    """
    v = {"medium": medium, "threshold_tokens": threshold, "extra_config": gate_cfg,
         "error": gate.get("error"), "decisions": [], "chosen_minus_other_ms": [],
         "excess_ms": [], "worse": [], "missed": [], "decisions_ok": None}
    if gate.get("error"):
        return v
    ok = True
    for i, n in enumerate(lengths):
        g, r, k = gate["median_s"][i], rec["median_s"][i], plain["median_s"][i]
        cached = [c for c in gate["cached_tokens"][i] if c is not None]
        decision = None if not cached else ("restore" if all(c > 0 for c in cached) else
                                            "recompute" if all(c == 0 for c in cached) else "mixed")
        v["decisions"].append(decision)
        if decision in ("restore", "recompute"):
            ok = ok and (decision == "restore") == (n >= threshold)
        elif decision == "mixed":
            ok = False
        best = min([x for x in (r, k) if x is not None], default=None)
        v["excess_ms"].append(None if g is None or best is None else (g - best) * 1e3)
        if r is None or k is None or decision not in ("restore", "recompute"):
            v["chosen_minus_other_ms"].append(None)
            continue
        diff = ((r - k) if decision == "recompute" else (k - r)) * 1e3
        v["chosen_minus_other_ms"].append(diff)
        if diff > max(tol_ms, tol_frac * min(r, k) * 1e3):
            v["worse" if decision == "recompute" else "missed"].append(n)
    v["decisions_ok"] = ok
    return v
