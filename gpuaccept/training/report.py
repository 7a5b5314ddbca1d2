"""Judging aids for a fine-tune: loss-curve numbers (rolling mean, steps to the target, rebound).

Pure functions over what the probe wrote, used by the test on the login node and unit-tested in the
selftests; the run's pictures and report files are ``gpuaccept.report.charts.loss``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from gpuaccept.contracts.finetune import RankRun

__all__ = [
    "TARGET_LOSS",
    "WINDOW",
    "curve_points",
    "loss_rebound",
    "print_summary",
    "rolling_mean",
    "steps_to_target",
]

WINDOW = 10
#: The loss a fine-tune must reach (nats, 10-step mean): the fine-tuning contract's target (a 7B LoRA run, "loss < 0.5
#: within 100 steps"), kept for the built-in model so ``train_steps_to_target`` means one thing; how
#: many steps it may take is the SKU's limit.
TARGET_LOSS = 0.5


def rolling_mean(losses: Sequence[float], window: int = WINDOW) -> list[float]:
    """Mean of the last ``window`` steps at each step (shorter at the start)."""
    out = []
    for i in range(len(losses)):
        chunk = losses[max(0, i + 1 - window) : i + 1]
        out.append(statistics.fmean(chunk))
    return out


def steps_to_target(losses: Sequence[float], target: float, window: int = WINDOW) -> int | None:
    """First step (1-based) whose ``window``-step mean loss is at or below ``target``; None if never.

    A full window is required, so one lucky batch at step 3 does not count as reaching the target.
    """
    for i, value in enumerate(rolling_mean(losses, window)):
        if i + 1 >= window and math.isfinite(value) and value <= target:
            return i + 1
    return None


def loss_rebound(losses: Sequence[float], window: int = WINDOW) -> float | None:
    """Final ``window``-step mean / best ``window``-step mean: 1.0 when the run ends at its best.

    A run that reached a low loss and then climbed (divergence, a bad LR schedule, a broken reduce)
    shows a ratio well above 1 even when its final loss still clears the target.
    """
    means = rolling_mean(losses, window)[window - 1 :]
    finite = [m for m in means if math.isfinite(m)]
    if not finite or not math.isfinite(means[-1]) or min(finite) <= 0:
        return None
    return means[-1] / min(finite)


def curve_points(losses: Sequence[float], points: int = 400) -> list[float]:
    """The loss curve on the check itself (every step, or every k-th of a long run), so the summary page
    can draw it from the run record alone."""
    step = max(1, -(-len(losses) // points))
    return [round(v, 5) for v in losses[::step]]


def print_summary(run: str, duration_s: float, runs: Sequence[RankRun], label: Callable[[RankRun], str]) -> None:
    """One line per rank in the test's captured output: what an operator compares between runs."""
    data0 = runs[0].trained
    lifecycle = data0["lifecycle"]
    figures: dict[str, Any] = {k: data0[k] for k in ("train_loss_final", "eval_loss_final", "steps_done")}
    if lifecycle is not None and lifecycle["outcome"] == "compared":
        figures |= {k: lifecycle[k] for k in ("reload_eval_delta", "perplexity_reduction_pct")}
    print(f"{run}: step {duration_s:.1f} s, " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    keys = ("tokens_per_s", "util_pct", "peak_mem_gib", "startup_s", "train_s", "wall_s", "param_bytes_local")
    for one in runs:
        data = one.trained
        values = ", ".join(f"{k}={_short(data[k])}" for k in keys)  # type: ignore[literal-required]
        print(f"  rank {one.rank} {one.node} {label(one)}: {values}")


def _short(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value
