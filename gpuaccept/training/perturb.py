"""Test hook: make one GPU (or gloo rank) compute very slightly wrong, to prove the suite catches it.

A GPU with a silent data corruption, a marginal SM or a flaky HBM bit can still train to a low loss and
pass every limit; what gives it away is that its loss trajectory departs from the one every healthy GPU
of the same SKU and software stack trains bit for bit (``gpuaccept.judging.trajectory``). This hook
injects such a fault on purpose, so the suite's own runs can show the departing GPU is named:

    GPUACCEPT_TEST_PERTURB_TRAINING="gpu=1,step=10"            # GPU 1 of every node
    GPUACCEPT_TEST_PERTURB_TRAINING="node=node2,rank=1,step=10"  # the launch's rank 1 on node2

Selectors (all given must match): ``node`` (the host name the probe reports), ``gpu`` (the NVML index of
the rank's GPU), ``rank`` (the rank in the node's fine-tune launch). ``step`` (default 10): after that
optimizer step, one element of the first trainable parameter (the one of largest magnitude) is moved
by one bfloat16 unit in the last place: 2^-7 of its binade, the size of a low bit flipped in a bf16
activation or weight. Off unless the variable is set; read only by the fine-tune probe
(``gpuaccept.probes.finetune``), which prints a warning and records what it did in its result line.
Never set it in an acceptance run of a real cluster: it makes the perturbed GPU fail on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PERTURB_ENV", "Perturbation", "apply", "parse"]

PERTURB_ENV = "GPUACCEPT_TEST_PERTURB_TRAINING"
_KEYS = ("node", "gpu", "rank", "step")


@dataclass(frozen=True)
class Perturbation:
    """Which rank is perturbed, and after which optimizer step."""

    step: int = 10
    node: str | None = None
    gpu: int | None = None
    rank: int | None = None

    def selects(self, *, node: str, gpu: int | None, rank: int) -> bool:
        """Whether this rank is the one to perturb (every selector given must match)."""
        return (
            (self.node is None or self.node == node)
            and (self.gpu is None or self.gpu == gpu)
            and (self.rank is None or self.rank == rank)
        )


def parse(text: str | None) -> Perturbation | None:
    """``"gpu=1,step=10"`` -> a Perturbation; None for an empty value. A bad value raises ValueError
    naming the variable, so a typo never leaves the hook silently off."""
    if not text or not text.strip():
        return None
    fields: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in _KEYS or not value:
            raise ValueError(f"{PERTURB_ENV}={text!r}: expected comma-separated {'/'.join(_KEYS)}=value, got {part!r}")
        try:
            fields[key] = value if key == "node" else int(value)
        except ValueError:
            raise ValueError(f"{PERTURB_ENV}={text!r}: {key} must be an integer, got {value!r}") from None
    if fields.get("step", 1) < 1:
        raise ValueError(f"{PERTURB_ENV}={text!r}: step must be 1 or more")
    return Perturbation(**fields)


def apply(model: Any) -> str:
    """Add one bf16 ulp to the largest-magnitude element of the first trainable parameter this rank
    holds; return what was done (for the warning and the result line)."""
    import torch

    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        local = param.to_local() if hasattr(param, "to_local") else param
        if local.numel() == 0:
            continue
        with torch.no_grad():
            flat = local.data.view(-1)
            index = int(flat.abs().argmax())
            before = float(flat[index])
            cell = flat[index : index + 1]
            if cell.dtype == torch.float32:
                cell.view(torch.int32).add_(1 << 16)  # the lowest bit a bf16 copy of it keeps
            elif cell.dtype in (torch.bfloat16, torch.float16):
                cell.view(torch.int16).add_(1)
            else:
                continue
            after = float(flat[index])
        return f"{name.removeprefix('module.')}[{index}] {before!r} -> {after!r} (one bf16 ulp)"
    return "no trainable parameter held by this rank: nothing perturbed"
