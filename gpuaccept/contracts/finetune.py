"""What the fine-tune probe emits (``probes/finetune.py``, ``training/strategy.train_one``): one strategy's run,
a launch of several strategies, or why the launch does not apply, told apart by ``outcome``.

Every key is required. A reading the run may not give is still written, as ``null``: a CPU run has no
utilisation or power (``util_error`` says why), a rank that is not rank 0 of a saving run has no lifecycle, a run
that saved no resumable checkpoint has no ``checkpoint``. A section that failed is its own shape beside the one
that succeeded (a save the filesystem refused, a resume that stopped, a serving that raised), so a judge reads
which one it got, never a key that may be absent. What each section holds is what the code that writes it
returns: ``inference.bench.measure`` (serving), ``training.lifecycle`` (the comparison), ``training.checkpoint``
and ``training.resume`` (the resumable checkpoint), ``training.served_weights`` (the merged weights from storage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, RootModel

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.finetune_storage import Checkpoint, ServedWeightsOutcome
from gpuaccept.contracts.records import RankRecord
from gpuaccept.contracts.serving import Serving, ServingFigures
from gpuaccept.contracts.strict import strict
from gpuaccept.errors import MeasurementError

__all__ = [
    "FinetuneLaunch",
    "FinetuneNotApplicable",
    "FinetuneNotRun",
    "FinetunePayload",
    "FinetuneRun",
    "FinetuneSingle",
    "Lifecycle",
    "LifecycleCompared",
    "LifecycleStopped",
    "RankRun",
    "RunOrNot",
]


@strict
class Precision(TypedDict):
    base: str
    adapters: str
    deterministic: bool


@strict
class ModelFlops(TypedDict):
    """``training.flops.FlopCount.to_json``: what the model FLOPs per token were counted from."""

    frozen_matmul_params: int
    adapter_params: int
    layers: int
    width: int
    seq_len: int
    flops_per_token: float


@strict
class RunConfig(TypedDict):
    """``training.config.TrainConfig.to_json``: every setting of the run, paths as text."""

    strategy: str
    profile: str
    model_config: str
    model_path: str | None
    dataset: str | None
    tokenizer: str
    out: str
    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup_steps: int
    weight_decay: float
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_targets: list[str]
    modules_to_save: list[str]
    grad_ckpt: bool
    pack: bool
    base_dtype: str
    adapter_dtype: str
    deterministic: bool
    auto_rows: bool
    compile: str
    eval_batch_size: int
    ckpt_every: int
    log_every: int
    timed_from_step: int
    seed: int
    gen_tokens: int
    threads: int
    device: str


@strict
class LifecycleStopped(TypedDict):
    """Training left no adapter to reload, or the comparison raised: what was written, and why it stopped."""

    outcome: Literal["stopped"]
    checkpoints: list[str]
    dataset: str
    config: RunConfig
    history_json: str
    lifecycle_error: str
    lifecycle_s: float


@strict
class LifecycleCompared(TypedDict):
    """``strategy.lifecycle``: the saved adapter reloaded onto the kept original, base against fine-tuned."""

    outcome: Literal["compared"]
    checkpoints: list[str]
    dataset: str
    config: RunConfig
    history_json: str
    comparison_json: str
    original_kept: bool
    reload_eval_loss: float
    reload_eval_delta: float
    base_perplexity: float
    finetuned_perplexity: float
    perplexity_reduction_pct: float
    serving_base: ServingFigures
    serving_merged: ServingFigures
    unmerged_tokens_per_s: float
    merged_speed_ratio: float
    f1_gain_pts: float
    compare_s: float
    lifecycle_rank: int
    lifecycle_s: float


Lifecycle = Annotated[LifecycleCompared | LifecycleStopped, Field(discriminator="outcome")]


@strict
class StartupPhases(TypedDict):
    """``probes._timing.Phases`` of the start-up, in seconds."""

    imports: float
    device_init: float
    rendezvous: float
    data: float


@strict
class StartupShared(TypedDict):
    """The launch's start-up, once for every strategy (imports, device, rendezvous, data)."""

    startup_s: float
    startup_phases_s: StartupPhases
    torch_threads: int


@strict
class LaunchPhases(TypedDict):
    """``probes.finetune._launch_phases``: the launch's wall time by kind of work."""

    startup_s: float
    setup_s: float
    warmup_s: float
    measure_s: float
    checkpoint_s: float
    other_s: float
    lifecycle_s: float
    serving_s: float
    teardown_s: float
    process_wall_s: float


@strict
class FinetuneRun(StartupShared):
    """One strategy's run on one rank (solo, DDP, FSDP): its training, its figures and what it took; what this
    rank did not do after training (a lifecycle, a resumable checkpoint, serving) is None."""

    outcome: Literal["run"]
    strategy: str
    profile: str
    device: str  # cuda or cpu
    world_size: int
    steps_planned: int
    steps_done: int
    losses: list[float]
    evals: list[tuple[int, float]]  # (step, eval loss)
    train_loss_final: float | None
    eval_loss_final: float | None
    nonfinite_steps: int
    tokens_per_s: float | None
    tokens_per_step: int | None
    model_flops: ModelFlops
    model_tflops_per_s: float | None
    timed_tokens: int
    timed_s: float
    train_s: float
    setup_s: float
    warmup_s: float
    pause_s: float
    param_bytes_local: int
    param_bytes_total: int
    trainable_params: int
    total_params: int
    checksum: str  # the trainable parameters' checksum: the same bits on every GPU of one SKU and stack
    precision: Precision
    grad_ckpt: bool
    compiled_layers: int
    torch: str
    test_hook: str | None  # what the test hook changed (``training.perturb``); None in an acceptance run
    util_pct: float | None
    util_min_pct: float | None
    util_samples: int
    util_error: str | None
    power_w: float | None
    peak_mem_gib: float
    peak_reserved_gib: float | None  # None on a CPU (the process's peak RSS is peak_mem_gib there)
    checkpoint: Checkpoint | None
    lifecycle: Lifecycle | None
    serving: Serving | None
    served_weights: ServedWeightsOutcome | None
    run_s: float
    wall_s: float


@strict
class FinetuneNotRun(StartupShared):
    """A strategy skipped: a GPU's own run trained below the solo floor (``_finetune_ranks.below_floor``)."""

    outcome: Literal["not_run"]
    strategy: str
    not_run: str


@strict
class FinetuneSingle(FinetuneRun):
    """A launch of one strategy: its run, with the launch's phases."""

    phases: LaunchPhases
    process_wall_s: float


RunOrNot = Annotated[FinetuneRun | FinetuneNotRun, Field(discriminator="outcome")]


@strict
class Strategies(TypedDict):
    """Each strategy of the launch by name; one not asked for is None."""

    solo: RunOrNot | None
    ddp: RunOrNot | None
    fsdp: RunOrNot | None


@strict
class FinetuneLaunch(StartupShared):
    """A launch of several strategies: each by name, the shared start-up and the launch's phases beside them."""

    outcome: Literal["strategies"]
    strategies: Strategies
    phases: LaunchPhases
    process_wall_s: float


@strict
class FinetuneNotApplicable(TypedDict):
    """The launch does not apply: the scale profile on a CPU, or a GPU too small for it."""

    outcome: Literal["not_applicable"]
    not_applicable: str


class FinetunePayload(
    RootModel[Annotated[FinetuneSingle | FinetuneLaunch | FinetuneNotApplicable, Field(discriminator="outcome")]]
):
    """A launch's result line. A root model because the line is one of three shapes: ``root`` is the shape it is
    (a root model holds no keys of its own, so there is nothing to forbid here; every shape it holds is strict)."""


@dataclass(frozen=True)
class RankRun:
    """One rank's run of one strategy as the judges read it: where it ran (the rank's record) and what it wrote
    (``training.finetune_launch.strategy_records`` picks it out of the launch's typed payload)."""

    record: RankRecord
    run: FinetuneRun | FinetuneNotRun

    @property
    def node(self) -> str:
        return self.record.node

    @property
    def rank(self) -> int:
        return self.record.rank

    @property
    def trained(self) -> FinetuneRun:
        """The run's figures. A strategy skipped below the solo floor has none: its judge
        (``verdicts.training.judge_not_trained``) names why before any other reads this; a judge that reads it
        anyway is an ERROR naming the rank, never a figure."""
        if self.run["outcome"] == "not_run":
            why = f"{self.node} rank {self.rank}: {self.run['strategy']} was not trained: {self.run['not_run']}"
            raise MeasurementError(why, nodes=(self.node,))
        return self.run
