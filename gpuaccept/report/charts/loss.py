"""Fine-tune loss curves: every run's on the summary page, and one run's ``loss_curve.png`` for Allure.

The summary reads the runs' ``history.json`` files (``reports/training/<shape>/<strategy>/``) and,
for a record fetched from another machine, the curves the loss checks carry (the metrics the
catalogue marks ``display.chart: loss``, with ``extra.curve``); the target is those checks' ``max``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaccept.report.charts import FLOOR, Catalogue, display_of, png
from gpuaccept.results.metrics import MetricResult, number
from gpuaccept.training.report import WINDOW, rolling_mean

__all__ = ["LossRun", "artifacts", "loss_curve_png", "loss_png", "loss_runs", "loss_runs_from_checks", "loss_target"]


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
        losses = [float(v) for v in history.get("losses") or [] if number(v) is not None]
        evals = [(int(e[0]), float(e[1])) for e in history.get("evals") or [] if len(e) == 2 and number(e[1])]
        if losses:
            runs.append(LossRun(f"{path.parent.parent.name} {path.parent.name}", losses, evals))
    return runs


def _is_loss(catalogue: Catalogue, m: MetricResult) -> bool:
    return display_of(catalogue, m.metric).chart == "loss"


def loss_runs_from_checks(metrics: Iterable[MetricResult], catalogue: Catalogue) -> list[LossRun]:
    """The curves the fine-tune checks carry (``train_loss_final`` with ``extra.curve``): what a record
    fetched from another machine shows without its ``history.json`` files."""
    runs = []
    for m in metrics:
        curve = m.extra.get("curve") if _is_loss(catalogue, m) else None
        if isinstance(curve, list) and curve:
            test = m.test.split("::")[-1]
            runs.append(LossRun(f"{test} {m.where}", [float(v) for v in curve if number(v) is not None], []))
    return runs


def loss_png(runs: Sequence[LossRun], target: float | None) -> bytes:
    """Every fine-tune's 10-step mean training loss (lines) and eval loss (dots), the target dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.2, 3.8))
    ax = fig.add_subplot()
    for run in runs:
        line = ax.plot(range(1, len(run.losses) + 1), rolling_mean(run.losses), linewidth=1.3, label=run.label)[0]
        if run.evals:
            ax.plot([e[0] for e in run.evals], [e[1] for e in run.evals], "o", color=line.get_color(), markersize=4)
    if target is not None:
        ax.axhline(target, color=FLOOR, linestyle="--", linewidth=1.2, label=f"target {target:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (10-step mean; dots: eval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return png(fig)


def loss_target(metrics: Iterable[MetricResult], catalogue: Catalogue) -> float | None:
    """The fine-tune's target: the ``max`` the SKU sets for the final training loss."""
    for m in metrics:
        if _is_loss(catalogue, m) and number(m.max) is not None:
            return float(m.max)  # type: ignore[arg-type]
    return None


def loss_curve_png(history: dict[str, Any], path: Path, *, title: str, target: float | None = None) -> Path:
    """One run: train loss per step (raw and 10-step mean), eval loss at checkpoints, the target as a line."""
    from matplotlib.figure import Figure

    losses = [float(v) for v in history.get("losses", [])]
    evals = history.get("evals", [])
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    steps = list(range(1, len(losses) + 1))
    ax.plot(steps, losses, color="#9ecae1", linewidth=1, label="train loss")
    ax.plot(steps, rolling_mean(losses), color="#08519c", linewidth=1.6, label=f"train loss, {WINDOW}-step mean")
    if evals:
        ax.plot([e[0] for e in evals], [e[1] for e in evals], "o", color="#e6550d", label="eval loss (test split)")
    if target is not None:
        ax.axhline(target, color="#2c3e50", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (answer tokens)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(fig, dpi=110))
    return path


def artifacts(out_dir: Path, *, title: str, target: float | None = None) -> list[Path]:
    """The run's report files: loss_curve.png (drawn here from history.json), comparison.json, history.json.

    Only files that exist are returned; a run that stopped early has a history but no comparison.
    """
    paths: list[Path] = []
    history_path = out_dir / "history.json"
    if history_path.is_file():
        history = json.loads(history_path.read_text())
        paths.append(loss_curve_png(history, out_dir / "loss_curve.png", title=title, target=target))
        paths.append(history_path)
    comparison = out_dir / "comparison.json"
    if comparison.is_file():
        paths.append(comparison)
    return paths
