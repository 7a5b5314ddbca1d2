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

from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["FlopCount", "count_flops"]


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
        return {
            "frozen_matmul_params": self.frozen_matmul_params,
            "adapter_params": self.adapter_params,
            "layers": self.layers,
            "width": self.width,
            "seq_len": self.seq_len,
            "flops_per_token": self.per_token,
        }


def count_flops(model: nn.Module, config: Any, seq_len: int) -> FlopCount:
    """Count from the model itself (a checkpoint's real shapes, GQA's narrower k/v projections included):
    frozen weights of ``nn.Linear`` layers (LoRA's base layers and the output layer), trainable ones."""
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
