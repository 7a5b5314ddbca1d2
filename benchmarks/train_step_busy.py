"""How busy does one LoRA training step keep the GPU, and how long does the host take to issue it?

    python benchmarks/train_step_busy.py                       # 1.5b shape: det 4 rows, default 4 rows, det 8 rows
    python benchmarks/train_step_busy.py --shape 7b --runs det:4

The checkpoint shapes of ``benchmarks/make_checkpoint.py`` (random init, built on the GPU in bf16), the
suite's own step (``gpuaccept.training.loop.optimizer_step``) on the built-in data packed to 2,048-token
rows. Per run: tokens/s and ms a step over ``--steps`` timed steps, NVML utilisation every 0.1 s, and the
host's time to issue one step from an idle GPU (``cpu_step_ms``: when it is as long as the step, the host
never runs ahead and the GPU waits on it). What it found: docs/measurements.md
'1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def _busy_sampler() -> tuple[list[int], threading.Event]:
    """NVML utilisation of GPU 0 every 0.1 s while the returned event is set."""
    import pynvml  # type: ignore[import-untyped]

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    readings: list[int] = []
    on = threading.Event()

    def poll() -> None:
        while True:
            time.sleep(0.1)
            if on.is_set():
                readings.append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    threading.Thread(target=poll, daemon=True).start()
    return readings, on


def run(
    shape: str, deterministic: bool, rows: int, steps: int, busy: tuple[list[int], threading.Event]
) -> dict[str, Any]:
    import torch
    from make_checkpoint import SHAPES
    from transformers import AutoConfig, AutoModelForCausalLM

    from gpuaccept.training.config import FIXTURES, profile_for
    from gpuaccept.training.data import encode, load_splits, load_tokenizer
    from gpuaccept.training.loop import optimizer_step, schedule
    from gpuaccept.training.loss import use_chunked_loss
    from gpuaccept.training.model import apply_lora
    from gpuaccept.training.packing import packed_batches

    torch.use_deterministic_algorithms(deterministic)
    device = torch.device("cuda", 0)
    config = AutoConfig.from_pretrained(FIXTURES / "qwen2-7b.json")
    for key, value in {**SHAPES[shape], "vocab_size": 1024}.items():
        setattr(config, key, value)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with device:
        base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    use_chunked_loss(base)
    cfg = profile_for("gpu", "scale", batch_size=rows)
    model = apply_lora(base, cfg)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg))
    tokenizer = load_tokenizer(None, FIXTURES / "tokenizer.json")
    examples = [e for e in (encode(tokenizer, r, cfg.seq_len) for r in load_splits(None)[0]) if e is not None]
    stream = packed_batches(examples, rows, cfg.seq_len, 0, 1, cfg.seed, int(tokenizer.pad_token_id))
    batches = [next(stream) for _ in range(steps + 5)]

    def step(batch: dict[str, Any]) -> None:
        optimizer_step(model, batch, params, opt, sched, device)
        opt.zero_grad(set_to_none=True)

    for batch, _ in batches[:4]:
        step(batch)
    torch.cuda.synchronize()
    readings, on = busy
    readings.clear()
    on.set()
    started = time.perf_counter()
    tokens = 0
    for batch, count in batches[4:-1]:
        step(batch)
        tokens += count
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    on.clear()
    issued = time.perf_counter()
    step(batches[-1][0])
    cpu_step = time.perf_counter() - issued
    torch.cuda.synchronize()
    return {
        "shape": shape,
        "deterministic": deterministic,
        "rows": rows,
        "tokens_per_s": round(tokens / elapsed),
        "step_ms": round(elapsed / steps * 1000, 1),
        "util_pct": round(statistics.fmean(readings), 1) if readings else None,
        "cpu_step_ms": round(cpu_step * 1000, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1.5b", help="a benchmarks/make_checkpoint.py shape")
    p.add_argument("--runs", default="det:4,default:4,det:8", help="mode:rows, comma-separated (det or default)")
    p.add_argument("--steps", type=int, default=14)
    args = p.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.set_num_threads(4)
    busy = _busy_sampler()
    for spec in args.runs.split(","):
        mode, rows = spec.split(":")
        print(json.dumps(run(args.shape, mode == "det", int(rows), args.steps, busy)), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
