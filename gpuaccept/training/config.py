"""What one fine-tune run does: a dataclass of settings and the named defaults ("profiles").

Three profiles, each judged by its own limits (``TrainConfig.profile`` travels with the result):
- ``small``: the built-in small model, one minute on a GPU and under three on CI's two CPU cores; fp32
  parameters under bf16 autocast, bitwise reproducible (the fleet agreement's reference run).
- ``scale``: the built-in 7B-class model (Qwen2-7B's shape, its real 152,064-row vocabulary), trained
  at the GPU's speed: bf16 base and adapters, rows packed to 2,048 tokens, sdpa, deterministic kernels.
  GPUs only, when their memory holds it (``scale_plan``).
- ``pretrained``: a ``--model-path`` checkpoint on the same fast path, judged by the fine-tuning contract.
Every default was chosen by measurement (docs/measurements.md) and any of them can be overridden on the
probe's command line.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

__all__ = [
    "FIXTURES",
    "LINEAR_MODULES",
    "PRETRAINED",
    "PROFILES",
    "ROWS_MAX",
    "SCALE",
    "TrainConfig",
    "pretrained_rows",
    "profile_for",
    "scale_plan",
]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "training"

LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on; recorded verbatim in the probe's output and the comparison report."""

    strategy: str = "ddp"
    #: which limits judge the run: small (the built-in small model), scale (built-in 7B), pretrained
    profile: str = "small"
    model_config: Path = FIXTURES / "qwen2-small.json"
    model_path: Path | None = None
    dataset: Path | None = None
    tokenizer: Path = FIXTURES / "tokenizer.json"
    out: Path = Path("reports/training/manual")
    steps: int = 60
    batch_size: int = 512
    seq_len: int = 96
    lr: float = 1e-3
    warmup_steps: int = 10
    weight_decay: float = 0.0
    lora_r: int = 64
    lora_alpha: int = 128
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LINEAR_MODULES
    modules_to_save: tuple[str, ...] = ("lm_head",)
    grad_ckpt: bool = False
    #: rows packed end to end to ``seq_len`` tokens (``gpuaccept.training.packing``), not padded
    pack: bool = False
    #: dtype of the frozen base: fp32 (compute under bf16 autocast on GPUs) or bf16 (no fp32 copy at all)
    base_dtype: str = "fp32"
    #: dtype of the trainable adapters (and their Adam state)
    adapter_dtype: str = "fp32"
    #: torch.use_deterministic_algorithms + a fixed cuBLAS workspace: bitwise reproducible steps
    deterministic: bool = False
    #: rows per step chosen from the checkpoint's size and the GPU's memory (``pretrained_rows``), not fixed
    auto_rows: bool = False
    #: torch.compile of each decoder layer ("regional", GPUs only) or none (``model.compile_layers``)
    compile: str = "none"
    #: sequences per evaluation batch (0: the training batch size)
    eval_batch_size: int = 0
    ckpt_every: int = 30
    log_every: int = 10
    timed_from_step: int = 10
    seed: int = 1234
    gen_tokens: int = 32
    threads: int = 0
    device: str = "auto"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
        return out


#: Defaults per device kind, measured (figures in thresholds.yaml `# --- training ---`).
#: Both train LoRA plus ``lm_head`` (peft ``modules_to_save``): on a random-init model the frozen random
#: lm_head caps the logits (|logit| <= |h| * |w| ~ init_std * hidden), so LoRA alone plateaus — measured on
#: the CPU model, 120 steps: 1.66 nats LoRA-only vs 0.35 with lm_head trainable.
#: "gpu": 8 layers x 768 hidden (52 M parameters), 512 sequences per GPU, 40 steps. Measured on 2 x H200
#:   SXM 141GB (torch 2.11, 2026-11-22, ``benchmarks/train_sweep.sh``, 60 steps): the 0.5 target is reached at
#:   step 22-28, 8.1 s of training, GPUs 98.7% busy once each rank keeps to 4 CPU threads (see
#:   ``finetune._threads``). 40 steps (1.4x the slowest step to target; one launch now trains three times:
#:   every GPU alone, DDP, FSDP) with the clock from step 5 (cuBLAS has chosen its kernels after the first
#:   steps; 35 timed steps, ~4 s per run) and a checkpoint at 20 and 40. Tried and not taken: 1024
#:   sequences (93.8% busy, 2x the step time, same steps to target) and a wider model (1024 hidden: 84%
#:   busy, slower). 16 generated tokens per timing and sample: the lifecycle's ~400 batch-1 decode steps
#:   at 32 tokens took 5-8 s of each ~15 s run.
#: "cpu": 2 layers x 64 hidden (init std 0.125 ~ 1/sqrt(64)), 16 sequences per rank, 1 torch thread per
#:   rank: 80 steps reach ~0.33 nats in ~6 s of training per rank on CI's class of CPU.
PROFILES: dict[str, dict[str, Any]] = {
    "gpu": {
        "model_config": FIXTURES / "qwen2-small.json",
        "steps": 40,
        "batch_size": 512,
        "lr": 1e-3,
        "ckpt_every": 20,
        "timed_from_step": 5,
        "gen_tokens": 16,
    },
    "cpu": {
        "model_config": FIXTURES / "qwen2-tiny.json",
        "steps": 80,
        "batch_size": 16,
        "lr": 6e-3,
        "lora_r": 16,
        "lora_alpha": 32,
        "ckpt_every": 40,
        "timed_from_step": 5,
        "gen_tokens": 16,
        "threads": 1,
    },
}

#: The built-in real-scale run (GPUs only): Qwen2-7B's shape with its 152,064-row vocabulary, seeded random
#: init built on the GPU in bf16; LoRA r64 a128 on every linear layer, bf16 adapters, 4 rows of 2,048 packed
#: tokens (8,192 tokens per step), 70 steps, deterministic kernels. Measured figures and the choice of each
#: setting: docs/measurements.md '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'. 70 steps,
#: not the 100 of the fine-tuning contract ("loss < 0.5 within 100 steps"): the 10-step mean reaches 0.5 at step
#: 51-52 on H100 and H200 at 80 and 100 steps (step 50 0.44, step 100 0.23), so 70 steps still judge the target,
#: the final loss and the perplexity, and every 10 steps saved are ~7 s a strategy (three strategies on a node of
#: several GPUs), which pay for the storage and tenant sections (docs/measurements.md 'GPU VMs, 2026-11-28:
#: storage and tenant safety' and '..., later: the fine-tune's own checkpoint and four GPUs': a four-GPU node
#: was 53 s over its 7 minutes at 80 steps).
SCALE: dict[str, Any] = {
    "profile": "scale",
    "model_config": FIXTURES / "qwen2-7b.json",
    "steps": 70,
    "batch_size": 4,
    "seq_len": 2048,
    "pack": True,
    "base_dtype": "bf16",
    "adapter_dtype": "bf16",
    "deterministic": True,
    "lr": 3e-4,
    "warmup_steps": 10,
    "lora_r": 64,
    "lora_alpha": 128,
    "modules_to_save": (),
    "ckpt_every": 50,
    "log_every": 10,
    "timed_from_step": 5,
    "eval_batch_size": 16,
    "gen_tokens": 16,
}

#: With ``--model-path`` (a real pretrained checkpoint such as Qwen2-7B-Instruct): the contract's run (LoRA r64 a128 on
#: the linear layers; a pretrained lm_head needs no training; 100 steps) on the fast path of the scale run on GPUs, at
#: the scale run's rate (3e-4): at the contract's 1e-4 a 1.31 B random-init checkpoint ended at 0.72, above the 0.5
#: target, at 3e-4 at 0.12 (one H100 80GB HBM3), and rows per step from the checkpoint's size (``pretrained_rows``). On
#: CPU nodes (CI's loopback cluster) the same code path with fp32 weights (CPU bf16 is slow and not what CI measures),
#: short packed rows that keep CI within its time and the small CPU profile's rate: a 7B's 1e-4 barely moves a 64-wide
#: model (CI's checkpoint: loss 2.55 after 100 steps at 1e-4, 0.41 at 6e-3). Figures: docs/measurements.md '1 x H100
#: 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'.
PRETRAINED: dict[str, dict[str, Any]] = {
    "gpu": {**SCALE, "profile": "pretrained", "auto_rows": True},
    "cpu": {
        "profile": "pretrained",
        "steps": 100,
        "batch_size": 4,
        "seq_len": 256,
        "pack": True,
        "deterministic": True,
        "lr": 6e-3,
        "lora_r": 64,
        "lora_alpha": 128,
        "modules_to_save": (),
        "ckpt_every": 50,
        "timed_from_step": 5,
        "gen_tokens": 16,
        "threads": 1,
    },
}


#: GPU memory the scale profile needs, by what it runs (docs/measurements.md
#: '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'): batch 4 x 2,048 without gradient
#: checkpointing peaked at NO_CKPT_PEAK_GIB on one H100 80GB HBM3 (80 GB class:
#: H100, H200, A100 80GB, B200); with checkpointing (48 GB class: L40S) activations shrink to one layer's
#: and the peak to the bf16 weights plus a few GiB. Below CKPT_MIN_GIB the 7B-class model does not fit one
#: GPU alone and the scale run is not applicable (the GPU's declared memory says so).
NO_CKPT_MIN_GIB = 75.0
CKPT_MIN_GIB = 40.0


def scale_plan(total_gib: float) -> dict[str, Any] | None:
    """What the scale profile runs on a GPU of ``total_gib``: gradient checkpointing or not; None when a
    7B-class model with its activations cannot fit."""
    if total_gib >= NO_CKPT_MIN_GIB:
        return {"grad_ckpt": False}
    if total_gib >= CKPT_MIN_GIB:
        return {"grad_ckpt": True}
    return None


#: A checkpoint's rows per step on a GPU (``pretrained_rows``). A step must give the GPU more work than the host takes
#: to launch it (28 decoder layers took the H100 80GB HBM3 host ~300-460 ms of CPU a step): a 1.31 B checkpoint at 4 x
#: 2,048 tokens kept the H100 78% busy, at 8 x 2,048 96.4%; the 6.53 B one at 4 rows 99.4% (docs/measurements.md '1 x
#: H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'). So rows double from 4 until frozen matmul weights
#: x tokens per step reach STEP_WORK_MIN, as far as the memory holds them; and a checkpoint whose 4 rows would not fit
#: (a 14B's 40 layers x 17,408 wide on an 80 GB GPU: ~94 GB estimated) trains fewer rows instead of running out of
#: memory.
STEP_WORK_MIN = 2.0e13
#: Activation bytes per token, per layer, per unit of the MLP's width, for LoRA on every linear layer
#: without checkpointing: fitted to the peaks of both checkpoints on one H100 80GB HBM3 (1.31 B, 8,960 wide:
#: 24.2 GiB at 4 rows; 6.53 B, 18,944 wide: 59.0 GiB at 4 rows; both 11.3 once weights are taken off)
ACTIVATION_BYTES = 11.3
ROWS_MAX = 16
#: the share of the GPU's memory the estimated peak may take (the rest: CUDA context, allocator slack)
MEMORY_SHARE = 0.9


def pretrained_rows(
    frozen_params: int, weight_bytes: int, layers: int, mlp_width: int, seq_len: int, total_gib: float, rows: int = 4
) -> int:
    """Rows per step for a checkpoint: ``rows`` halved while its estimated peak exceeds ``MEMORY_SHARE`` of
    ``total_gib`` (down to one row), else doubled while the step is too light for the GPU to stay busy
    (``STEP_WORK_MIN``) and the doubled batch's estimated peak still fits."""

    def fits(n: int) -> bool:
        peak = weight_bytes + n * seq_len * layers * mlp_width * ACTIVATION_BYTES
        return peak <= MEMORY_SHARE * total_gib * 2**30

    while rows > 1 and not fits(rows):
        rows //= 2
    while rows < ROWS_MAX and frozen_params * rows * seq_len < STEP_WORK_MIN and fits(rows * 2):
        rows *= 2
    return rows


def profile_for(device: str, profile: str = "small", **overrides: Any) -> TrainConfig:
    """The ``profile`` ('small' or 'scale') for ``device`` ('cpu' or 'gpu'), the pretrained settings if a
    ``model_path`` is given, then the non-None ``overrides``."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if given.get("model_path") is not None:
        settings = {**PROFILES[device], **PRETRAINED[device]}
    elif profile == "scale":
        if device != "gpu":
            raise ValueError("the scale profile trains a 7B-class model: GPUs only")
        settings = {**PROFILES[device], **SCALE}
    elif profile == "small":
        settings = dict(PROFILES[device])
    else:
        raise ValueError(f"unknown profile {profile!r} (small or scale)")
    settings.update(given)
    if "batch_size" in given:  # rows asked for on the command line are the rows trained
        settings["auto_rows"] = False
    return TrainConfig(**settings)
