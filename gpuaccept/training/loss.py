"""Causal-LM cross-entropy in chunks of rows, the fp32 upcast recomputed in the backward pass.

Why: with a real vocabulary (Qwen2's 152,064 rows) the stock loss (transformers ``ForCausalLMLoss``) upcasts the whole
logits tensor to fp32 and keeps its log-softmax for the backward pass: at 4 x 2,048 tokens that is two 5 GB fp32 tensors
beside the 2.5 GB bf16 logits, and a 7B LoRA fine-tune on an 80 GB GPU peaked at 74.4 GiB (docs/measurements.md '1 x
H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'). Here each chunk of rows is upcast, reduced and
dropped; the backward pass recomputes its chunk from the bf16 logits. Same arithmetic per token (fp32 log-softmax of the
bf16 logits), summed per chunk, divided by the count of labelled tokens: the mean over labelled tokens that the stock
loss takes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["CHUNK_ROWS", "chunked_causal_lm_loss", "use_chunked_loss"]

#: token rows per chunk: 4,096 x 152,064 fp32 = 2.5 GB at most at a time
CHUNK_ROWS = 4096


def _chunk_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def chunked_causal_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, vocab_size: int, ignore_index: int = -100, **_: Any
) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled tokens (labels shifted here, as transformers does)."""
    shifted = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:].reshape(-1).to(logits.device)
    flat = logits.reshape(-1, vocab_size)
    total = flat.new_zeros((), dtype=torch.float32)
    for start in range(0, flat.shape[0], CHUNK_ROWS):
        part = shifted[start : start + CHUNK_ROWS]
        total = total + checkpoint(_chunk_sum, flat[start : start + CHUNK_ROWS], part, use_reentrant=False)
    return total / (shifted != ignore_index).sum().clamp(min=1)


def use_chunked_loss(model: nn.Module) -> None:
    """Give a transformers causal LM this loss instead of its stock one (``loss_function`` setter)."""
    model.loss_function = chunked_causal_lm_loss  # type: ignore[assignment]
