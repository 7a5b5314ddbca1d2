"""A fine-tune launch's time: its limit from the floors it is held to, and what its ranks' progress proves
when it did not finish.

The limit (``planned_limit``): every strategy's steps at the slowest rate a healthy GPU of the SKU may train
(the floor of the metric that judges its speed: tokens/s for the small model and CPU ranks; MFU for the
7B-class and ``--model-path`` runs, as FLOPs per second over the SKU's dense BF16 peak), plus the measured
fixed costs, with a margin (``gpuaccept.training.budget``). The launcher stops the launch as soon as a rank
is proven behind (``gpuaccept.training.watch``).

When a launch did not finish (``judge_unfinished``), its ranks are read from their progress lines: a rank
still in a strategy's steps at the stop trained at most (its steps + 1) x tokens a step over the time since
that strategy's first line; when that bound is below the floor, the rank is FAILED by the same metric and
limit as a finished run, named by its GPU, with the bound on the check. A rank whose bound does not prove
it below the floor, or one that stopped making progress, is recorded unreadable naming where it stood.
The strategies every rank finished before the stop were sent as they finished and are judged as usual.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.progress_line import Progress, read_progress
from gpuaccept.timelimits import TimeLimit
from gpuaccept.training.budget import LaunchPlan, StrategyWork, launch_limit
from gpuaccept.training.config import FIXTURES, LINEAR_MODULES, ROWS_MAX, TrainConfig, profile_for
from gpuaccept.training.flops import flops_from_config
from gpuaccept.training.watch import latest, phase_start
from gpuaccept.verdicts.training import LaunchShape

__all__ = [
    "RankStand",
    "judge_unfinished",
    "judge_unfinished_ranks",
    "planned_limit",
    "solo_floor",
    "stands",
    "weight_bytes",
]


def _config(shape: LaunchShape, strategy: str, model_path: Path | None) -> TrainConfig:
    """What the probe will run for ``strategy`` of a launch of ``shape`` (the same defaults it starts from)."""
    profile = "scale" if shape.profile == "scale" else "small"
    return profile_for("gpu" if shape.gpu_run else "cpu", profile, strategy=strategy, model_path=model_path)


def _tokens_per_step(cfg: TrainConfig) -> int:
    """Tokens a rank trains a step, at most: a checkpoint's rows are chosen on the GPU, up to ROWS_MAX."""
    return (ROWS_MAX if cfg.auto_rows else cfg.batch_size) * cfg.seq_len


def _flops_per_token(cfg: TrainConfig, model_path: Path | None) -> float | None:
    """FLOPs per trained token from the model's config.json (the built-in 7B's, or the checkpoint's)."""
    path = (model_path / "config.json") if model_path else (FIXTURES / "qwen2-7b.json")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    targets = tuple(cfg.lora_targets) or LINEAR_MODULES
    return flops_from_config(config, cfg.lora_r, targets, cfg.seq_len).per_token


def _floor_rate(
    judge: JudgeLike, shape: LaunchShape, strategy: str, node: str, cfg: TrainConfig, model_path: Path | None
) -> tuple[float, str] | None:
    """The slowest tokens/s per rank the SKU's floor allows for ``strategy``, and where it comes from."""
    metric = shape.speed_metric(strategy) if shape.gpu_run or shape.profile == "small" else None
    if metric is None:
        return None
    try:
        limit = judge.declared(metric, node)
    except KeyError:
        return None
    floor = getattr(limit, "min", None)
    if floor is None:
        return None
    if shape.profile == "small":
        return float(floor), f"{metric} >= {floor:g}"
    peak = judge.datasheet(judge.sku(node), "bf16_dense_tflops")
    flops = _flops_per_token(cfg, model_path)
    if not peak or not flops:
        return None
    rate = floor / 100 * peak * 1e12 / flops
    return rate, f"{metric} >= {floor:g}% of {peak:g} TFLOPS at {flops:.3g} FLOPs/token"


def weight_bytes(shape: LaunchShape, model_path: Path | None) -> int | None:
    """The base model's bytes (every linear and output layer, and the input embedding), from its config.json in
    the dtype the launch holds it in: what the merged weights' save and cold start move."""
    cfg = _config(shape, "solo", model_path)
    path = (model_path / "config.json") if model_path else cfg.model_config
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    count = flops_from_config(config, cfg.lora_r, LINEAR_MODULES, cfg.seq_len).frozen_matmul_params
    embedding = 0 if config.get("tie_word_embeddings") else int(config["hidden_size"]) * int(config["vocab_size"])
    return (count + embedding) * {"bf16": 2, "fp32": 4}[cfg.base_dtype]


def planned_limit(
    judge: JudgeLike,
    shape: LaunchShape,
    node: str,
    strategies: Sequence[str],
    *,
    model_path: Path | None,
    lifecycle: bool,
    serving: bool,
    storage: tuple[tuple[str, float], ...] = (),
) -> TimeLimit | None:
    """The launch's limit from its plan at the floors of ``node``'s SKU, and ``storage``'s work at its filesystems'
    contracted rates; None where a strategy has no floor (a checkpoint on CPU ranks: its speed is reported, not
    judged), so the probe's declared limit applies."""
    works = []
    for strategy in strategies:
        cfg = _config(shape, strategy, model_path)
        floor = _floor_rate(judge, shape, strategy, node, cfg, model_path)
        if floor is None:
            return None
        works.append(StrategyWork(strategy, cfg.steps, _tokens_per_step(cfg), floor[0], floor[1]))
    return launch_limit(LaunchPlan(tuple(works), lifecycle, serving, storage))


def solo_floor(judge: JudgeLike, shape: LaunchShape, node: str, model_path: Path | None) -> float | None:
    """The tokens/s a GPU's own run must reach on ``node``'s SKU (its speed metric's floor, as a rate): what the
    probe holds every rank's solo run to before it trains the node-wide strategies (``--solo-floor``)."""
    floor = _floor_rate(judge, shape, "solo", node, _config(shape, "solo", model_path), model_path)
    return None if floor is None else round(floor[0], 1)


class RankStand:
    """Where one rank stood when its launch was stopped."""

    def __init__(self, last: Progress, opened: Progress | None, ended_at: float, hang_s: float) -> None:
        self.last = last
        self.opened = opened
        self.ended_at = ended_at
        self.hang_s = hang_s

    @property
    def silent_s(self) -> float:
        """Seconds from the rank's last progress line to the stop."""
        return self.ended_at - self.last.t

    @property
    def hung(self) -> bool:
        """Whether the rank had made no progress for the launch's hang time when it was stopped."""
        return self.silent_s >= self.hang_s

    @property
    def in_steps(self) -> bool:
        """Whether the rank was in a strategy's optimizer steps (the only phase a speed bound applies to)."""
        return bool(self.last.steps) and self.opened is not None

    def tokens_per_s_bound(self, tokens_per_step: int) -> float | None:
        """At most this many tokens/s over the strategy so far: (steps + 1) x tokens over the time since its
        first line (a step in flight when it was stopped counted as done)."""
        if not self.in_steps or self.opened is None:
            return None
        elapsed = self.ended_at - self.opened.t
        return (self.last.step + 1) * tokens_per_step / elapsed if elapsed > 0 else None

    def where(self) -> str:
        steps = f" at step {self.last.step} of {self.last.steps}" if self.last.steps else ""
        hang = " (a hang)" if self.hung else ""
        return f"in {self.last.phase}{steps}, its last progress {self.silent_s:.0f} s before the stop{hang}"


def stands(stdout: str, ended_at: float, hang_s: float) -> dict[tuple[str, int], RankStand]:
    """Every rank's standing at the stop, keyed by (node, rank)."""
    lines = read_progress(stdout)
    return {
        key: RankStand(last, phase_start(lines, key, last.phase), ended_at, hang_s)
        for key, last in latest(lines).items()
    }


def _plan_figures(shape: LaunchShape, strategy: str, model_path: Path | None) -> tuple[int, float | None]:
    """Tokens a step (an upper bound per rank) and FLOPs a token of ``strategy``, as the launch planned them."""
    cfg = _config(shape, strategy, model_path)
    return _tokens_per_step(cfg), None if shape.profile == "small" else _flops_per_token(cfg, model_path)


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
    tokens_per_step, flops_per_token = _plan_figures(shape, strategy, model_path)
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
