"""Statistics, metrics parsing and tables of ``rangekv bench serve`` (stdlib only).

Everything here is a pure function of the measured samples, so the unit tests
(python/tests/test_serve_bench.py) cover it without a server.
"""

from __future__ import annotations

import math
import os
import re
import statistics

# Prometheus counters read from the server's /metrics (counter names get "_total").
METRICS = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:external_prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total",
    "vllm:rangekv_lookups_total",
    "vllm:rangekv_lookup_hit_tokens_total",
    "vllm:rangekv_restored_tokens_total",
    "vllm:rangekv_restore_failed_tokens_total",
    "vllm:rangekv_stored_tokens_total",
    "vllm:rangekv_bytes_read_total",
    "vllm:rangekv_bytes_written_total",
)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs, q: float):
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's
    default); None for no samples. None samples are dropped."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_summary(xs) -> dict:
    """n, p50, p90, p99, mean, min, max of the non-None samples (seconds in, seconds out)."""
    ok = [x for x in xs if x is not None]
    return {"n": len(ok), "failed": len(xs) - len(ok), "p50": percentile(ok, 50),
            "p90": percentile(ok, 90), "p99": percentile(ok, 99),
            "mean": statistics.fmean(ok) if ok else None,
            "min": min(ok) if ok else None, "max": max(ok) if ok else None}


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over its label sets, from Prometheus text format."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(v):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def metrics_delta(before: dict | None, after: dict | None, names=METRICS) -> dict[str, float]:
    """after - before for each name (a counter missing from both is 0; None maps give {})."""
    if before is None or after is None:
        return {}
    return {n: after.get(n, 0.0) - before.get(n, 0.0) for n in names}


def workload_summary(results: list[dict], wall_s: float, metrics: dict | None = None) -> dict:
    """TTFT percentiles, throughput and hit rates of one phase of concurrent requests.

    `results`: the client's records (ttft_s, token_ids, prompt_tokens, cached_tokens, error);
    `metrics`: the /metrics delta over the phase. Hit rate is cached prompt tokens / prompt
    tokens from the per-request usage (vLLM's own prefix hit and the connector's together);
    the /metrics rates split it by tier where the server counted them.
    """
    ttft = [r.get("ttft_s") for r in results]
    out_tokens = sum(len(r.get("token_ids") or []) for r in results)
    prompt = sum(r.get("prompt_tokens") or 0 for r in results)
    cached = [r.get("cached_tokens") for r in results]
    s = {"ttft": latency_summary(ttft), "requests": len(results),
         "errors": sum(1 for r in results if r.get("error")),
         "wall_s": wall_s,
         "requests_per_s": len(results) / wall_s if wall_s > 0 else None,
         "output_tokens_per_s": out_tokens / wall_s if wall_s > 0 else None,
         "prompt_tokens": prompt,
         "cached_tokens": sum(c or 0 for c in cached) if any(c is not None for c in cached)
         else None}
    s["hit_rate"] = (s["cached_tokens"] / prompt) if prompt and s["cached_tokens"] is not None \
        else None
    m = metrics or {}
    q = m.get("vllm:prefix_cache_queries_total", 0.0)
    s["metrics"] = m
    s["vllm_hit_rate"] = m.get("vllm:prefix_cache_hits_total", 0.0) / q if q else None
    eq = m.get("vllm:external_prefix_cache_queries_total", 0.0)
    s["external_hit_rate"] = m.get("vllm:external_prefix_cache_hits_total", 0.0) / eq if eq \
        else None
    return s


# The connector's phases (rangekv.vllm.stats.PHASES) as /metrics names: seconds summed, count.
PHASE_NAMES = ("lookup", "claim", "first_layer_ready", "last_layer_ready", "store_extracted")


def phase_means_ms(metrics: dict | None) -> dict[str, float]:
    """Mean ms of each connector phase over a server's life, from its scraped /metrics
    (``vllm:rangekv_<phase>_s_total`` / ``..._s_count_total``); phases never observed are left
    out. lookup: the worker's directory walk; claim: claim + bind of a restore;
    first/last_layer_ready: claim to layer 0 / the last layer ready; store_extracted: first layer
    produced to the source blocks reusable (store admission)."""
    out = {}
    for name in PHASE_NAMES:
        n = (metrics or {}).get(f"vllm:rangekv_{name}_s_count_total", 0.0)
        if n:
            out[name] = 1e3 * metrics.get(f"vllm:rangekv_{name}_s_total", 0.0) / n
    return out


def tokens_match(rows: list[list[int]], ref: list[list[int]]) -> list[bool]:
    return [a == b for a, b in zip(rows, ref)]


# ---- break-even ------------------------------------------------------------------------------

def crossing(xs: list[float], ys_a: list[float], ys_b: list[float]) -> float | None:
    """The x where the piecewise-linear curve b first falls to or below a (b - a changes sign
    from > 0 to <= 0), interpolated between the two points that bracket it; xs[0] when b is at
    or below a from the start, None when it never is. Points with a None are skipped."""
    pts = [(x, b - a) for x, a, b in zip(xs, ys_a, ys_b) if a is not None and b is not None]
    if not pts:
        return None
    if pts[0][1] <= 0:
        return pts[0][0]
    for (x0, d0), (x1, d1) in zip(pts, pts[1:]):
        if d1 <= 0 < d0:
            return x0 + (x1 - x0) * d0 / (d0 - d1)
    return None


# ---- resources -------------------------------------------------------------------------------

def bank_bytes(extra: dict, layers: int, device: str = "host") -> int:
    """Host bytes one rank's engine allocates for banks at start-up, from the connector's
    config (docs/integrations/vllm.md "Engine sizing"): read_banks x read_bank_bytes (default
    stripe_bytes) + store_banks x store_bank_bytes (default 2 x layer_group x stripe_bytes, the
    layer group as the engine resolves it: config.resolved_layer_group)."""
    from ..vllm.config import bank_host_bytes, parse_size

    def size(key: str, default: int) -> int:
        v = extra.get(key, default)
        return v if isinstance(v, int) else parse_size(key, v)

    return bank_host_bytes(stripe_bytes=size("stripe_bytes", 32 << 20),
                           read_banks=int(extra.get("read_banks", 8)),
                           read_bank_bytes=size("read_bank_bytes", 0),
                           store_banks=int(extra.get("store_banks", 8)),
                           store_bank_bytes=size("store_bank_bytes", 0),
                           layer_group=min(int(extra.get("layer_group", 0)), layers),
                           device=device, layers=layers)


def process_tree_memory(pgid: int, proc: str = "/proc") -> dict:
    """Resident, peak-resident and locked (pinned) bytes summed over the processes of process
    group `pgid` (the bench starts each server in its own session), from /proc/<pid>/status.
    Peak is the sum of each process's VmHWM (an upper bound of the group's peak)."""
    out = {"processes": 0, "rss_bytes": 0, "hwm_bytes": 0, "locked_bytes": 0, "pinned_bytes": 0}
    fields = {"VmRSS:": "rss_bytes", "VmHWM:": "hwm_bytes", "VmLck:": "locked_bytes",
              "VmPin:": "pinned_bytes"}
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/stat") as f:
                stat = f.read()
            # pgrp is the 3rd field after the parenthesized command (which may hold spaces).
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            with open(f"{proc}/{pid}/status") as f:
                status = f.read().splitlines()
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        out["processes"] += 1
        for line in status:
            parts = line.split()
            if parts and parts[0] in fields and len(parts) >= 2:
                out[fields[parts[0]]] += int(parts[1]) * 1024
    return out


# ---- tables ----------------------------------------------------------------------------------

def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def _mib(n):
    if n is None:
        return "-"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n / 1024:.0f} KiB"


def table3(results: dict) -> str:
    """The fixed-request arms in the form of the paper's Table 3: one column per object count
    (RangeKV plain at each granularity, then layerwise, then the coarse point on tmpfs), rows
    Object size, Recompute, Resident (the median of the resident runs paired with that arm in
    its server; the unpaired arm when there are none), RangeKV, RangeKV - resident (ms, median of
    the paired differences), that difference over the prefix's read time at the medium's best
    ceiling, the share of the ideal speedup kept, and tokens = recompute."""
    rows = results.get("arms", [])
    cfg = results.get("config", {})
    layers = cfg.get("layers", 1)
    per_token_layer = (2 * cfg.get("kv_heads", 8) * cfg.get("head_size", 128)
                       * cfg.get("dtype_bytes", 2))
    rk_rows = [r for r in rows if r["kind"] == "rangekv"]
    cols = [r for r in rk_rows if not r.get("layerwise") and r.get("medium", "disk") == "disk"]
    cols.sort(key=lambda r: -(r.get("granularity") or 0))
    cols += [r for r in rk_rows if r.get("layerwise")]
    cols += [r for r in rk_rows if r.get("medium") == "shm"]
    if not cols:
        return ""
    rec = next((r for r in rows if r["kind"] == "recompute"), {})
    res = next((r for r in rows if r["kind"] == "resident"), {})
    prefix = cfg.get("prefix", 0)
    heads, sizes, resid, rk, diff, ratio, kept, tm, ex = [], [], [], [], [], [], [], [], []
    for r in cols:
        g = r.get("granularity") or 32
        n = prefix // g * (layers if r.get("layerwise") else 1)
        heads.append(f"{n:,}" + (" LW" if r.get("layerwise") else "")
                     + (" shm" if r.get("medium") == "shm" else ""))
        sizes.append(_mib(g * per_token_layer * (1 if r.get("layerwise") else layers)))
        paired = [x for x in r.get("paired_resident_s") or [] if x is not None]
        resid.append(_f(statistics.median(paired) if paired else res.get("median_s")))
        rk.append(_f(r.get("median_s")))
        diff.append(_f(r.get("median_minus_resident_ms"), "{:.0f}"))
        ratio.append(_f(r.get("minus_resident_over_ceiling_read"), "{:.2f}"))
        kept.append(_f(r.get("speedup_kept"), "{:.2f}"))
        m = r.get("tokens_match")
        tm.append("-" if m is None else f"{sum(m)}/{len(m)}")
        e = r.get("exact_resident")
        ex.append("-" if e is None else f"{sum(e)}/{len(e)}")
    n = len(cols)
    lines = ["| Objects | " + " | ".join(heads) + " |", "| --- " * (n + 1) + "|",
             "| Object size | " + " | ".join(sizes) + " |",
             "| Recompute | " + " | ".join([_f(rec.get("median_s"))] * n) + " |",
             "| Resident (paired, same server) | " + " | ".join(resid) + " |",
             "| RangeKV | " + " | ".join(rk) + " |",
             "| RangeKV - resident (ms) | " + " | ".join(diff) + " |",
             "| (RangeKV - resident) / prefix read at best ceiling | " + " | ".join(ratio) + " |",
             "| Speedup kept (resident / RangeKV) | " + " | ".join(kept) + " |",
             "| Tokens = recompute | " + " | ".join(tm) + " |",
             "| Tokens and logprobs = resident, bitwise | " + " | ".join(ex) + " |"]
    # Where a restore's time goes (the connector's phases, mean ms over the arm's server life).
    for name in PHASE_NAMES:
        vals = [(r.get("phases_ms") or {}).get(name) for r in cols]
        if any(v is not None for v in vals):
            lines.append(f"| phase: {name.replace('_', ' ')} (ms) | "
                         + " | ".join(_f(v, "{:.1f}") for v in vals) + " |")
    ceil = results.get("prefix_read_ceiling") or {}
    notes = []
    for medium in ("disk", "shm"):
        c = ceil.get(medium) or {}
        if "seconds" in c:
            notes.append(f"{medium}: {c['seconds'] * 1e3:.1f} ms ({c['threads']} threads x "
                         f"{c['block_bytes'] >> 20} MiB{', O_DIRECT' if c.get('direct') else ''})")
    if notes:
        lines.append("")
        lines.append("Prefix read at the medium's best ceiling (plain preads, same run): "
                     + "; ".join(notes) + ".")
    if res.get("median_s") is not None:
        lines.append(f"vLLM alone (no connector), prefix resident: median {res['median_s']:.3f} s.")
    return "\n".join(lines)


def docqa_table(docqa: dict) -> str:
    """One row per (arm, concurrency): TTFT p50/p90/p99 (s), requests/s, output tokens/s, hit
    rates (per-request usage; vLLM's own; the connector's), tokens = recompute."""
    lines = ["| Arm | Concurrency | TTFT p50 (s) | p90 | p99 | req/s | out tok/s | hit rate | "
             "vLLM hit rate | RangeKV hit rate | tokens = recompute | errors |",
             "| --- " * 12 + "|"]
    for arm in docqa.get("arms", []):
        if arm.get("error"):
            lines.append(f"| {arm['name']} | - | {arm['error'][:200]} |" + " |" * 9)
            continue
        for ph in arm.get("phases", []):
            s = ph["summary"]
            t = s["ttft"]
            m = ph.get("tokens_match")
            lines.append(
                f"| {arm['name']} | {ph['concurrency']} | {_f(t['p50'])} | {_f(t['p90'])} | "
                f"{_f(t['p99'])} | {_f(s['requests_per_s'], '{:.2f}')} | "
                f"{_f(s['output_tokens_per_s'], '{:.1f}')} | {_f(s['hit_rate'], '{:.2f}')} | "
                f"{_f(s['vllm_hit_rate'], '{:.2f}')} | {_f(s['external_hit_rate'], '{:.2f}')} | "
                f"{'ref' if m is None else f'{sum(m)}/{len(m)}'} | {s['errors']} |")
    return "\n".join(lines)


def breakeven_table(be: dict) -> str:
    """Median TTFT (s) per prefix length and arm, then the crossing of each RangeKV line with
    recompute, and the gate-on-vs-off comparison."""
    lengths = be.get("prefix_lengths", [])
    arms = be.get("arms", [])
    lines = ["| Prefix tokens | " + " | ".join(a["name"] for a in arms) + " |",
             "| --- " * (len(arms) + 1) + "|"]
    for i, n in enumerate(lengths):
        cells = []
        for a in arms:
            med = a.get("median_s") or []
            cells.append(_f(med[i] if i < len(med) else None))
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    for name, c in (be.get("crossings") or {}).items():
        lines.append("")
        if c is None:
            where = "nowhere in the measured range"
        elif lengths and c <= lengths[0]:
            where = f"from the shortest length measured ({lengths[0]:,} tokens) on"
        else:
            where = f"from {c:,.0f} tokens on (the lines cross there)"
        lines.append(f"{name}: at or below recompute {where}")
    g = be.get("gate")
    if g and g.get("error"):
        lines += ["", f"gate ({g.get('medium')}): {g['error']}"]
    elif g:
        lines.append("")
        lines.append(
            f"gate ({g.get('medium')}): threshold {g.get('threshold_tokens')} tokens from "
            f"{g.get('extra_config')}; decisions per length {g.get('decisions')} (match the "
            f"threshold: {g.get('decisions_ok')}); chosen path minus declined path, measured "
            f"without the gate (ms): "
            + ", ".join(_f(x, "{:+.0f}") for x in g.get("chosen_minus_other_ms", []))
            + f"; lengths where the gate made TTFT worse: {g.get('worse') or 'none'}; restored "
            f"where recomputing was faster: {g.get('missed') or 'none'}; gate arm "
            f"minus the faster path (ms, with its own noise): "
            + ", ".join(_f(x, "{:+.0f}") for x in g.get("excess_ms", [])))
    return "\n".join(lines)


def resources_table(rows: list[dict]) -> str:
    """Per arm: the server tree's RSS and peak RSS, locked/pinned bytes, the connector's
    configured bank bytes and vLLM's KV cache, and payload bytes read/written by RangeKV."""
    lines = ["| Arm | server RSS | peak RSS (sum of HWM) | locked/pinned | RangeKV banks "
             "(configured) | vLLM KV cache | bytes read | bytes written |",
             "| --- " * 8 + "|"]
    for r in rows:
        mem = r.get("memory") or {}
        m = r.get("payload") or {}
        locked_bytes = (mem.get("locked_bytes") or 0) + (mem.get("pinned_bytes") or 0)
        lines.append(
            f"| {r.get('workload', '') + ': ' if r.get('workload') else ''}{r['name']} | "
            f"{_mib(mem.get('rss_bytes'))} | {_mib(mem.get('hwm_bytes'))} | "
            f"{_mib(locked_bytes) if mem else '-'} | "
            f"{_mib(r.get('bank_bytes')) if r.get('bank_bytes') else '0'} | "
            f"{_mib(r.get('kv_cache_bytes'))} | {_mib(m.get('vllm:rangekv_bytes_read_total'))} | "
            f"{_mib(m.get('vllm:rangekv_bytes_written_total'))} |")
    return "\n".join(lines)
