"""NCCL bus bandwidth against message size: per scale for the summary, per sweep for a test's artefact.

The summary's charts come from the run record's checks (the metrics the catalogue marks
``display.chart: busbw``, with ``extra`` holding the ``scale``, ``size``, ``group`` and, when the test
sends it, the whole sweep as ``curve: [[bytes, GB/s], ...]``). ``plot_busbw`` draws a test's own
sweep to a file, one panel per collective with the pass line, for its Allure attachment: where the
curve flattens (the link's bandwidth), whether it reaches the threshold, which node or group lies
below its siblings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.report.charts import FLOOR, Catalogue, display_of, png
from gpuaccept.results.metrics import MetricResult, number
from gpuaccept.verdicts.nccl_lines import metric_name

__all__ = ["NcclScale", "Series", "nccl_png", "nccl_scales", "plot_busbw"]

#: busbw metric -> (collective, across nodes): the names ``verdicts.nccl_lines.metric_name`` gives them
_NAMES = {metric_name(c, multi): (c, multi) for c in COLLECTIVES for multi in (False, True)}

Series = Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]


@dataclass
class NcclScale:
    """One scale (a node's ranks, or N nodes): per collective, busbw against size for each node or group."""

    title: str
    multinode: bool
    scale: int
    series: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    curves: bool = False


def _points(m: MetricResult) -> list[tuple[float, float]]:
    curve = m.extra.get("curve")
    if isinstance(curve, list) and curve:
        return [(float(s), float(b)) for s, b in curve if number(s) and number(b) is not None]
    size, value = number(m.extra.get("size")), number(m.value)
    return [(size, value)] if size and value is not None else []


def nccl_scales(metrics: Iterable[MetricResult], catalogue: Catalogue) -> list[NcclScale]:
    """The NCCL busbw checks grouped by scale: one-node scales (ranks) first, then N nodes."""
    scales: dict[tuple[bool, int], NcclScale] = {}
    for m in metrics:
        named = _NAMES.get(m.metric) if display_of(catalogue, m.metric).chart == "busbw" else None
        scale = m.extra.get("scale")
        if named is None or not isinstance(scale, int):
            continue
        collective, multi = named
        title = f"{scale} nodes together" if multi else f"one node, {scale} ranks"
        entry = scales.setdefault((multi, scale), NcclScale(title, multi, scale))
        label = str(m.extra.get("group") or m.node) if multi else m.node
        points = _points(m)
        if not points:
            continue
        entry.curves = entry.curves or len(points) > 1
        entry.series.setdefault(collective, {}).setdefault(label, points)
        floor = number(m.min)
        if floor is not None:
            entry.floors[collective] = floor
    return [scales[k] for k in sorted(scales)]


def nccl_png(scale: NcclScale) -> bytes:
    """Small multiples, one per collective: busbw against message size, the floor as a red line."""
    from matplotlib.figure import Figure

    order = {name: index for index, name in enumerate(COLLECTIVES)}
    collectives = sorted(scale.series, key=lambda c: (order.get(c, len(order)), c))
    columns = min(3, len(collectives))
    lines = math.ceil(len(collectives) / columns)
    fig = Figure(figsize=(4.1 * columns, 2.9 * lines))
    axes = fig.subplots(lines, columns, squeeze=False)
    for ax in axes.flat[len(collectives) :]:
        ax.set_visible(False)
    for ax, collective in zip(axes.flat, collectives, strict=False):
        top = 0.0
        sizes: list[float] = []
        for label, points in sorted(scale.series[collective].items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", markersize=3 if len(xs) > 1 else 6, linewidth=1.2, label=label)
            top, sizes = max(top, *ys), [*sizes, *xs]
        floor = scale.floors.get(collective)
        if floor is not None:
            ax.axhline(floor, color=FLOOR, linestyle="--", linewidth=1.2, label=f"floor {floor:g} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_title(collective.replace("_", " "), fontsize=9)
        ax.set_xlabel("message size (bytes)", fontsize=8)
        ax.set_ylabel("busbw (GB/s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(0, 1.15 * max(top, floor or 0.0) or 1.0)
        if sizes and min(sizes) == max(sizes):  # one size on the record: give the point some room
            ax.set_xlim(min(sizes) / 16, max(sizes) * 4)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(f"NCCL bus bandwidth, {scale.title}", fontsize=10)
    fig.tight_layout()
    return png(fig)


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
) -> Path:
    """Write a test's sweep as a PNG and return its path.

    ``series[collective][label]`` is a list of ``(size in bytes, busbw GB/s)``; ``thresholds[collective]``
    is drawn as a dashed red line (the minimum in force).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    collectives = [c for c in series if any(series[c].values())]
    if not collectives:
        raise ValueError("nothing to plot: no collective has a measured size")
    cols = min(3, len(collectives))
    rows = (len(collectives) + cols - 1) // cols
    fig = Figure(figsize=(5.2 * cols, 3.8 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, collective in zip(axes.flat, collectives, strict=False):
        for label, points in sorted(series[collective].items()):
            pts = sorted(points)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=label)
        limit = (thresholds or {}).get(collective)
        if limit is not None:
            ax.axhline(limit, color="red", linestyle="--", linewidth=1.2, label=f"min {limit:g} GB/s")
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
    return out
