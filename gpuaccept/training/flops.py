"""Model FLOPs per trained token of a LoRA fine-tune, for MFU (model FLOPs utilisation).

The count (PaLM, Chowdhery et al. 2022, appendix B "model FLOPs utilization": 6N + 12·L·H·Q·T per token
for training a dense decoder; H·Q is the model width, T the sequence length attention spans), adapted to
LoRA: a frozen weight takes its forward (2 FLOPs per weight per token) and the gradient of its input (2),
but no weight gradient, so 4 per frozen weight; an adapter weight takes all three, 6. Counted weights are
those of matrix products: every linear layer and the output layer; the input embedding is a lookup, and
norms and biases are elementwise (below 0.01% of the FLOPs), so neither is counted. Attention's
12·L·H·Q·T is PaLM's, without the causal halving, as PaLM and NeMo count it. Recomputation under
gradient checkpointing is not counted: MFU counts the model's FLOPs, not the hardware's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch on the nodes only: the login node plans a launch with flops_from_config alone
    from torch import nn

__all__ = ["FlopCount", "count_flops", "flops_from_config"]


@dataclass(frozen=True)
class FlopCount:
    """The weights a step multiplies by and the FLOPs each trained token costs."""

    frozen_matmul_params: int
    adapter_params: int
    layers: int
    width: int
    seq_len: int

    @property
    def per_token(self) -> float:
        attention = 12 * self.layers * self.width * self.seq_len
        return float(4 * self.frozen_matmul_params + 6 * self.adapter_params + attention)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "flops_per_token": self.per_token}


def count_flops(model: nn.Module, config: Any, seq_len: int) -> FlopCount:
    """Count from the model itself (a checkpoint's real shapes, GQA's narrower k/v projections included):
    frozen weights of ``nn.Linear`` layers (LoRA's base layers and the output layer), trainable ones."""
    from torch import nn

    frozen = adapters = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            for param in module.parameters(recurse=False):
                if param.dim() != 2:
                    continue
                numel = param.numel() if not hasattr(param, "to_local") else int(param.shape.numel())
                if param.requires_grad:
                    adapters += numel
                else:
                    frozen += numel
    return FlopCount(frozen, adapters, int(config.num_hidden_layers), int(config.hidden_size), seq_len)


def flops_from_config(config: dict[str, Any], lora_r: int, targets: tuple[str, ...], seq_len: int) -> FlopCount:
    """The same count from a model's ``config.json`` alone, before any model is built: what a launch's time
    limit is planned with (``gpuaccept.training.budget``). A Qwen2/Llama-shaped decoder: attention's q/o
    projections ``width x heads*head_dim``, k/v ``width x kv_heads*head_dim`` (GQA), the MLP's gate/up/down
    ``width x intermediate``, the output layer ``width x vocab``; LoRA adds ``r x (in + out)`` beside every
    targeted linear layer. ``tests/selftest/test_time_limits.py`` holds it equal to ``count_flops`` on a
    built model."""
    width = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or width // heads)
    kv = int(config.get("num_key_value_heads") or heads) * head_dim
    inner = int(config["intermediate_size"])
    shapes = {
        "q_proj": (width, heads * head_dim),
        "k_proj": (width, kv),
        "v_proj": (width, kv),
        "o_proj": (heads * head_dim, width),
        "gate_proj": (width, inner),
        "up_proj": (width, inner),
        "down_proj": (inner, width),
    }
    frozen = layers * sum(i * o for i, o in shapes.values()) + width * int(config["vocab_size"])
    adapters = layers * sum(lora_r * (i + o) for name, (i, o) in shapes.items() if name in targets)
    return FlopCount(frozen, adapters, layers, width, seq_len)
