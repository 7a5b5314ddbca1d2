"""What one fine-tune run does: a dataclass of settings and the per-device defaults ("profiles").

Why profiles: the same probe must finish in a minute on one H200 (start-up included) and in well under
three minutes on CI's two slow CPU cores. A GPU needs enough work per step to stay >=80% busy (bigger
model, bigger batch); a CPU needs the smallest model that still shows learning. Every default below
was chosen by measurement (see thresholds.yaml `# --- training ---` for the figures), and any of them
can be overridden on the probe's command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["FIXTURES", "PROFILES", "TrainConfig", "profile_for"]

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
    steps: int = 300
    batch_size: int = 128
    seq_len: int = 96
    lr: float = 1e-3
    warmup_steps: int = 10
    weight_decay: float = 0.0
    lora_r: int = 64
    lora_alpha: int = 128
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LINEAR_MODULES
    modules_to_save: tuple[str, ...] = ()
    grad_ckpt: bool = False
    ckpt_every: int = 100
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


#: Defaults per device kind. "gpu": 8 layers x 768 hidden, 128 sequences per GPU and step, so kernels are
#: long enough for the GPU to stay busy; "cpu": 2 layers x 64 hidden, 16 sequences, a few gloo ranks.
PROFILES: dict[str, dict[str, Any]] = {
    "gpu": {"model_config": FIXTURES / "qwen2-small.json", "steps": 300, "batch_size": 128, "lr": 1e-3},
    "cpu": {
        "model_config": FIXTURES / "qwen2-tiny.json",
        "steps": 120,
        "batch_size": 16,
        "lr": 3e-3,
        "lora_r": 16,
        "lora_alpha": 32,
        "ckpt_every": 60,
        "timed_from_step": 5,
        "gen_tokens": 16,
        "threads": 1,
    },
}


def profile_for(device: str, **overrides: Any) -> TrainConfig:
    """The profile's defaults for ``device`` ('cpu' or 'gpu'), then the non-None ``overrides``."""
    base = TrainConfig(**PROFILES[device])
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **given)
