"""Our fine-tune beside ``transformers.Trainer`` + peft (the seeds' stack), same GPU, model, rows and batch.

    python benchmarks/train_scale_bench.py --shapes tiny,1b,7b --out reports/bench/scale.json

For each shape: the seeded random-init model in bf16 on the GPU, LoRA r64 a128 on every linear layer, the
built-in data packed to ``--seq-len`` rows (``gpuaccept.training.packing``), ``--batch`` rows per step. Each
contender trains ``--warmup`` steps (not timed: kernels chosen, allocator settled, compiles done), then
``--windows`` timed windows of ``--window-steps`` steps; tokens are the real tokens of the rows trained in
a window; the median window is reported with its spread. NVML utilisation and power are sampled inside
the timed windows. MFU = tokens/s x model FLOPs per token (``gpuaccept.training.flops``) / ``--peak-tflops``
(the SKU's dense BF16 datasheet figure). Contenders:

- ``ours``: the suite's own step (``gpuaccept.training.loop.optimizer_step``), with the adapter dtype,
  deterministic mode and regional compilation given (``--variants``, e.g.
  ``bf16,bf16+compile,bf16-nondet+compile,fp32``); the warm-up's seconds (compiling included) are reported;
- ``trainer``: ``transformers.Trainer`` with peft's model, ``bf16=True``, the same rows and batch size, AdamW
  (torch), no eval, no checkpointing, fp32 adapters (what ``Trainer`` keeps under ``bf16=True``).

Prints one JSON line per run and a table at the end; writes every figure to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = {
    "tiny": "qwen2-small.json",
    "1b": None,  # built below: Qwen2-1.5B's shape (28 layers x 1536, 12 heads, 2 KV heads), real vocabulary
    "7b": "qwen2-7b.json",
}


def _config(shape: str) -> Any:
    from transformers import AutoConfig

    from gpuaccept.training.config import FIXTURES

    if SHAPES[shape]:
        return AutoConfig.from_pretrained(FIXTURES / str(SHAPES[shape]))
    config = AutoConfig.from_pretrained(FIXTURES / "qwen2-7b.json")
    for key, value in {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    }.items():
        setattr(config, key, value)
    return config


class Sampler:
    """NVML utilisation and power of GPU 0 while ``on``."""

    def __init__(self) -> None:
        import threading

        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))
        self.util: list[int] = []
        self.watts: list[float] = []
        self.on = False
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            if self.on:
                self.util.append(int(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
                self.watts.append(self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000)

    def reset(self) -> None:
        self.util, self.watts = [], []


def _rows(cfg: Any, examples: list[Any], pad_id: int, count: int) -> list[tuple[dict[str, Any], int]]:
    from gpuaccept.training.packing import packed_batches

    stream = packed_batches(examples, cfg.batch_size, cfg.seq_len, 0, 1, cfg.seed, pad_id)
    return [next(stream) for _ in range(count)]


def _build(cfg: Any, config: Any, device: Any, chunked_loss: bool) -> Any:
    """The seeded bf16 model with LoRA; ours takes the suite's chunked loss, the Trainer the stock one."""
    import torch
    from transformers import AutoModelForCausalLM

    from gpuaccept.training.loss import use_chunked_loss
    from gpuaccept.training.model import apply_lora

    torch.manual_seed(cfg.seed)
    config._attn_implementation = "sdpa"
    with device:
        base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if chunked_loss:
        use_chunked_loss(base)
    return apply_lora(base, cfg)


def _windows(step: Any, batches: list[Any], args: argparse.Namespace, sampler: Sampler) -> dict[str, Any]:
    import torch

    started = time.perf_counter()
    for index in range(args.warmup):
        step(batches[index][0])
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - started
    rates = []
    sampler.reset()
    position = args.warmup
    for _ in range(args.windows):
        tokens = 0
        sampler.on = True
        started = time.perf_counter()
        for _ in range(args.window_steps):
            batch, count = batches[position]
            step(batch)
            tokens += count
            position += 1
        torch.cuda.synchronize()
        rates.append(tokens / (time.perf_counter() - started))
        sampler.on = False
    return {
        "tokens_per_s": statistics.median(rates),
        "windows_tokens_per_s": [round(r) for r in rates],
        "warmup_s": round(warmup_s, 1),
        "util_pct": round(statistics.fmean(sampler.util), 1) if sampler.util else None,
        "power_w": round(statistics.fmean(sampler.watts), 1) if sampler.watts else None,
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def run_ours(cfg: Any, config: Any, batches: list[Any], args: argparse.Namespace, sampler: Sampler) -> dict[str, Any]:
    import torch

    from gpuaccept.training.loop import optimizer_step, schedule
    from gpuaccept.training.model import compile_layers

    device = torch.device("cuda", 0)
    model = _build(cfg, config, device, chunked_loss=True)
    if cfg.compile == "regional":
        compile_layers(model, cfg.deterministic)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg))
    model.train()
    torch.cuda.reset_peak_memory_stats()

    def step(batch: dict[str, Any]) -> None:
        optimizer_step(model, batch, params, opt, sched, device)
        opt.zero_grad(set_to_none=True)

    return _windows(step, batches, args, sampler)


def run_trainer(
    cfg: Any, config: Any, batches: list[Any], args: argparse.Namespace, sampler: Sampler
) -> dict[str, Any]:
    """The seeds' stack: ``Trainer`` drives the same peft model over the same packed rows."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    device = torch.device("cuda", 0)
    fp32_cfg = replace(cfg, adapter_dtype="fp32")
    model = _build(fp32_cfg, config, device, chunked_loss=False)
    rows = [
        {"input_ids": batch["input_ids"][i], "labels": batch["labels"][i]}
        for batch, _ in batches
        for i in range(batch["input_ids"].shape[0])
    ]
    counts = [count for _, count in batches]
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, targs: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = state.global_step
            if step == args.warmup or (step > args.warmup and (step - args.warmup) % args.window_steps == 0):
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                sampler.on = step < args.warmup + args.windows * args.window_steps

    targs = TrainingArguments(
        output_dir=str(args.out.parent / "trainer-tmp"),
        per_device_train_batch_size=cfg.batch_size,
        max_steps=len(batches),
        learning_rate=cfg.lr,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_steps,
        bf16=True,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=2,
        dataloader_pin_memory=True,
        optim="adamw_torch_fused",
        max_grad_norm=1.0,
        remove_unused_columns=False,
    )
    torch.cuda.reset_peak_memory_stats()
    sampler.reset()

    class InOrder(Trainer):  # the rows in our order, so each window's token count is exact
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)

    trainer = InOrder(model=model, args=targs, train_dataset=rows, callbacks=[Clock()])
    trainer.train()
    rates = []
    for window in range(args.windows):
        first = args.warmup + window * args.window_steps
        tokens = sum(counts[first : first + args.window_steps])
        rates.append(tokens / (marks[window + 1] - marks[window]))
    out = {
        "tokens_per_s": statistics.median(rates),
        "windows_tokens_per_s": [round(r) for r in rates],
        "util_pct": round(statistics.fmean(sampler.util), 1) if sampler.util else None,
        "power_w": round(statistics.fmean(sampler.watts), 1) if sampler.watts else None,
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }
    del trainer, model
    return out


def _variant(cfg: Any, variant: str) -> Any:
    """The settings a variant name stands for: ``trainer``, or ``<dtype>[-nondet][+compile]``."""
    if variant == "trainer":
        return cfg
    name, _, extra = variant.partition("+")
    dtype, _, mode = name.partition("-")
    if dtype not in ("bf16", "fp32") or mode not in ("", "nondet") or extra not in ("", "compile"):
        raise SystemExit(f"unknown variant {variant!r}: <bf16|fp32>[-nondet][+compile] or trainer")
    return replace(cfg, adapter_dtype=dtype, deterministic=mode != "nondet", compile="regional" if extra else "none")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="tiny,1b,7b")
    p.add_argument(
        "--variants",
        default="bf16,bf16+compile,trainer",
        help="ours: <bf16|fp32>[-nondet][+compile] (e.g. bf16-nondet+compile); and trainer",
    )
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--window-steps", type=int, default=20)
    p.add_argument("--peak-tflops", type=float, required=True, help="the GPU's dense BF16 datasheet figure")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import gc

    import torch

    from gpuaccept.training.config import SCALE, profile_for
    from gpuaccept.training.data import encode, load_splits, load_tokenizer
    from gpuaccept.training.flops import count_flops

    cfg = profile_for("gpu", "scale", batch_size=args.batch, seq_len=args.seq_len)
    tokenizer = load_tokenizer(None, cfg.tokenizer)
    train_rows, _, _ = load_splits(None)
    examples = [e for e in (encode(tokenizer, r, cfg.seq_len) for r in train_rows) if e is not None]
    batches = _rows(cfg, examples, int(tokenizer.pad_token_id), args.warmup + args.windows * args.window_steps)
    sampler = Sampler()
    results = []
    for shape in args.shapes.split(","):
        config = _config(shape)
        for variant in args.variants.split(","):
            run_cfg = _variant(cfg, variant)
            torch.use_deterministic_algorithms(run_cfg.deterministic)
            with torch.device("meta"):
                from transformers import AutoModelForCausalLM

                from gpuaccept.training.model import apply_lora

                flops = count_flops(apply_lora(AutoModelForCausalLM.from_config(config), run_cfg), config, cfg.seq_len)
            try:
                runner = run_trainer if variant == "trainer" else run_ours
                figures = runner(run_cfg, config, batches, args, sampler)
                figures["mfu_pct"] = round(
                    100 * figures["tokens_per_s"] * flops.per_token / (args.peak_tflops * 1e12), 2
                )
                figures["tokens_per_s"] = round(figures["tokens_per_s"])
            except Exception as exc:  # one contender's failure (out of memory) must not lose the others
                figures = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            row = {
                "shape": shape,
                "variant": variant,
                "compile": run_cfg.compile,
                "batch": args.batch,
                "seq_len": args.seq_len,
                "gpu": torch.cuda.get_device_name(0),
                "torch": torch.__version__,
                "flops_per_token": flops.per_token,
                **figures,
            }
            print(json.dumps(row), flush=True)
            results.append(row)
            torch._dynamo.reset()  # the next variant compiles its own graphs, under its own settings
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "settings": {**vars(args), "out": str(args.out)},
                "scale_profile": {k: str(v) for k, v in SCALE.items()},
                "runs": results,
            },
            indent=2,
        )
    )
    print(f"\n{'shape':6} {'variant':20} {'tokens/s':>9} {'MFU %':>6} {'GiB':>6} {'util %':>6} {'W':>5} {'warm s':>6}")
    for row in results:
        print(
            f"{row['shape']:6} {row['variant']:20} {row.get('tokens_per_s', '-')!s:>9} {row.get('mfu_pct', '-')!s:>6} "
            f"{row.get('peak_mem_gib', '-')!s:>6} {row.get('util_pct', '-')!s:>6} {row.get('power_w', '-')!s:>5} "
            f"{row.get('warmup_s', '-')!s:>6}" + (f"  {row['error']}" if "error" in row else "")
        )


if __name__ == "__main__":
    main()
