"""PNG plots for the report: per-GPU bars against the threshold, curves, heatmaps.

Built on ``matplotlib.figure.Figure`` with the Agg canvas, never ``pyplot``: no global figure state,
no GUI backend on a headless login node, safe under xdist workers. Every function returns PNG bytes,
ready for ``gpuaccept.report.attach.png``. The per-GPU bars are drawn for any test automatically;
the other two are for the probes' own data (NCCL busbw vs message size, loss curves, P2P matrices).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuaccept.results.metrics import MetricResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["per_gpu_bars", "plottable_metrics"]

_PASS, _FAIL, _NONE, _LIMIT = "#4c9a2a", "#c0392b", "#7f8c8d", "#2c3e50"


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def plottable_metrics(results: Sequence[MetricResult]) -> dict[str, list[MetricResult]]:
    """Metrics measured on several GPUs with numeric values: the ones a bar per GPU says something about."""
    grouped: dict[str, list[MetricResult]] = {}
    for result in results:
        if result.subject_kind in ("gpu", "pair") and _number(result.value) is not None:
            grouped.setdefault(result.metric, []).append(result)
    return {metric: rows for metric, rows in grouped.items() if len({(r.node, r.subject) for r in rows}) > 1}


def per_gpu_bars(metric: str, results: Sequence[MetricResult]) -> bytes:
    """One bar per (node, GPU), red where the verdict failed, with the min/max limits as lines."""
    from matplotlib.figure import Figure

    rows = sorted(results, key=lambda r: (r.node, str(r.subject)))
    nodes = {r.node for r in rows}
    labels = [(f"{r.node}\n" if len(nodes) > 1 else "") + f"GPU {str(r.subject).split(' ')[0]}" for r in rows]
    values = [_number(r.value) or 0.0 for r in rows]
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
    return _png(fig)
