"""The seeds' model lifecycle around a fine-tune: keep the original, reload, compare base vs fine-tuned.

Run on rank 0 only, in a single process from what is on disk (never from the training ranks' memory),
so the checks prove the saved artefacts are usable: the original model kept unchanged, the adapter
reloading to the eval loss seen in training, and a comparison report like the seeds' evaluator's
(perplexity, generation speed, time to first token, sample generations) written as JSON.
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
from gpuaccept.training.loop import Runtime, autocast, evaluate

__all__ = ["compare", "file_fingerprint", "generation_speed", "sample_generations", "weights_fingerprint", "write_json"]

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


def _generate(model: nn.Module, ids: torch.Tensor, new: int, eos: int | None, device: torch.device) -> Any:
    with torch.no_grad(), autocast(device):
        return model.generate(  # type: ignore[operator]
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new if eos is None else 0,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos if eos is not None else 0,
        )


def generation_speed(model: nn.Module, prompt: list[int], new: int, device: torch.device) -> dict[str, float]:
    """Greedy decoding of exactly ``new`` tokens: time to first token and decode tokens/s (batch 1)."""
    ids = torch.tensor([prompt], device=device)

    def timed(count: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        _generate(model, ids, count, None, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    timed(2)  # warm-up: kernels, caches
    first = min(timed(1) for _ in range(3))
    total = min(timed(new) for _ in range(2))
    return {
        "ttft_ms": round(first * 1000, 2),
        "gen_tokens_per_s": round((new - 1) / max(total - first, 1e-9), 1),
        "gen_total_s": round(total, 4),
    }


def sample_generations(
    model: nn.Module, tokenizer: Any, examples: list[Example], new: int, device: torch.device
) -> list[dict[str, str]]:
    """A few test prompts answered greedily, beside the reference answer (the seeds' samples)."""
    out = []
    for example in examples:
        ids = torch.tensor([example["prompt_ids"]], device=device)
        produced = _generate(model, ids, new, tokenizer.eos_token_id, device)[0, ids.shape[1] :]
        out.append(
            {
                "input": tokenizer.decode(example["prompt_ids"], skip_special_tokens=False),
                "reference": tokenizer.decode(example["answer_ids"], skip_special_tokens=True),
                "generated": tokenizer.decode(produced, skip_special_tokens=True),
            }
        )
    return out


def _model_report(
    model: nn.Module, tokenizer: Any, test_ex: list[Example], rt: Runtime, batch: int, pad: int, new: int, n: int
) -> dict[str, Any]:
    model.to(rt.device).eval()
    loss = evaluate(model, test_ex, rt, batch, pad)
    return {
        "eval_loss": loss,
        "perplexity": math.exp(loss) if math.isfinite(loss) and loss < 700 else float("inf"),
        **generation_speed(model, test_ex[0]["prompt_ids"], new, rt.device),
        "sample_generations": sample_generations(model, tokenizer, test_ex[:n], new, rt.device),
    }


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
    samples: int,
) -> dict[str, Any]:
    """Base vs fine-tuned (adapter reloaded from disk onto the same base) on the test split.

    One base serves all three: it is evaluated alone, then the saved adapter is loaded onto it (peft adds
    its layers beside the base weights, which stay as they are), then merged into it for the merged
    decode speed. A 7B base is held once, not twice.
    """
    from peft import PeftModel

    local = Runtime(rank=0, world=1, local_rank=rt.local_rank, device=rt.device, node=rt.node)
    started = time.monotonic()
    base_report = _model_report(base, tokenizer, test_ex, local, batch, pad, new_tokens, samples)
    tuned = PeftModel.from_pretrained(base, str(adapter_path))
    tuned_report = _model_report(tuned, tokenizer, test_ex, local, batch, pad, new_tokens, samples)
    merged = tuned.merge_and_unload()  # type: ignore[operator]
    merged_speed = generation_speed(merged, test_ex[0]["prompt_ids"], new_tokens, rt.device)
    tuned_report["merged"] = merged_speed
    base_ppl, tuned_ppl = base_report["perplexity"], tuned_report["perplexity"]
    return {
        "base_model": base_report,
        "finetuned_model": {"adapter": str(adapter_path), **tuned_report},
        "comparison": {
            "perplexity_reduction_pct": _reduction_pct(base_ppl, tuned_ppl),
            "speed_change_pct": (tuned_report["gen_tokens_per_s"] / base_report["gen_tokens_per_s"] - 1) * 100,
            "merged_speed_change_pct": (merged_speed["gen_tokens_per_s"] / base_report["gen_tokens_per_s"] - 1) * 100,
            "ttft_change_pct": (tuned_report["ttft_ms"] / base_report["ttft_ms"] - 1) * 100,
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
