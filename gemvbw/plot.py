"""gemvbw plot: a roofline chart of a result, and for model results the time per projection.

matplotlib is optional (pip install 'gemvbw[plot]'); nothing else in gemvbw needs it.
"""

from __future__ import annotations


class PlotUnavailable(RuntimeError):
    pass


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("gemvbw plot needs matplotlib: pip install 'gemvbw[plot]' (or pip install matplotlib)") from None
    return plt


def plot(doc: dict, out_path: str) -> None:
    """Roofline: eff GB/s against arithmetic intensity, read and memcpy ceilings as lines, one point per
    width and shape. For a model result, a second panel: time per token by projection and width."""
    plt = _pyplot()
    model = doc.get("model")
    fig, axes = plt.subplots(1, 2 if model and model.get("per_bits") else 1, figsize=(13 if model else 7, 5),
                             squeeze=False)
    ax = axes[0][0]
    rf = doc.get("roofline") or {}
    results = doc.get("results", [])
    ais = [r["ai"] for r in results] or [1.0, 8.0]
    lo, hi = min(ais) * 0.7, max(ais) * 1.4
    for key, style, name in (("read_gbps", "-", "read roofline"), ("memcpy_gbps", "--", "memcpy (MNN, read+write)")):
        if rf.get(key):
            ax.hlines(rf[key], lo, hi, linestyles=style, colors="gray")
            ax.annotate(f"{name} {rf[key]:.1f} GB/s", (lo, rf[key]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8, color="dimgray")
    shapes = sorted({(r["M"], r["K"]) for r in results})
    markers = "osD^vP*X"
    for i, (M, K) in enumerate(shapes):
        pts = [r for r in results if (r["M"], r["K"]) == (M, K)]
        ax.scatter([r["ai"] for r in pts], [r["eff_gbps"] for r in pts], marker=markers[i % len(markers)],
                   label=f"{M}x{K}", zorder=3)
    for key in sorted({(r["bits"], r.get("variant")) for r in results}, reverse=True):
        pts = [r for r in results if (r["bits"], r.get("variant")) == key]
        top = max(pts, key=lambda r: r["eff_gbps"])  # one label per width (and variant), at its best point
        ax.annotate(f"w{key[0]}" + (f" {key[1]}" if key[1] and len({r.get('variant') for r in results}) > 1 else ""),
                    (top["ai"], top["eff_gbps"]), textcoords="offset points", xytext=(6, 4), fontsize=9)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = sorted({round(a, 2) for a in ais})
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{a:.2f}" for a in ticks])
    ax.minorticks_off()
    top = max([rf.get("read_gbps") or 0, rf.get("memcpy_gbps") or 0] + [r["eff_gbps"] for r in results])
    # a result with nothing above zero (no roofline, no row measured) still gets an axis, not an empty one
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    ax.set_xlabel("arithmetic intensity, op/B (2 / bytes per weight)")
    ax.set_ylabel("eff GB/s (logical weight bytes / best group mean)")
    cpu = (doc.get("system") or {}).get("cpu", "?")
    ax.set_title(f"GEMV against the rooflines\n{cpu}, {(doc.get('settings') or {}).get('threads', '?')} threads",
                 fontsize=10)
    if shapes:
        ax.legend(fontsize=8, title="shape")
    if model and model.get("per_bits"):
        ax2 = axes[0][1]
        per_bits = model["per_bits"]
        names = [p["name"] for p in per_bits[0]["projections"]]
        width = 0.8 / len(per_bits)
        for j, s in enumerate(per_bits):
            times = [p["per_token"] * p["best_avg_us"] / 1e3 for p in s["projections"]]
            ax2.bar([i + j * width for i in range(len(names))], times, width,
                    label=f"w{s['bits']}: {s['gemv_ms_per_token']:.1f} ms/token")
        ax2.set_xticks([i + width * (len(per_bits) - 1) / 2 for i in range(len(names))])
        ax2.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax2.set_ylabel("ms per token (latency x calls per token)")
        ax2.set_title(f"{model['name']}: GEMV time per token by projection", fontsize=10)
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
