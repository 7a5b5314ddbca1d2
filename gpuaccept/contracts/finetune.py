"""What the fine-tune probe emits (``probes/finetune.py``, ``training/strategy.train_one``): one strategy's run,
a launch of several strategies, or why the launch does not apply.

A TypedDict open on both sides: every key is optional (``total=False``: a strategy skipped below the solo
floor carries only ``strategy``, ``not_run`` and the shared start-up figures; a CPU run has no power or
utilisation), and keys the probe adds later (a checkpoint section, new serving figures) pass, as every
TypedDict payload's do. What is typed is each key's type: a judge reading ``tokens_per_s`` gets a number or
None, and a mistyped one is a ``PayloadError`` naming the field where the result arrives.
"""

from __future__ import annotations

from typing import Any

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

__all__ = ["FinetunePayload", "FinetunePrecision", "FinetuneRun", "ServedCold", "ServedMoved", "ServedWeights"]


class FinetunePrecision(TypedDict, total=False):
    base: str
    adapters: str
    deterministic: bool


class ServedMoved(TypedDict, total=False):
    """The merged weights written (``saved``) or copied to scratch (``scratch_copy``): where, how much, how fast;
    ``error`` when the filesystem refused them."""

    path: str
    bytes: int
    seconds: float
    gbps: float | None
    files: int
    tensors: int
    error: str


class ServedCold(TypedDict, total=False):
    """One cold start of the merged weights (``training.served_weights.cold_start``) and its first token."""

    path: str
    bytes: int
    read_s: float
    placed_s: float
    ttft_s: float
    gbps: float | None
    cache: str
    files: int
    mismatched: dict[str, str]
    device: str
    error: str
    first_token: str
    tokens: list[int]
    logits_equal: bool
    max_abs_logit_delta: float
    loaded_from: str


class ServedWeights(TypedDict, total=False):
    """The launch's first adapter merged, saved to the models filesystem and cold-started (rank 0's solo run)."""

    adapter: str
    prompt_tokens: int
    saved: ServedMoved
    cold: ServedCold
    scratch_copy: ServedMoved
    scratch_cold: ServedCold
    phases_s: dict[str, float]
    error: str


class FinetuneRun(TypedDict, total=False):
    """One strategy's run on one rank (solo, DDP, FSDP): its training, its figures and what it took."""

    strategy: str
    not_run: str  # why this strategy was skipped (the solo run was below its floor)
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
    model_flops: dict[str, float]
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
    precision: FinetunePrecision
    grad_ckpt: bool
    compiled_layers: int
    torch: str
    test_hook: Any
    util_pct: float | None
    util_min_pct: float | None
    util_samples: int
    util_error: str | None
    power_w: float | None
    peak_mem_gib: float
    peak_reserved_gib: float | None  # None on a CPU (the process's peak RSS is peak_mem_gib there)
    checkpoints: list[str]
    dataset: str
    config: dict[str, Any]
    lifecycle_s: float
    serving: dict[str, Any]
    served_weights: ServedWeights
    startup_s: float
    startup_phases_s: dict[str, float]
    torch_threads: int | None
    run_s: float
    wall_s: float
    phases: dict[str, float]
    process_wall_s: float


class FinetunePayload(FinetuneRun, total=False):
    """A launch's result: one strategy's run itself, or ``strategies`` by name with the shared start-up
    figures beside them; ``not_applicable`` alone when the launch does not apply (the scale profile on a CPU,
    or a GPU too small for it)."""

    not_applicable: str
    strategies: dict[str, FinetuneRun]
