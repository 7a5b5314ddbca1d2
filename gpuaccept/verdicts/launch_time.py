"""What a fine-tune launch's ranks' progress proves when it did not finish.

The launch's limit is its plan's (``gpuaccept.training.plan.FinetunePlan``: every strategy's steps at the floor
rate, the fixed costs, the storage work, with a margin); the launcher stops the launch as soon as a rank is proven
behind (``gpuaccept.training.watch``).

When a launch did not finish (``judge_unfinished``), its ranks are read from their progress lines: a rank
still in a strategy's steps at the stop trained at most (its steps + 1) x tokens a step over the time since
that strategy's first line; when that bound is below the floor, the rank is FAILED by the same metric and
limit as a finished run, named by its GPU, with the bound on the check. A rank whose bound does not prove
it below the floor, or one that stopped making progress, is recorded unreadable naming where it stood.
The strategies every rank finished before the stop were sent as they finished and are judged as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.training.plan import LaunchShape, planned_figures
from gpuaccept.training.watch import RankStand

__all__ = ["judge_unfinished", "judge_unfinished_ranks"]


def judge_unfinished(
    judge: JudgeLike,
    shape: LaunchShape,
    strategy: str,
    stand: RankStand,
    *,
    node: str,
    gpu: str,
    model_path: Path | None,
    why: str,
) -> Any:
    """One rank that did not finish ``strategy``: FAILED by its speed metric when its progress bound is below
    the floor, else unreadable (a hang, or a bound that proves nothing), naming where it stood and why the
    launch stopped."""
    metric = shape.speed_metric(strategy)
    tokens_per_step, flops_per_token = planned_figures(shape, strategy, model_path)
    # a hung rank is named as such: how slow it was before it stopped says nothing of the GPU's speed
    bound = stand.tokens_per_s_bound(tokens_per_step) if stand.last.phase == strategy and not stand.hung else None
    where: dict[str, Any] = {"gpu": gpu, "task_rank": stand.last.rank}
    if bound is not None:
        value: float | None = round(bound, 1)
        if shape.profile != "small":
            peak = judge.datasheet(judge.sku(node), "bf16_dense_tflops")
            value = round(100 * bound * flops_per_token / (peak * 1e12), 2) if peak and flops_per_token else None
        floor = getattr(judge.declared(metric, node), "min", None)
        if value is not None and floor is not None and value < floor:
            return judge.check(
                metric,
                value,
                node=node,
                **where,
                bound="at most: the rank's own progress when its launch was stopped, before it finished",
                progress=stand.where(),
                stopped=why,
            )
    return judge.unreadable(metric, f"{strategy} not finished: {stand.where()}; {why}", node=node, **where)


def judge_unfinished_ranks(
    judge: JudgeLike,
    shape: LaunchShape,
    strategy: str,
    unfinished: Mapping[tuple[str, int], RankStand],
    model_path: Path | None,
    why: str,
) -> None:
    """Every rank that had not finished ``strategy`` when its launch was stopped (``unfinished``, keyed by node
    and rank), each named by its GPU (a CPU rank by its rank) and judged by ``judge_unfinished``."""
    for (node, rank), stand in sorted(unfinished.items()):
        gpu = f"{stand.last.gpu}" if stand.last.gpu is not None else f"cpu rank {rank}"
        judge_unfinished(judge, shape, strategy, stand, node=node, gpu=gpu, model_path=model_path, why=why)
