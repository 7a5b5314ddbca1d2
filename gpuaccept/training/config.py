"""What one fine-tune run does: a dataclass of settings and the per-device defaults ("profiles").

Why profiles: the same probe must finish in a minute on one H200 (start-up included) and in well under
three minutes on CI's two slow CPU cores. A GPU needs enough work per step to stay >=80% busy (bigger
model, bigger batch); a CPU needs the smallest model that still shows learning. Every default below
was chosen by measurement (see thresholds.yaml `# --- training ---` for the figures), and any of them
can be overridden on the probe's command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["FIXTURES", "PRETRAINED", "PROFILES", "TrainConfig", "profile_for"]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "training"

LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on; recorded verbatim in the probe's output and the comparison report."""

    strategy: str = "ddp"
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
    ckpt_every: int = 30
    log_every: int = 10
    timed_from_step: int = 10
    seed: int = 1234
    samples: int = 3
    gen_tokens: int = 32
    threads: int = 0
    device: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)

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
#: "gpu": 8 layers x 768 hidden (52 M parameters), 512 sequences per GPU, 40 steps. Measured on the lent
#:   2xH200 (torch 2.11, 2026-11-22, ``benchmarks/train_sweep.sh``, 60 steps): the 0.5 target is reached at
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

#: With ``--model-path`` (a real pretrained checkpoint such as Qwen2-7B-Instruct): the seeds' run —
#: LoRA r64 a128 on the linear layers only (a pretrained lm_head needs no training), 100 steps, short
#: per-GPU batches of long sequences with gradient checkpointing so a 7B model fits in fp32 master weights.
PRETRAINED: dict[str, Any] = {
    "steps": 100,
    "batch_size": 4,
    "seq_len": 1024,
    "lr": 1e-4,
    "lora_r": 64,
    "lora_alpha": 128,
    "modules_to_save": (),
    "grad_ckpt": True,
    "ckpt_every": 50,
    "timed_from_step": 5,
}


def profile_for(device: str, **overrides: Any) -> TrainConfig:
    """The profile for ``device`` ('cpu' or 'gpu'), the pretrained settings if a ``model_path`` is
    given, then the non-None ``overrides``."""
    given = {k: v for k, v in overrides.items() if v is not None}
    settings = dict(PROFILES[device])
    if given.get("model_path") is not None:
        settings.update(PRETRAINED)
    settings.update(given)
    return TrainConfig(**settings)
