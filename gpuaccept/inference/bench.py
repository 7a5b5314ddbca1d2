"""The measurement plan of one model at serving speed: what the judges turn into MBU, MFU and agreement.

For one model (the base, or the fine-tuned one with its adapter merged, as it would be served):

- **time to first token**: the prefill forward of a ``ttft_tokens`` prompt alone (batch 1, no cache written),
  the median of ``repeats`` after two warm-ups, and the FLOPs it executed (``roofline.prefill_flops``);
- **single-stream decode**: the first test prompt decoded greedily for ``new_tokens``, the median step time of
  ``repeats`` runs, and the bytes a step reads (weights once, the stream's KV cache);
- **batched decode** (``decode_batched``): the first ``batch`` test prompts decoded at once (left padding); out of
  memory halves the batch and says so (``batch_halved_from``);
- **answers**: every test prompt decoded in batches of that size, cut at EOS, scored against the references
  (``quality.score``);
- **graph against eager** (``check_eager``): the single stream decoded again eagerly on the same static cache;
  its tokens and logits checksum must equal the graph's.

The mode is ``graph`` on GPUs and ``dynamic`` on CPUs. An architecture whose static cache fails falls back to
``dynamic``: the record names the fallback and its reason, and the judges hold it to that path's own limits.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from gpuaccept.inference.decode import Decoder, DecodeRun
from gpuaccept.inference.quality import score
from gpuaccept.inference.roofline import dims_of, kv_bytes, prefill_flops, weight_bytes

__all__ = ["answers_of", "measure", "synth_prompt"]


def synth_prompt(prompts: Sequence[Sequence[int]], tokens: int) -> list[int]:
    """A ``tokens``-long prompt made of the test prompts one after another (the test split's are short)."""
    pool = [t for p in prompts for t in p]
    if not pool:
        raise ValueError("no prompt tokens to build a prefill prompt from")
    return (pool * (tokens // len(pool) + 1))[:tokens]


def answers_of(tokens: Sequence[Sequence[int]], eos: int | None) -> list[list[int]]:
    """Each stream's answer: its tokens up to the first EOS (excluded)."""
    out = []
    for row in tokens:
        row = list(row)
        out.append(row[: row.index(eos)] if eos is not None and eos in row else row)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _ttft(model: nn.Module, prompt: list[int], repeats: int, device: torch.device) -> float:
    ids = torch.tensor([prompt], device=device)
    times = []
    with torch.no_grad():
        for k in range(repeats + 2):
            _sync(device)
            started = time.perf_counter()
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            _sync(device)
            if k >= 2:
                times.append(time.perf_counter() - started)
    return statistics.median(times)


def _decode_figures(runs: list[DecodeRun], streams: int, step_bytes: Callable[[DecodeRun], float]) -> dict[str, Any]:
    """The median run's figures, with the spread of the repeats beside them."""
    steps = sorted(r.step_s for r in runs)
    median = statistics.median(steps)
    run = runs[0]
    return {
        "streams": streams,
        "step_ms": round(median * 1e3, 4),
        "step_ms_spread": [round(steps[0] * 1e3, 4), round(steps[-1] * 1e3, 4)],
        "tokens_per_s": round(streams / median, 2),
        "bytes_per_step": round(step_bytes(run)),
        "read_tb_per_s": round(step_bytes(run) / median / 1e12, 4),
        "steps_timed": run.steps,
        "repeats": len(runs),
        "capture_s": round(sum(r.capture_s for r in runs), 3),
        "checksum": str(run.checksum),
        "tokens": run.tokens[0],
    }


def measure(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    references: Sequence[Sequence[int]],
    *,
    eos: int | None,
    pad: int,
    batch: int = 32,
    new_tokens: int = 128,
    ttft_tokens: int = 2048,
    repeats: int = 3,
    check_eager: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every figure of the module docstring for ``model`` (in eval mode, on its device, in its own dtype)."""
    device = next(model.parameters()).device
    mode = "graph" if device.type == "cuda" else "dynamic"
    dims = dims_of(model.config)
    element = next(model.parameters()).element_size()
    weights = weight_bytes(model)
    matmul_params = weights["weight_bytes"] // element
    new_tokens = max(new_tokens, 1 + max(len(r) for r in references))
    started = time.monotonic()
    out: dict[str, Any] = {
        "mode": mode,
        "dtype": str(next(model.parameters()).dtype),
        **weights,
        "fallback": None,
        "eager_1": None,
        "batch_halved_from": None,
    }

    def step_bytes(run: DecodeRun) -> float:
        return weights["weight_bytes"] + kv_bytes(dims, element, [round(statistics.fmean(run.contexts))])

    long_prompt = synth_prompt(prompts, ttft_tokens)
    ttft = _ttft(model, long_prompt, repeats, device)
    flops = prefill_flops(dims, matmul_params, weights["lm_head_bytes"] // element, ttft_tokens)
    out["prefill"] = {
        "tokens": ttft_tokens,
        "ttft_ms": round(ttft * 1e3, 3),
        "tflops_per_s": round(flops / ttft / 1e12, 2),
    }

    def decoder(streams: int, width: int, which: str) -> Decoder:
        return Decoder(model, streams, width, new_tokens, pad, which)

    try:
        single = decoder(1, len(prompts[0]), mode)
        runs = [single.run([prompts[0]]) for _ in range(repeats)]
    except torch.cuda.OutOfMemoryError:  # a GPU without room for one stream: no other cache would help
        raise
    except Exception as exc:  # an architecture whose static cache or captured step fails: the dynamic cache
        out["fallback"] = f"{mode} decoding failed ({type(exc).__name__}: {str(exc)[:200]}): dynamic cache, eager"
        log(f"inference: {out['fallback']}")
        mode = out["mode"] = "dynamic"
        single = decoder(1, len(prompts[0]), mode)
        runs = [single.run([prompts[0]]) for _ in range(repeats)]
    out["decode_1"] = _decode_figures(runs, 1, step_bytes)
    if check_eager and mode == "graph":
        eager = decoder(1, len(prompts[0]), "eager").run([prompts[0]])
        out["eager_1"] = {
            "tokens_equal": eager.tokens[0] == runs[0].tokens[0],
            "checksum_equal": eager.checksum == runs[0].checksum,
            "tokens_per_s": round(1 / eager.step_s, 2),
        }
    del single
    width = max(len(p) for p in prompts)
    streams = min(batch, len(prompts))
    while True:
        try:
            many = decoder(streams, width, mode)
            first = list(prompts[:streams])
            runs = [many.run(first) for _ in range(repeats)]
            break
        except torch.cuda.OutOfMemoryError:
            if streams == 1:
                raise
            log(f"inference: out of memory at {streams} streams: halved to {streams // 2}")
            out["batch_halved_from"] = out["batch_halved_from"] or streams
            streams //= 2
            torch.cuda.empty_cache()
    out["decode_batched"] = _decode_figures(runs, streams, step_bytes)
    out["decode_batch"] = streams
    produced: list[list[int]] = []
    for start in range(0, len(prompts), streams):
        chunk = list(prompts[start : start + streams])
        filled = chunk + [chunk[0]] * (streams - len(chunk))  # the decoder's shape; the extra rows are dropped
        produced += many.run(filled).tokens[: len(chunk)]
    refs = answers_of(references, eos)
    out["answers"] = {**score(answers_of(produced, eos), refs), "first": produced[0][:32]}
    out["new_tokens"] = new_tokens
    out["seconds"] = round(time.monotonic() - started, 3)
    return out
