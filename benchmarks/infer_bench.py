"""The suite's inference (gpuaccept.inference) on the built-in 7B shape, outside the suite: run it beside a
reference script (stock transformers' ``generate``) on the same card in one call to compare like with like.

    python3 benchmarks/infer_bench.py [--config fixtures/training/qwen2-7b.json] [--out infer.json]
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 benchmarks/infer_bench.py --deterministic   # as the suite serves

Builds the seeded base on the GPU in bf16 (as the suite's 7B-class run does), then measures with
``gpuaccept.inference.bench.measure``: the base; LoRA r64 on every linear layer unmerged (eager static cache,
batch 1: what an unmerged adapter costs); the adapter merged (graph, as it would be served). The adapter's B is
drawn at random (peft initialises it to zero, which would make the merged model the base). Prints one JSON
line per model and MBU against ``--hbm-tbps`` (default: 3.35 for an H100, 4.8 for an H200, by the GPU's name).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from gpuaccept.inference.bench import measure
from gpuaccept.inference.decode import Decoder
from gpuaccept.inference.kernels import serving_kernels
from gpuaccept.training.config import FIXTURES
from gpuaccept.training.data import encode, load_splits, load_tokenizer

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _mbu(figures: dict, hbm: float) -> dict:
    out = {}
    for key, value in figures.items():
        if key.startswith("decode_") and isinstance(value, dict):
            out[key] = round(100 * value["read_tb_per_s"] / hbm, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=FIXTURES / "qwen2-7b.json")
    parser.add_argument("--hbm-tbps", type=float, default=None)
    parser.add_argument("--bf16-tflops", type=float, default=989.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="as the suite serves after its 7B fine-tune (with CUBLAS_WORKSPACE_CONFIG=:4096:8 set before the "
        "run): torch.use_deterministic_algorithms(True) under gpuaccept.inference.kernels.serving_kernels",
    )
    args = parser.parse_args()
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    with serving_kernels() if args.deterministic else nullcontext():
        run(args)


def run(args: argparse.Namespace) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    hbm = args.hbm_tbps or (4.8 if "H200" in name else 3.35)
    tokenizer = load_tokenizer(None, FIXTURES / "tokenizer.json")
    _, test_rows, _ = load_splits(None)
    examples = [e for e in (encode(tokenizer, r, 2048) for r in test_rows) if e]
    prompts = [e["prompt_ids"] for e in examples]
    refs = [e["answer_ids"] for e in examples]
    config = AutoConfig.from_pretrained(args.config)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    started = time.perf_counter()
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    base.eval()
    print(json.dumps({"gpu": name, "build_s": round(time.perf_counter() - started, 1), "prompts": len(prompts)}))
    results = {}
    kw = dict(eos=tokenizer.eos_token_id, pad=int(tokenizer.pad_token_id), batch=args.batch, new_tokens=args.new_tokens)
    results["base"] = measure(base, prompts, refs, check_eager=True, **kw)
    print(json.dumps({"model": "base", "mbu_pct": _mbu(results["base"], hbm), **results["base"]}), flush=True)
    lora = LoraConfig(r=64, lora_alpha=128, lora_dropout=0.0, target_modules=LORA_TARGETS)
    tuned = get_peft_model(base, lora)
    with torch.no_grad():
        for pname, param in tuned.named_parameters():
            if "lora_" in pname:
                param.data = (torch.randn_like(param, dtype=torch.float32) * 0.01).to(dtype)
    tuned.eval()
    unmerged = Decoder(tuned, 1, len(prompts[0]), args.new_tokens, int(tokenizer.pad_token_id), "eager")
    runs = [unmerged.run([prompts[0]]) for _ in range(2)]
    step = statistics.median(r.step_s for r in runs)
    results["unmerged_eager"] = {"tokens_per_s": round(1 / step, 2)}
    print(json.dumps({"model": "lora-unmerged-eager", **results["unmerged_eager"]}), flush=True)
    del unmerged
    dynamic = Decoder(base, 1, len(prompts[0]), args.new_tokens, int(tokenizer.pad_token_id), "dynamic")
    runs = [dynamic.run([prompts[0]]) for _ in range(2)]
    step = statistics.median(r.step_s for r in runs)
    per_step = results["base"]["decode_1"]["bytes_per_step"]
    results["base_dynamic_eager"] = {
        "tokens_per_s": round(1 / step, 2),
        "mbu_pct": round(100 * per_step / step / 1e12 / hbm, 2),
    }
    print(json.dumps({"model": "base-dynamic-eager (the fallback path)", **results["base_dynamic_eager"]}), flush=True)
    del dynamic
    merged = tuned.merge_and_unload()
    merged.eval()
    results["merged"] = measure(merged, prompts, refs, check_eager=True, **kw)
    print(json.dumps({"model": "merged", "mbu_pct": _mbu(results["merged"], hbm), **results["merged"]}), flush=True)
    for which in ("base", "merged"):
        r = results[which]
        mfu = 100 * r["prefill"]["tflops_per_s"] / args.bf16_tflops
        batch = r["decode_batch"]
        one, many = r["decode_1"], r["decode_batched"]
        print(
            f"{which:7s} TTFT {r['prefill']['ttft_ms']:.1f} ms ({mfu:.1f}% MFU)  b1 {one['tokens_per_s']:.1f} "
            f"tok/s ({100 * one['read_tb_per_s'] / hbm:.1f}% MBU)  b{batch} {many['tokens_per_s']:.0f} tok/s "
            f"({100 * many['read_tb_per_s'] / hbm:.1f}% MBU)  eager==graph {r.get('eager_1')}  "
            f"F1 {r['answers']['token_f1_pct']}  {r['seconds']} s"
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
