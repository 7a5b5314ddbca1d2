"""The summary's pictures: per-GPU key figures against the SKU floor, NCCL busbw per scale, loss curves.

The data comes from the run record's checks (``metrics[]``: value, ``min`` = the floor the SKU set,
``extra`` with the NCCL ``scale``, ``size``, ``group`` and, when the test sends it, the whole sweep as
``curve: [[bytes, GB/s], ...]``) and, for the fine-tune, from the runs' ``history.json`` files. The
``*_data`` functions are pure (unit-tested); the ``*_png`` ones draw with matplotlib's object API and
the Agg canvas (no pyplot state, no display), returning PNG bytes for a ``data:`` URI.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaccept.nccl.formulas import COLLECTIVES
from gpuaccept.results.metrics import MetricResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "KEY_FIGURES",
    "HeatPanel",
    "LossRun",
    "NcclScale",
    "heat_panels",
    "heatmap_png",
    "loss_png",
    "loss_runs",
    "loss_runs_from_checks",
    "loss_target",
    "nccl_png",
    "nccl_scales",
]

#: The per-GPU figures a customer compares with the datasheet, in the order the heat map shows them.
KEY_FIGURES: tuple[tuple[str, str], ...] = (
    ("matmul_bf16_tflops", "matmul BF16"),
    ("membw_tbps", "HBM bandwidth"),
    ("hostbw_h2d_gbps", "host to GPU (H2D)"),
    ("hostbw_d2h_gbps", "GPU to host (D2H)"),
    ("p2p_gbps", "P2P, slowest pair from the GPU"),
)
NCCL_METRIC = re.compile(r"nccl_(?P<collective>[a-z_]+?)_busbw(?P<multi>_multinode)?_gbs")
_FLOOR = "#c0392b"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _gpu_index(label: str) -> str:
    """``3 (0000:9A:00.0)`` -> ``3``; a P2P pair ``0 (..) -> 1 (..)`` -> its source ``0``."""
    return label.split("->")[0].strip().split(" ")[0]


def _index_key(index: str) -> tuple[int, int, str]:
    return (0, int(index), "") if index.isdigit() else (1, 0, index)


# ---- per-GPU key figures --------------------------------------------------------------------------


@dataclass
class HeatPanel:
    """Key figures per GPU: one row per (node, GPU index), one column per figure, value and value/floor."""

    rows: list[tuple[str, str]]
    columns: list[tuple[str, str, str]]  # (metric, title, unit)
    values: list[list[float | None]]
    ratios: list[list[float | None]]
    floors: list[set[float]] = field(default_factory=list)
    failed: set[tuple[int, int]] = field(default_factory=set)

    @property
    def metrics(self) -> list[str]:
        return [c[0] for c in self.columns]


def heat_panels(metrics: Iterable[MetricResult]) -> list[HeatPanel]:
    """The key figures on the record (empty list when none); per GPU the lowest value (P2P: slowest pair)."""
    rows = [m for m in metrics if m.subject_kind in ("gpu", "pair") and _number(m.value) is not None]
    cells: dict[tuple[str, tuple[str, str]], MetricResult] = {}
    columns = []
    for metric, title in KEY_FIGURES:
        found = [m for m in rows if m.metric == metric]
        if not found:
            continue
        columns.append((metric, title, found[0].unit))
        for m in found:
            key = (metric, (m.node, _gpu_index(str(m.subject))))
            if key not in cells or float(m.value) < float(cells[key].value):  # type: ignore[arg-type]
                cells[key] = m
    if not columns:
        return []
    gpus = sorted({k[1] for k in cells}, key=lambda ng: (ng[0], _index_key(ng[1])))
    panel = HeatPanel(gpus, columns, [], [], [set() for _ in columns])
    for i, gpu in enumerate(gpus):
        values: list[float | None] = []
        ratios: list[float | None] = []
        for j, (metric, _title, _unit) in enumerate(columns):
            cell = cells.get((metric, gpu))
            value = None if cell is None else _number(cell.value)
            floor = None if cell is None else _number(cell.min)
            values.append(value)
            ratios.append(value / floor if value is not None and floor else None)
            if floor:
                panel.floors[j].add(floor)
            if cell is not None and cell.verdict == "fail":
                panel.failed.add((i, j))
        panel.values.append(values)
        panel.ratios.append(ratios)
    return [panel]


def heatmap_png(panels: Sequence[HeatPanel]) -> bytes:
    """Rows = GPUs, columns = key figures: colour = value / SKU floor (red below 1), text = the value."""
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    panel = panels[0]
    count = len(panel.rows)
    fig = Figure(figsize=(1.9 * len(panel.columns) + 3.2, min(120.0, 0.27 * count + 1.6)))
    ax = fig.add_subplot()
    norm = TwoSlopeNorm(vmin=0.8, vcenter=1.0, vmax=1.25)
    grid = np.array([[np.nan if r is None else min(max(r, 0.8), 1.25) for r in row] for row in panel.ratios])
    image = ax.imshow(grid, cmap="RdYlGn", norm=norm, aspect="auto")
    titles = []
    for j, (_metric, title, unit) in enumerate(panel.columns):
        floors = ", ".join(f"{f:g}" for f in sorted(panel.floors[j])) or "none"
        titles.append(f"{title}\n{unit}, floor {floors}")
    ax.set_xticks(range(len(panel.columns)), titles, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(count), [f"{node}  GPU {gpu}" for node, gpu in panel.rows], fontsize=8)
    if count <= 400:
        for i, row in enumerate(panel.values):
            for j, value in enumerate(row):
                if value is not None:
                    weight = "bold" if (i, j) in panel.failed else "normal"
                    ax.text(j, i, f"{value:.4g}", ha="center", va="center", fontsize=7.5, fontweight=weight)
    for i, j in panel.failed:
        ax.add_patch(_box(i, j))
    nodes = [node for node, _gpu in panel.rows]
    for i in range(1, count):
        if nodes[i] != nodes[i - 1]:
            ax.axhline(i - 0.5, color="white", linewidth=2.5)
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, shrink=min(1.0, 12 / max(count, 1) + 0.3))
    bar.set_label("measured / SKU floor", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return _png(fig)


def _box(i: int, j: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6)


# ---- NCCL busbw -----------------------------------------------------------------------------------


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
        return [(float(s), float(b)) for s, b in curve if _number(s) and _number(b) is not None]
    size, value = _number(m.extra.get("size")), _number(m.value)
    return [(size, value)] if size and value is not None else []


def nccl_scales(metrics: Iterable[MetricResult]) -> list[NcclScale]:
    """The NCCL busbw checks grouped by scale: one-node scales (ranks) first, then N nodes."""
    scales: dict[tuple[bool, int], NcclScale] = {}
    for m in metrics:
        match = NCCL_METRIC.fullmatch(m.metric)
        scale = m.extra.get("scale")
        if match is None or not isinstance(scale, int):
            continue
        multi = bool(match.group("multi"))
        title = f"{scale} nodes together" if multi else f"one node, {scale} ranks"
        entry = scales.setdefault((multi, scale), NcclScale(title, multi, scale))
        label = str(m.extra.get("group") or m.node) if multi else m.node
        points = _points(m)
        if not points:
            continue
        entry.curves = entry.curves or len(points) > 1
        entry.series.setdefault(match.group("collective"), {}).setdefault(label, points)
        floor = _number(m.min)
        if floor is not None:
            entry.floors[match.group("collective")] = floor
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
            ax.axhline(floor, color=_FLOOR, linestyle="--", linewidth=1.2, label=f"floor {floor:g} GB/s")
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
    return _png(fig)


# ---- fine-tune loss -------------------------------------------------------------------------------


@dataclass
class LossRun:
    label: str
    losses: list[float]
    evals: list[tuple[int, float]]


def loss_runs(training_dir: Path, since: float | None = None) -> list[LossRun]:
    """``<training_dir>/<shape>/<strategy>/history.json`` written at or after ``since`` (epoch seconds).

    Older files are another session's: the folder is reused by every run, so a run that trained
    nothing (or fewer shapes) must not show the last one's curves as its own.
    """
    runs = []
    for path in sorted(training_dir.glob("*/*/history.json")) if training_dir.is_dir() else []:
        if since is not None and path.stat().st_mtime < since:
            continue
        try:
            history = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        losses = [float(v) for v in history.get("losses") or [] if _number(v) is not None]
        evals = [(int(e[0]), float(e[1])) for e in history.get("evals") or [] if len(e) == 2 and _number(e[1])]
        if losses:
            runs.append(LossRun(f"{path.parent.parent.name} {path.parent.name}", losses, evals))
    return runs


#: the final-loss check of the built-in model and of a ``--model-path`` run (both carry the curve)
_LOSS_FINAL = ("train_loss_final", "train_pretrained_loss_final")


def loss_runs_from_checks(metrics: Iterable[MetricResult]) -> list[LossRun]:
    """The curves the fine-tune checks carry (``train_loss_final`` with ``extra.curve``): what a record
    fetched from another machine shows without its ``history.json`` files."""
    runs = []
    for m in metrics:
        curve = m.extra.get("curve") if m.metric in _LOSS_FINAL else None
        if isinstance(curve, list) and curve:
            test = m.test.split("::")[-1]
            runs.append(LossRun(f"{test} {m.where}", [float(v) for v in curve if _number(v) is not None], []))
    return runs


def loss_png(runs: Sequence[LossRun], target: float | None) -> bytes:
    """Every fine-tune's 10-step mean training loss (lines) and eval loss (dots), the target dashed."""
    from matplotlib.figure import Figure

    from gpuaccept.training.report import rolling_mean

    fig = Figure(figsize=(8.2, 3.8))
    ax = fig.add_subplot()
    for run in runs:
        line = ax.plot(range(1, len(run.losses) + 1), rolling_mean(run.losses), linewidth=1.3, label=run.label)[0]
        if run.evals:
            ax.plot([e[0] for e in run.evals], [e[1] for e in run.evals], "o", color=line.get_color(), markersize=4)
    if target is not None:
        ax.axhline(target, color=_FLOOR, linestyle="--", linewidth=1.2, label=f"target {target:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (10-step mean; dots: eval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _png(fig)


def loss_target(metrics: Iterable[MetricResult]) -> float | None:
    """The fine-tune's target: the ``max`` the SKU sets for the final training loss."""
    for m in metrics:
        if m.metric in _LOSS_FINAL and _number(m.max) is not None:
            return float(m.max)  # type: ignore[arg-type]
    return None
