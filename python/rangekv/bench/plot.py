"""PNG plots of `rangekv bench restore|store --json` reports (used by `--plot FILE.png`).

python -m rangekv.bench.plot REPORT.json OUT.png

Median time per object-count point for every arm, the engine-configuration and best ceilings as
horizontal lines. Needs matplotlib; `--plot FILE.svg` in the C++ tool needs nothing.
"""

import json
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"rangekv.bench.plot: matplotlib is not installed ({e})", file=sys.stderr)
        return 1
    with open(argv[1]) as f:
        rep = json.load(f)
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
    if rep.get("best_ceiling_gib_s") and rep.get("best_ceiling_config") != rep.get("ceiling_config"):
        ax.axhline(gib / rep["best_ceiling_gib_s"], ls="--", color="black",
                   label=f"best ceiling ({rep['best_ceiling_config']})")
    ax.set_xticks(range(len(points)), points)
    ax.set_xlabel("logical objects naming the same bytes")
    ax.set_ylabel("median time, s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"rangekv bench {rep['workload']}: {rep['payload_bytes'] >> 20} MiB, {rep['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
