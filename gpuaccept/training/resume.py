"""The resume that proves the fine-tune's checkpoint usable: restored (``training.checkpoint``), rebuilt, trained on.

Once training is over, the launch reads the checkpoint back on the node that saved it, its page cache dropped,
checks every byte, rebuilds the model from its seed (nothing of the run's memory), loads the adapter, the optimizer
and the schedule, and trains the steps that followed; their losses must equal the uninterrupted run's (the run is
bitwise deterministic on one GPU).
"""

from __future__ import annotations

import dataclasses
import io
import math
import time
from pathlib import Path
from typing import Any

import torch

from gpuaccept.training.checkpoint import ADAPTER, OPTIMIZER, restore
from gpuaccept.training.loop import optimizer_step, schedule, stream

__all__ = ["departure", "resume"]


def resume(
    *,
    cfg: Any,
    rt: Any,
    folder: Path,
    step: int,
    expected: list[float],
    seed: int,
    pad_id: int,
    train_ex: list[Any],
) -> dict[str, Any]:
    """Read the checkpoint back, rebuild the run from it and train ``len(expected)`` steps; the restore's
    figures, the resumed losses beside the uninterrupted run's, and how far apart they are."""
    from safetensors.torch import load as from_safetensors

    from gpuaccept.training.model import apply_lora, build_base, compile_layers, wrap

    started = time.monotonic()
    data, restored = restore(folder)
    out: dict[str, Any] = {"outcome": "stopped", "restore": restored, "step": step, "expected_losses": expected}
    if restored["mismatched"]:
        out["resume_error"] = "the checkpoint read back differs from what was saved: not resumed"
        out["seconds"] = round(time.monotonic() - started, 3)
        return out
    solo = dataclasses.replace(rt, rank=0, world=1)
    model = wrap(apply_lora(build_base(cfg, seed, rt.device), cfg), "solo", rt.device, 1)
    if cfg.compile == "regional" and rt.device.type == "cuda":  # as the saving run was (``strategy.train_one``)
        compile_layers(model, cfg.deterministic)
    adapter = from_safetensors(data[ADAPTER])
    names = {n.removeprefix("module.") for n, p in model.named_parameters() if p.requires_grad}
    if set(adapter) != names:
        out["resume_error"] = f"the adapter's tensors do not match the model's: {sorted(set(adapter) ^ names)[:3]}"
        out["seconds"] = round(time.monotonic() - started, 3)
        return out
    model.load_state_dict(adapter, strict=False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg))
    states = torch.load(io.BytesIO(data[OPTIMIZER]), map_location=rt.device, weights_only=True)
    opt.load_state_dict(states["optimizer"])
    sched.load_state_dict(states["scheduler"])
    batches = stream(cfg, train_ex, solo, pad_id)
    for _ in range(step):  # the batches the run had trained on: the data order is the seed's
        next(batches)
    model.train()
    losses: list[float] = []
    for _ in expected:
        batch, _tokens = next(batches)
        losses.append(float(optimizer_step(model, batch, params, opt, sched, rt.device).detach().float()))
        opt.zero_grad(set_to_none=True)
    out.update(
        outcome="resumed",
        losses=losses,
        max_abs_delta=departure(losses, expected),
        seconds=round(time.monotonic() - started, 3),
    )
    return out


def departure(losses: list[float], expected: list[float]) -> float | None:
    """The largest |resumed - uninterrupted| loss; infinite where either is not finite (``max`` over a list
    holding a NaN answers by where the NaN stands: ``max([0.0, nan])`` is 0.0); None for no steps."""
    deltas = [abs(a - b) for a, b in zip(losses, expected, strict=True)]
    return math.inf if any(not math.isfinite(d) for d in deltas) else max(deltas, default=None)
