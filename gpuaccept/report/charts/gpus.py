"""Per-GPU figures: the summary's heat map of key figures against the SKU floor, and Allure's bars.

The heat map's columns are the metrics the catalogue gives a ``display.heatmap`` title, in catalogue
order; the bars are drawn for a test's metrics with ``display.bars`` measured on several GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.report.charts import Catalogue, display_of, png
from gpuaccept.results.metrics import MetricResult, number

__all__ = ["HeatPanel", "bar_metrics", "heat_columns", "heat_panels", "heatmap_png", "per_gpu_bars"]

_PASS, _FAIL, _NONE, _LIMIT = "#4c9a2a", "#c0392b", "#7f8c8d", "#2c3e50"


def heat_columns(catalogue: Catalogue) -> list[tuple[str, str]]:
    """``(metric, title)`` of every heat-map column, in the catalogue's order."""
    return [(name, spec.display.heatmap) for name, spec in catalogue.items() if spec.display.heatmap]


def _gpu_index(label: str) -> str:
    """``3 (0000:9A:00.0)`` -> ``3``; a P2P pair ``0 (..) -> 1 (..)`` -> its source ``0``."""
    return label.split("->")[0].strip().split(" ")[0]


def _index_key(index: str) -> tuple[int, int, str]:
    return (0, int(index), "") if index.isdigit() else (1, 0, index)


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


def heat_panels(metrics: Iterable[MetricResult], catalogue: Catalogue) -> list[HeatPanel]:
    """The key figures on the record (empty list when none); per GPU the lowest value (P2P: slowest pair)."""
    rows = [m for m in metrics if m.subject_kind in ("gpu", "pair") and number(m.value) is not None]
    cells: dict[tuple[str, tuple[str, str]], MetricResult] = {}
    columns = []
    for metric, title in heat_columns(catalogue):
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
            value = None if cell is None else number(cell.value)
            floor = None if cell is None else number(cell.min)
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
    return png(fig)


def _box(i: int, j: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6)


def bar_metrics(results: Sequence[MetricResult], catalogue: Catalogue) -> dict[str, list[MetricResult]]:
    """Metrics the catalogue draws as bars, measured on several GPUs with numeric values: the ones a
    bar per GPU says something about."""
    grouped: dict[str, list[MetricResult]] = {}
    for result in results:
        if result.subject_kind in ("gpu", "pair") and number(result.value) is not None:
            grouped.setdefault(result.metric, []).append(result)
    return {
        metric: rows
        for metric, rows in grouped.items()
        if display_of(catalogue, metric).bars and len({(r.node, r.subject) for r in rows}) > 1
    }


def per_gpu_bars(metric: str, results: Sequence[MetricResult]) -> bytes:
    """One bar per (node, GPU), red where the verdict failed, with the min/max limits as lines."""
    from matplotlib.figure import Figure

    rows = sorted(results, key=lambda r: (r.node, str(r.subject)))
    nodes = {r.node for r in rows}
    labels = [(f"{r.node}\n" if len(nodes) > 1 else "") + f"GPU {str(r.subject).split(' ')[0]}" for r in rows]
    values = [number(r.value) or 0.0 for r in rows]
    colors = [_FAIL if r.verdict == "fail" else _PASS if r.verdict == "pass" else _NONE for r in rows]
    fig = Figure(figsize=(max(4.0, 0.55 * len(rows) + 2), 3.4))
    ax = fig.add_subplot()
    ax.bar(range(len(rows)), values, color=colors)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    unit = rows[0].unit if rows else ""
    ax.set_ylabel(unit)
    ax.set_title(f"{metric} per GPU" + (f" on {rows[0].node}" if len(nodes) == 1 else ""), fontsize=10)
    first = rows[0] if rows else None
    for bound, name in ((first.min if first else None, "min"), (first.max if first else None, "max")):
        if bound is not None:
            ax.axhline(bound, color=_LIMIT, linestyle="--", linewidth=1.2, label=f"{name} {bound:g} {unit}")
    if first is not None and (first.min is not None or first.max is not None):
        ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return png(fig, dpi=110)
