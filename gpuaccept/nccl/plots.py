"""Bus bandwidth against message size, one panel per collective, with the pass line drawn.

What an operator looks at first in an NCCL report: where the curve flattens (the link's bandwidth),
whether it reaches the threshold, and which node or group lies below its siblings. One PNG per node
(intra-node sweep) or per scale (one curve per group); the reporting plugin attaches it to Allure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["plot_busbw"]

Series = Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]


def _size_label(size: float) -> str:
    for unit, name in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if size >= unit:
            return f"{size / unit:g}{name}"
    return f"{size:g}"


def plot_busbw(
    series: Series,
    path: str | Path,
    *,
    title: str,
    thresholds: Mapping[str, float | None] | None = None,
    reference: Mapping[str, float] | None = None,
) -> Path:
    """Write a PNG and return its path.

    ``series[collective][label]`` is a list of ``(size in bytes, busbw GB/s)``; ``thresholds[collective]``
    is drawn as a dashed red line (the minimum in force), ``reference[collective]`` as a dotted grey one
    (e.g. nccl-tests' figure on the same GPUs).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    collectives = [c for c in series if any(series[c].values())]
    if not collectives:
        raise ValueError("nothing to plot: no collective has a measured size")
    cols = min(3, len(collectives))
    rows = (len(collectives) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, collective in zip(axes.flat, collectives, strict=False):
        for label, points in sorted(series[collective].items()):
            pts = sorted(points)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=label)
        limit = (thresholds or {}).get(collective)
        if limit is not None:
            ax.axhline(limit, color="red", linestyle="--", linewidth=1.2, label=f"min {limit:g} GB/s")
        ref = (reference or {}).get(collective)
        if ref is not None:
            ax.axhline(ref, color="grey", linestyle=":", linewidth=1.2, label=f"reference {ref:g} GB/s")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _size_label(x)))
        ax.set_title(collective)
        ax.set_xlabel("message size (nccl-tests size)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(collectives) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
