"""PNG plots of the benchmarks' JSON (matplotlib, imported only here).

    python -m rangekv.bench serve ... --plot DIR          (after the run, same interpreter)
    python python/rangekv/bench/plots.py RESULTS.json DIR  (any interpreter with matplotlib;
                                                            needs neither rangekv nor vLLM)
    python -m rangekv.bench.plots REPORT.json OUT.png     (a `rangekv bench restore|store --json`
                                                            report: what `--plot FILE.png` runs)

Figures, each written only when its workload is in the JSON:
  ttft_vs_objects.png   fixed request: TTFT against logical object count per arm, every sample
                        as a dot, medians joined; recompute and resident as horizontal bands
  docqa_ttft.png        docqa: TTFT distribution (empirical CDF) per arm, one panel per
                        concurrency level
  breakeven.png         break-even: median TTFT against prefix length per arm (samples as dots),
                        crossings marked
The series are built by the ``*_series`` functions (pure, unit-tested without matplotlib).

A sweep report (``"workload": "restore"`` or ``"store"``) draws one figure instead
(``sweep_png``): the median time per object-count point for every arm, the engine-configuration
and best ceilings as horizontal lines.
"""

from __future__ import annotations

import json
import os
import sys


def objects_series(results: dict) -> dict:
    """{"arms": {name: [(objects, [samples s])]}, "refs": {name: [samples s]}} of the fixed
    request: RangeKV plain arms on the disk join into one line over object counts; layerwise,
    the tmpfs point and each ablation are their own points."""
    cfg = results.get("config", {})
    prefix, layers = cfg.get("prefix", 0), cfg.get("layers", 1)
    arms: dict[str, list] = {}
    refs: dict[str, list] = {}
    for r in results.get("arms", []):
        samples = [x for x in r.get("ttft_s") or [] if x is not None]
        if r["kind"] in ("recompute", "resident"):
            refs[r["name"]] = samples
            continue
        if not samples or not r.get("granularity"):
            continue
        n = prefix // r["granularity"] * (layers if r.get("layerwise") else 1)
        plain_disk = (r["kind"] == "rangekv" and not r.get("layerwise")
                      and r.get("medium", "disk") == "disk")
        key = "rangekv" if plain_disk else r["name"]
        arms.setdefault(key, []).append((n, samples))
    for v in arms.values():
        v.sort()
    return {"arms": arms, "refs": refs}


def docqa_series(docqa: dict) -> dict:
    """{concurrency: {arm: sorted TTFT samples (s)}}."""
    out: dict[int, dict[str, list]] = {}
    for arm in docqa.get("arms", []):
        for ph in arm.get("phases", []):
            xs = sorted(s["ttft_s"] for s in ph.get("samples", []) if s.get("ttft_s") is not None)
            out.setdefault(ph["concurrency"], {})[arm["name"]] = xs
    return out


def breakeven_series(be: dict) -> dict:
    """{arm: {"lengths", "median_s", "samples": [[s]]}} plus "crossings"."""
    out = {"arms": {}, "crossings": dict(be.get("crossings") or {})}
    for a in be.get("arms", []):
        if a.get("error"):
            continue
        out["arms"][a["name"]] = {"lengths": be.get("prefix_lengths", []),
                                  "median_s": a.get("median_s", []),
                                  "samples": a.get("ttft_s", [])}
    return out


def plot_all(results: dict, out_dir: str) -> list[str]:
    """Writes the figures for the workloads present; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    stamp = f"{results.get('date_utc', '')} UTC, {results.get('machine', {}).get('node', '')}"

    s = objects_series(results)
    if s["arms"]:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = {"recompute": "tab:red", "resident": "tab:green"}
        for name, samples in s["refs"].items():
            if samples:
                lo, hi = min(samples), max(samples)
                ax.axhspan(lo, hi, alpha=0.15, color=colors.get(name, "grey"))
                ax.axhline(sorted(samples)[len(samples) // 2], color=colors.get(name, "grey"),
                           ls="--", label=f"{name} (median, band: min-max)")
        for name, pts in s["arms"].items():
            xs = [n for n, _ in pts]
            meds = [sorted(v)[len(v) // 2] for _, v in pts]
            line = ax.plot(xs, meds, marker="o", label=name)[0]
            for n, v in pts:
                ax.scatter([n] * len(v), v, s=10, color=line.get_color(), alpha=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("logical objects naming the prefix")
        ax.set_ylabel("client TTFT (s)")
        ax.set_title(f"TTFT vs object count ({stamp})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(os.path.join(out_dir, "ttft_vs_objects.png"))
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

    if results.get("docqa"):
        d = docqa_series(results["docqa"])
        if d:
            fig, axes = plt.subplots(1, len(d), figsize=(4 * len(d), 3.8), squeeze=False)
            for ax, (c, arms) in zip(axes[0], sorted(d.items())):
                for name, xs in arms.items():
                    if xs:
                        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                                label=name)
                ax.set_title(f"concurrency {c}", fontsize=9)
                ax.set_xlabel("TTFT (s)")
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap
                ax.set_ylabel("fraction of requests")
                ax.legend(fontsize=7)
            fig.suptitle(f"docqa TTFT distribution ({stamp})", fontsize=9)
            fig.tight_layout()
            paths.append(os.path.join(out_dir, "docqa_ttft.png"))
            fig.savefig(paths[-1], dpi=120)
            plt.close(fig)

    if results.get("breakeven"):
        b = breakeven_series(results["breakeven"])
        if b["arms"]:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for name, a in b["arms"].items():
                pts = [(n, m) for n, m in zip(a["lengths"], a["median_s"]) if m is not None]
                line = ax.plot([n for n, _ in pts], [m for _, m in pts], marker="o", label=name)[0]
                for n, v in zip(a["lengths"], a["samples"]):
                    v = [x for x in v if x is not None]
                    ax.scatter([n] * len(v), v, s=10, color=line.get_color(), alpha=0.5)
            for name, c in b["crossings"].items():
                if c is not None:
                    ax.axvline(c, ls=":", color="grey")
                    ax.annotate(f"{name}\ncrosses at {c:,.0f}", (c, ax.get_ylim()[1]), fontsize=7,
                                va="top")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("cached prefix tokens")
            ax.set_ylabel("client TTFT (s)")
            ax.set_title(f"break-even: recompute vs RangeKV ({stamp})", fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            paths.append(os.path.join(out_dir, "breakeven.png"))
            fig.savefig(paths[-1], dpi=120)
            plt.close(fig)
    return paths


def sweep_png(rep: dict, out_path: str) -> str:
    """Draws a `rangekv bench restore|store --json` report into the PNG `out_path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, arms = [], {}
    for r in rep["results"]:
        if r["point"] not in points:
            points.append(r["point"])
        arm = r["engine"] + (f" {r['ablation']}" if r.get("ablation") else "")
        arms.setdefault(arm, {})[r["point"]] = r["median_s"]
    gib = rep["payload_bytes"] / 2**30
    fig, ax = plt.subplots(figsize=(9, 5))
    for arm, m in arms.items():
        xs = [i for i, p in enumerate(points) if p in m]
        ax.plot(xs, [m[points[i]] for i in xs], marker="o", label=arm)
    if rep.get("ceiling_gib_s"):
        ax.axhline(gib / rep["ceiling_gib_s"], ls="--", color="gray",
                   label=f"engine-config ceiling ({rep.get('ceiling_config', '')})")
    if (rep.get("best_ceiling_gib_s")
            and rep.get("best_ceiling_config") != rep.get("ceiling_config")):
        ax.axhline(gib / rep["best_ceiling_gib_s"], ls="--", color="black",
                   label=f"best ceiling ({rep['best_ceiling_config']})")
    ax.set_xticks(range(len(points)), points)
    ax.set_xlabel("logical objects naming the same bytes")
    ax.set_ylabel("median time, s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"rangekv bench {rep['workload']}: {rep['payload_bytes'] >> 20} MiB, "
                 f"{rep['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        results = json.load(f)
    try:
        if results.get("workload") in ("restore", "store"):
            print(sweep_png(results, argv[1]))
            return 0
        for p in plot_all(results, argv[1]):
            print(p)
    except ImportError as e:
        print(f"rangekv.bench.plots: matplotlib is not installed ({e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
