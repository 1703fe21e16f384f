"""The receipt's picture: median latency per shape and implementation, grouped bars on a log
axis, one subplot per op and pass (matplotlib, Agg backend; no display needed)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from bench.peers.names import IMPL_NAMES, OURS, OURS_IN_PLACE
from bench.peers.summary import groups, timed

COLORS = {
    OURS: "#d62728",
    OURS_IN_PLACE: "#ff9896",
    "torch_eager": "#7f7f7f",
    "torch_rms_norm": "#bcbd22",
    "torch_compile": "#1f77b4",
    "liger": "#2ca02c",
    "flashinfer": "#9467bd",
}


def plot_latency(rows: Sequence[Dict[str, Any]], path: str, title: str = "") -> str:
    """Writes the PNG to path and returns path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: Dict[tuple, List[tuple]] = {}
    for key, members in groups(rows).items():
        panels.setdefault((key[0], key[1]), []).append((members[0]["shape"], members))
    impls = [i for i in IMPL_NAMES if any(r["impl"] == i for r in rows)]
    n = max(len(panels), 1)
    widest = max((len(v) for v in panels.values()), default=1)
    fig, axes = plt.subplots(n, 1, figsize=(max(10.0, 0.12 * widest * max(len(impls), 1)),
                                            3.6 * n), squeeze=False)
    for ax, ((op, pass_), shapes) in zip(axes[:, 0], panels.items()):
        here = [i for i in impls if any(m["impl"] == i and timed(m)
                                         for _, members in shapes for m in members)]
        width = 0.8 / max(len(here), 1)
        for j, impl in enumerate(here):
            xs, ys = [], []
            for x, (_, members) in enumerate(shapes):
                r = next((m for m in members if m["impl"] == impl and timed(m)), None)
                if r is not None and r["median_us"] > 0:
                    xs.append(x + (j - (len(here) - 1) / 2) * width)
                    ys.append(r["median_us"])
            if xs:
                ax.bar(xs, ys, width=width, label=impl, color=COLORS.get(impl))
        ax.set_yscale("log")
        ax.set_ylabel("median µs")
        ax.set_title(f"{op} ({pass_})", fontsize=10)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([" ".join(f"{k}={v}" for k, v in s.items() if k not in ("Hq", "Hk"))
                            for s, _ in shapes], rotation=45, ha="right", fontsize=7)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=max(len(here), 1), loc="upper right")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
