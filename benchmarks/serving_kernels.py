"""Which serving kernels keep every GPU of a SKU on the same tokens and logits checksum, and what each costs.

    python3 benchmarks/serving_kernels.py --gpu 0 [--configs default,det,det-nofill,no-cudnn,no-cudnn-memeff]

Builds the suite's seeded 7B base on one GPU in bf16 (as the fine-tune does), then for each kernel setting
decodes, on the suite's own ``Decoder`` (static cache, CUDA graph), the first test prompt alone and the first
32 together, twice each, and prints one JSON line per setting: tokens/s and the two logits checksums of each
run. Start one process per GPU at once and compare the checksums across GPUs: a setting is fit to serve only
if every GPU (and every run) gives the same ones. The decoder writes the KV cache and its tokens with
``index_copy_``'s plain kernel in every setting (``gpuaccept.inference.kernels``; before 2026-11-27 the
deterministic settings wrote them with a sort-based ``index_put_``). Settings:

- ``default``: deterministic algorithms off (cuBLAS, SDPA as PyTorch picks them);
- ``det``: ``torch.use_deterministic_algorithms(True)``, as the fine-tune runs (NaN fills of new tensors);
- ``det-nofill``: the same without the NaN fills (``torch.utils.deterministic.fill_uninitialized_memory``):
  how the suite serves (``gpuaccept.inference.kernels``);
- ``no-cudnn``: default, with cuDNN's attention off (SDPA then picks flash, memory-efficient or math);
- ``no-cudnn-memeff``: default, with cuDNN's and the memory-efficient attention off.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gpuaccept.inference.decode import Decoder
from gpuaccept.training.config import FIXTURES
from gpuaccept.training.data import encode, load_splits, load_tokenizer


def _setting(name: str) -> None:
    torch.use_deterministic_algorithms(name.startswith("det"))
    torch.utils.deterministic.fill_uninitialized_memory = name != "det-nofill"  # type: ignore[attr-defined]
    torch.backends.cuda.enable_cudnn_sdp(not name.startswith("no-cudnn"))
    torch.backends.cuda.enable_mem_efficient_sdp(name != "no-cudnn-memeff")


def _profile(model: torch.nn.Module, prompts: list, width: int, pad: int, name: str, top: int) -> None:
    """The same batch-32 steps run eagerly (the kernels a graph replays) under torch.profiler: the top kernels."""
    from torch.profiler import ProfilerActivity, profile

    decoder = Decoder(model, len(prompts), width, 16, pad, "eager")
    decoder.run(prompts)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decoder.run(prompts)
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=top, max_name_column_width=90)
    print(f"--- {name}: top {top} CUDA kernels, eager batch {len(prompts)}, 16 new tokens\n{table}", flush=True)
    del decoder
    torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--configs", default="default,det,det-nofill,no-cudnn,no-cudnn-memeff")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        help="also print each setting's top N CUDA kernels of eager batch-32 steps (torch.profiler): where a "
        "setting's time goes",
    )
    args = p.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # as the suite's fine-tune process has it
    torch.cuda.set_device(args.gpu)
    device = torch.device("cuda", args.gpu)
    tokenizer = load_tokenizer(None, FIXTURES / "tokenizer.json")
    _, rows, _ = load_splits(None)
    prompts = [e["prompt_ids"] for e in (encode(tokenizer, r, 2048) for r in rows) if e]
    torch.manual_seed(1234)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(FIXTURES / "qwen2-7b.json"), dtype=torch.bfloat16
        )
    model.eval()
    pad = int(tokenizer.pad_token_id)
    width = max(len(x) for x in prompts[:32])
    for name in args.configs.split(","):
        _setting(name)
        out: dict[str, object] = {"gpu": args.gpu, "setting": name}
        for batch in (1, 32):
            decoder = Decoder(model, batch, width, args.new_tokens, pad, "graph")
            runs = [decoder.run(prompts[:batch]) for _ in range(2)]
            out[f"b{batch}_tokens_per_s"] = round(batch / min(r.step_s for r in runs), 1)
            out[f"b{batch}_checksums"] = [str(r.checksum) for r in runs]
            out[f"b{batch}_tokens_head"] = runs[0].tokens[0][:8]
            del decoder
            torch.cuda.empty_cache()
        out["t"] = round(time.time(), 1)
        print(json.dumps(out), flush=True)
        if args.profile:
            _profile(model, prompts[:32], width, pad, name, args.profile)
    torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
