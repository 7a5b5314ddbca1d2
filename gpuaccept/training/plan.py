"""The fine-tune launch's plan, beside the code it plans: what it trains, the floors it is held to, the storage work
it does, its time limit and the floor a GPU's own run must reach before the node-wide strategies.

One object (``FinetunePlan``) gathers what the test, the launch's time limit and the judge of a stopped launch each
used to assemble: the launch's shape (``finetune_launch.plan_launch``: which strategies, on how many ranks) and
whose limits judge it (``LaunchShape``); each strategy's work at the slowest rate a healthy GPU of the SKU may train
it (the floor of the metric that judges its speed: tokens/s for the small model and CPU ranks; MFU for the 7B-class
and ``--model-path`` runs, as FLOPs per second over the SKU's dense BF16 peak); the merged weights' save and cold
starts at the declared filesystems' contracted rates (``Store``); and from these the ``--plan`` the launch carries
(``launch_plan``), from which the ``finetune`` spec derives its limit (``budget.limit_of_args``) and the probe its
solo floor. The judges read the plan's figures (``verdicts.launch_time``); they plan nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.training.budget import LaunchPlan, StrategyWork
from gpuaccept.training.config import FIXTURES, LINEAR_MODULES, ROWS_MAX, TrainConfig, profile_for
from gpuaccept.training.finetune_launch import FinetuneLaunch, LaunchShape
from gpuaccept.training.flops import flops_from_config

__all__ = ["FinetunePlan", "LaunchShape", "Store", "planned_figures"]


def run_config(shape: LaunchShape, strategy: str, model_path: Path | None) -> TrainConfig:
    """What the probe will run for ``strategy`` of a launch of ``shape`` (the same defaults it starts from)."""
    profile = "scale" if shape.profile == "scale" else "small"
    return profile_for("gpu" if shape.gpu_run else "cpu", profile, strategy=strategy, model_path=model_path)


def tokens_per_step(cfg: TrainConfig) -> int:
    """Tokens a rank trains a step, at most: a checkpoint's rows are chosen on the GPU, up to ROWS_MAX."""
    return (ROWS_MAX if cfg.auto_rows else cfg.batch_size) * cfg.seq_len


def _model_config(model_path: Path | None, default: Path) -> dict[str, object] | None:
    path = (model_path / "config.json") if model_path else default
    try:
        loaded: dict[str, object] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded


def planned_figures(shape: LaunchShape, strategy: str, model_path: Path | None) -> tuple[int, float | None]:
    """Tokens a step (an upper bound per rank) and FLOPs a token of ``strategy``, as the launch planned them: what a
    stopped rank's progress is read against (``verdicts.launch_time``)."""
    cfg = run_config(shape, strategy, model_path)
    return tokens_per_step(cfg), None if shape.profile == "small" else flops_per_token(cfg, model_path)


def flops_per_token(cfg: TrainConfig, model_path: Path | None) -> float | None:
    """FLOPs per trained token from the model's config.json (the built-in 7B's, or the checkpoint's)."""
    config = _model_config(model_path, FIXTURES / "qwen2-7b.json")
    if config is None:
        return None
    targets = tuple(cfg.lora_targets) or LINEAR_MODULES
    return flops_from_config(config, cfg.lora_r, targets, cfg.seq_len).per_token


@dataclass(frozen=True)
class Store:
    """A declared filesystem's contracted per-node rates, as the plan needs them (``verdicts.storage`` reads the
    contract; the plan only multiplies)."""

    name: str
    write_gbps: float
    read_gbps: float

    def there_and_back(self, gb: float) -> float:
        """Seconds to write ``gb`` here and read it back, at the contract's per-node figures."""
        return gb / self.write_gbps + gb / self.read_gbps


@dataclass(frozen=True)
class FinetunePlan:
    """One launch planned at the floors of its first node's SKU: its shape, each strategy's work at its floor
    (None where one has no floor: a checkpoint on CPU ranks, whose speed is reported, not judged), the weights
    its merged model moves, and where they go."""

    launch: FinetuneLaunch
    shape: LaunchShape
    model_path: Path | None
    works: tuple[StrategyWork, ...] | None
    weight_bytes: int | None
    models: Store | None = None
    scratch: Store | None = None

    @classmethod
    def of(
        cls,
        judge: JudgeLike,
        launch: FinetuneLaunch,
        model_path: Path | None,
        models: Store | None = None,
        scratch: Store | None = None,
    ) -> FinetunePlan:
        shape = launch.shape
        node = launch.nodes[0]
        works: list[StrategyWork] | None = []
        for strategy in launch.strategies:
            cfg = run_config(shape, strategy, model_path)
            floor = _floor_rate(judge, shape, strategy, node, cfg, model_path)
            if floor is None or works is None:
                works = None
                continue
            works.append(StrategyWork(strategy, cfg.steps, tokens_per_step(cfg), floor[0], floor[1]))
        weights = _weight_bytes(shape, model_path) if "solo" in launch.strategies else None
        return cls(launch, shape, model_path, tuple(works) if works is not None else None, weights, models, scratch)

    @property
    def storage(self) -> tuple[tuple[str, float], ...]:
        """The merged weights' save and cold starts at the contracted rates: saved to and read from the models
        filesystem, then copied to scratch and read from there where declared. Nothing where no models filesystem is
        declared: nothing is saved."""
        if not self.weight_bytes or self.models is None:
            return ()
        gb = self.weight_bytes / 1e9
        terms = [("merged weights saved and cold-started", self.models.there_and_back(gb))]
        if self.scratch is not None:
            terms.append(("copied to scratch and cold-started", self.scratch.there_and_back(gb)))
        return tuple((name, round(seconds, 1)) for name, seconds in terms)

    @property
    def launch_plan(self) -> LaunchPlan | None:
        """What the launch carries as its ``--plan`` (``budget.plan_arg``), from which the ``finetune`` spec derives
        its limit and the probe reads its solo floor; None where a strategy has no floor (the spec's default limit
        applies)."""
        if self.works is None:
            return None
        return LaunchPlan(self.works, self.launch.lifecycle, self.shape.serves, self.storage)


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
    flops = flops_per_token(cfg, model_path)
    if not peak or not flops:
        return None
    rate = floor / 100 * peak * 1e12 / flops
    return rate, f"{metric} >= {floor:g}% of {peak:g} TFLOPS at {flops:.3g} FLOPs/token"


def _weight_bytes(shape: LaunchShape, model_path: Path | None) -> int | None:
    """The base model's bytes (every linear and output layer, and the input embedding), from its config.json in
    the dtype the launch holds it in: what the merged weights' save and cold start move."""
    cfg = run_config(shape, "solo", model_path)
    config = _model_config(model_path, cfg.model_config)
    if config is None:
        return None
    count = flops_from_config(config, cfg.lora_r, LINEAR_MODULES, cfg.seq_len).frozen_matmul_params
    tied = bool(config.get("tie_word_embeddings"))
    embedding = 0 if tied else int(str(config["hidden_size"])) * int(str(config["vocab_size"]))
    return (count + embedding) * {"bf16": 2, "fp32": 4}[cfg.base_dtype]
