"""The model lifecycle around a fine-tune: keep the original, reload, compare base vs fine-tuned.

Run on rank 0 only, in a single process from what is on disk (never from the training ranks' memory),
so the checks prove the saved artefacts are usable: the original model kept unchanged, the adapter
reloading to the eval loss seen in training, and a comparison report of base against tuned
(perplexity, answers scored against the references, time to first token and decode speed at serving speed
through ``gpuaccept.inference``) written as JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpuaccept.training.data import Example
from gpuaccept.training.loop import Runtime, evaluate

__all__ = ["compare", "file_fingerprint", "serving", "unmerged_speed", "weights_fingerprint", "write_json"]

_HASH_LIMIT = 256 << 20


def file_fingerprint(folder: Path) -> dict[str, str]:
    """Per file: sha256 for files up to 256 MiB, size+mtime for bigger ones (a 15 GB checkpoint)."""
    out: dict[str, str] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        if stat.st_size <= _HASH_LIMIT:
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        else:
            out[str(path.relative_to(folder))] = f"size={stat.st_size},mtime_ns={stat.st_mtime_ns}"
    return out


def weights_fingerprint(model: nn.Module) -> dict[str, str]:
    """Per parameter: its float64 sum and sum of squares, on the device (a 7B model in well under a
    second, where hashing 15 GB on the host takes a minute). The seeded base rebuilt after training must
    give the same figures: the same weights, and training left the base alone."""
    out: dict[str, str] = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            values = param.detach().double()
            out[name] = f"{float(values.sum()).hex()}/{float((values * values).sum()).hex()}"
    return out


def serving(
    model: nn.Module, tokenizer: Any, test_ex: list[Example], device: torch.device, **plan: Any
) -> dict[str, Any]:
    """The model at serving speed (``gpuaccept.inference.bench.measure``) over the test split: time to first
    token, single-stream and batched decode, answers scored against the references. CPUs decode on the dynamic
    cache with shorter prompts and fewer tokens: reported, never judged by a GPU's limits."""
    from gpuaccept.inference.bench import measure
    from gpuaccept.inference.kernels import serving_kernels

    cpu = device.type != "cuda"
    defaults: dict[str, Any] = {"ttft_tokens": 128, "new_tokens": 16, "repeats": 1} if cpu else {}
    model.eval()
    with serving_kernels() as kernels:  # the card's speed; the agreement checks hold the tokens to it
        figures = measure(
            model,
            [e["prompt_ids"] for e in test_ex],
            [e["answer_ids"] for e in test_ex],
            eos=tokenizer.eos_token_id,
            pad=int(tokenizer.pad_token_id),
            **{**defaults, **plan},
        )
    return {**figures, "kernels": kernels}


def unmerged_speed(model: nn.Module, prompt: list[int], new: int, pad: int) -> float:
    """Tokens/s of a model with its adapter unmerged (peft's extra matmuls beside every layer), eager on the
    same static cache, batch 1: what serving the adapter without merging it costs (reported beside)."""
    from gpuaccept.inference.decode import Decoder
    from gpuaccept.inference.kernels import serving_kernels

    device = next(model.parameters()).device
    with serving_kernels():  # as the merged model is served, so the two speeds compare
        decoder = Decoder(model, 1, len(prompt), new, pad, "eager" if device.type == "cuda" else "dynamic")
        return round(1 / decoder.run([prompt]).step_s, 2)


def _model_report(model: nn.Module, test_ex: list[Example], rt: Runtime, batch: int, pad: int) -> dict[str, Any]:
    model.to(rt.device).eval()
    loss = evaluate(model, test_ex, rt, batch, pad)
    return {"eval_loss": loss, "perplexity": math.exp(loss) if math.isfinite(loss) and loss < 700 else float("inf")}


def compare(
    base: nn.Module,
    adapter_path: Path,
    tokenizer: Any,
    test_ex: list[Example],
    rt: Runtime,
    *,
    batch: int,
    pad: int,
    new_tokens: int,
) -> dict[str, Any]:
    """Base vs fine-tuned (adapter reloaded from disk onto the same base) on the test split:
    perplexity, then both at serving speed with the adapter merged, as it would be served.

    One base serves all: it is evaluated and served alone, then the saved adapter is loaded onto it (peft adds
    its layers beside the base weights, which stay as they are) for the perplexity and the unmerged decode
    speed, then merged into it and served again, the graph's tokens held against an eager run. A 7B base is
    held once, not twice.
    """
    from peft import PeftModel

    local = Runtime(rank=0, world=1, local_rank=rt.local_rank, device=rt.device, node=rt.node)
    started = time.monotonic()
    base_report = _model_report(base, test_ex, local, batch, pad)
    base_report["serving"] = serving(base, tokenizer, test_ex, rt.device)
    tuned = PeftModel.from_pretrained(base, str(adapter_path))
    tuned_report = _model_report(tuned, test_ex, local, batch, pad)
    tuned_report["unmerged_tokens_per_s"] = unmerged_speed(tuned, test_ex[0]["prompt_ids"], new_tokens, pad)
    merged = tuned.merge_and_unload()  # type: ignore[operator]
    tuned_report["serving"] = serving(merged, tokenizer, test_ex, rt.device, check_eager=True)
    base_ppl, tuned_ppl = base_report["perplexity"], tuned_report["perplexity"]
    base_speed = base_report["serving"]["decode_1"]["tokens_per_s"]
    return {
        "base_model": base_report,
        "finetuned_model": {"adapter": str(adapter_path), **tuned_report},
        "comparison": {
            "perplexity_reduction_pct": _reduction_pct(base_ppl, tuned_ppl),
            "merged_speed_ratio": round(tuned_report["serving"]["decode_1"]["tokens_per_s"] / base_speed, 4),
            "unmerged_speed_ratio": round(tuned_report["unmerged_tokens_per_s"] / base_speed, 4),
            "f1_gain_pts": round(
                tuned_report["serving"]["answers"]["token_f1_pct"] - base_report["serving"]["answers"]["token_f1_pct"],
                2,
            ),
        },
        "seconds": round(time.monotonic() - started, 2),
    }


def _reduction_pct(base: float, tuned: float) -> float:
    """How far the fine-tuned perplexity is below the base's, in %; NaN when either is not finite (the
    test then fails the check naming which one), never a made-up 100%."""
    if not (math.isfinite(base) and math.isfinite(tuned)) or base <= 0:
        return float("nan")
    return (1 - tuned / base) * 100


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    return path
