"""Build the model (built-in tiny Qwen2 or a local checkpoint), add LoRA, and wrap it for DDP or FSDP.

FSDP choice: FSDP2 (``torch.distributed.fsdp.fully_shard``) with one shard group per decoder layer plus
the root. Why FSDP2 rather than FSDP1: it shards per parameter (DTensor), so LoRA's frozen base weights
and trainable adapters live side by side without FSDP1's flat-parameter rule that one flat parameter is
all-trainable or all-frozen (``use_orig_params`` workarounds); it keeps parameter names unchanged, so
peft saves the adapter from the sharded model as it does from a plain one; it runs on gloo/CPU as well
as NCCL/GPU (CI exercises the same code); and it is the API PyTorch develops (FSDP1 is deprecated).

Precision, per profile (``TrainConfig.base_dtype`` / ``adapter_dtype``): the small built-in model keeps fp32
parameters and computes under ``torch.autocast(bfloat16)`` on GPUs, so its training, reload and comparison
evaluate alike. The real-scale and ``--model-path`` runs hold the frozen base in bf16 with no fp32 copy (a
7B base in fp32 is 30 GB of weights read every step) and bf16 adapters: one dtype in every FSDP2 group
(mixed bf16/fp32 parameters in one group are a known failure point, huggingface/accelerate#3985).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpuaccept.training.config import TrainConfig
from gpuaccept.training.loss import use_chunked_loss

__all__ = [
    "apply_lora",
    "build_base",
    "compile_layers",
    "decoder_layers",
    "load_base",
    "param_bytes",
    "trainable_checksum",
    "trainable_state",
    "wrap",
]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build_base(cfg: TrainConfig, seed: int, device: torch.device | None = None) -> nn.Module:
    """The base model in ``cfg.base_dtype``: a local checkpoint, or the fixture config with a seeded
    random init. A bf16 base is built straight on ``device`` (a 7B model initialises on a GPU in seconds,
    on the CPU in minutes); the seed makes every GPU of one SKU build the same weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = DTYPES[cfg.base_dtype]
    if cfg.model_path is not None:
        model = load_base(cfg.model_path, dtype, device)
        # the adapters' random init (peft's kaiming A) draws from here: seeded, every GPU and rank starts
        # from the same adapters, as with the built-in model (unseeded, 4 gloo ranks departed at step 2)
        torch.manual_seed(seed)
    else:
        torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(cfg.model_config)
        config._attn_implementation = "sdpa"
        where = device if device is not None and dtype != torch.float32 else torch.device("cpu")
        with where:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if cfg.pack:  # the fast path: the loss in chunks (peak 72.1 GiB, not 74.4, for the 7B run on an H100)
        use_chunked_loss(model)
    return model


def load_base(path: Path, dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> nn.Module:
    """A checkpoint in ``dtype``, loaded straight onto ``device`` for a bf16 base (no fp32 copy on the
    host first), with sdpa attention."""
    from transformers import AutoModelForCausalLM

    direct = device is not None and device.type == "cuda" and dtype != torch.float32
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="sdpa", device_map={"": device} if direct else None
    )


def apply_lora(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """Wrap in a peft LoRA model; only adapters (and ``modules_to_save``) stay trainable."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        modules_to_save=list(cfg.modules_to_save) or None,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    adapter = DTYPES[cfg.adapter_dtype]
    for param in peft_model.parameters():
        if param.requires_grad and param.dtype != adapter:
            param.data = param.data.to(adapter)
    if cfg.grad_ckpt:
        peft_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.enable_input_require_grads()
    return peft_model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks (``*DecoderLayer``): FSDP's unit of all-gather and resharding."""
    return [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]


def compile_layers(model: nn.Module, deterministic: bool) -> int:
    """``torch.compile`` each decoder layer (regional compilation); returns how many.

    Why per layer: the layers share one code object, so Inductor compiles one layer's graph (forward and backward) once
    and every other layer reuses it, where compiling the whole model traces all of them (docs/measurements.md '1 x H100
    80GB HBM3 and 1 x H200, 2026-11-25: training at real scale' has both costs). In deterministic mode Inductor is told
    so too (``inductor.config.deterministic``): it then skips on-device benchmarking that could pick a different kernel,
    and so different bits, on another GPU or in another process.
    """
    import torch._inductor.config as inductor_config

    inductor_config.deterministic = deterministic
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile()
    return len(layers)


def wrap(model: nn.Module, strategy: str, device: torch.device, world: int) -> nn.Module:
    """DDP replica, FSDP2 shards (one group per decoder layer, then the root), or for ``solo`` the plain
    model on this rank's device (a per-GPU run that talks to no other rank: DDP on a world of one would
    add only a no-op gradient exchange, FSDP on one rank shards nothing)."""
    if strategy == "solo":
        return model.to(device)
    if strategy == "ddp":
        model.to(device)
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
        layers = decoder_layers(model)
        if not layers:
            raise RuntimeError(f"{type(model).__name__}: no *DecoderLayer modules to shard")
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    raise ValueError(f"unknown strategy {strategy!r} (ddp or fsdp)")


def param_bytes(model: nn.Module) -> tuple[int, int]:
    """(bytes this rank holds, bytes of the whole model): equal under DDP, ~1/world under FSDP."""
    local = total = 0
    for p in model.parameters():
        size = p.element_size()
        total += p.numel() * size
        to_local = getattr(p, "to_local", None)
        local += (to_local().numel() if to_local else p.numel()) * size
    return local, total


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full (gathered) trainable tensors on CPU, keyed by the peft names; collective under FSDP."""
    state: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        full = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
        state[name.removeprefix("module.")] = full.detach().float().cpu().contiguous().clone()
    return state


def trainable_checksum(model: nn.Module) -> str:
    """sha256 over the trainable weights this rank holds (DDP replicas must agree bit for bit)."""
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        tensor: Any = p.to_local() if hasattr(p, "to_local") else p
        digest.update(name.removeprefix("module.").encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]
