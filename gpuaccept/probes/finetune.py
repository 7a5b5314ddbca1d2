"""Probe: a LoRA fine-tune under DDP or FSDP, one rank per GPU (or a few gloo ranks per CPU node).

Why a training run is an acceptance test: GEMM and NCCL numbers can all pass while the stack a customer
actually runs (torch.distributed + transformers + peft, NCCL across the node's GPUs and the fabric, the
shared filesystem for checkpoints) still fails, hangs or crawls. This probe trains to a target loss,
measures throughput, GPU utilisation and memory, checks that DDP replicas agree and that FSDP shards,
and runs the seeds' lifecycle (original kept, checkpoints, reload, base vs fine-tuned comparison).

Offline by default: a small random-init Qwen2 from ``fixtures/training/`` and the built-in bank Q&A set.
``--model-path`` / ``--dataset`` switch to a local checkpoint and a JSONL of chat messages (same code).

    python -m gpuaccept.probes.finetune --strategy fsdp --out reports/training/manual

Each rank prints one result line; rank 0's also carries the lifecycle results and the artefact paths
(``comparison.json``, ``history.json``) under ``--out``. With ``--strategy ddp,fsdp`` both run in one
process after one start-up, each under ``--out/<strategy>``, and the line holds ``strategies.<name>``.
The probe measures; the test judges.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from gpuaccept.probes._protocol import emit, gpu_identity, node_name, rank_info  # noqa: E402

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--strategy",
        type=_strategies,
        required=True,
        help="ddp, fsdp, or both as 'ddp,fsdp' (one start-up, then each in turn; the result holds both)",
    )
    p.add_argument("--out", type=Path, required=True, help="run folder (original/, checkpoints/, final/, JSON)")
    p.add_argument("--model-path", type=Path, help="local Hugging Face checkpoint instead of the built-in model")
    p.add_argument("--dataset", type=Path, help="JSONL of chat messages (or a folder with train/test.jsonl)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--model-config", type=Path, help="config.json for the random-init model (default: profile's)")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--lora-r", type=int)
    p.add_argument("--lora-alpha", type=int)
    p.add_argument("--lora-targets", type=lambda s: tuple(s.split(",")), help="comma-separated module names")
    p.add_argument("--modules-to-save", type=lambda s: tuple(x for x in s.split(",") if x))
    p.add_argument("--grad-ckpt", action="store_true", default=None, help="gradient checkpointing")
    p.add_argument("--ckpt-every", type=int)
    p.add_argument("--samples", type=int, help="sample generations in the comparison report")
    p.add_argument("--gen-tokens", type=int)
    p.add_argument("--threads", type=int, help="torch CPU threads per rank (GPU default: min(4, cores / local ranks))")
    p.add_argument("--seed", type=int)
    return p.parse_args(argv)


def _strategies(text: str) -> str:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("ddp", "fsdp")]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: strategies are ddp and fsdp, comma-separated")
    return ",".join(names)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "model_path dataset model_config steps batch_size seq_len lr lora_r lora_alpha lora_targets "
        "modules_to_save grad_ckpt ckpt_every samples gen_tokens threads seed"
    ).split()
    return {k: getattr(args, k) for k in keys}


#: Error texts of a collective whose peer went away (gloo, NCCL, the TCP store): a consequence, not a cause.
_PEER_LOST = ("connection reset", "connection closed", "broken pipe", "remote process exited", "socket", "timed out")


def main(argv: list[str] | None = None) -> None:
    """Run the fine-tune; a rank whose peer died says so in one line and leaves the first failure in view."""
    args = parse_args(argv)
    info = rank_info()
    try:
        _run(args, info)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        where = f"gpuaccept finetune: rank {info.rank} on {node_name()}"
        if info.world_size > 1 and any(key in text.lower() for key in _PEER_LOST):
            # Waiting lets the launcher see the rank that failed first exit first; the traceback of a
            # collective that lost its peer only buries that rank's own message.
            print(f"{where}: a collective lost its peer (another rank died?): {text}", file=sys.stderr, flush=True)
            time.sleep(2)
            sys.exit(1)
        print(f"{where} failed: {text}", file=sys.stderr, flush=True)
        raise


def _quiet() -> None:
    """No progress bars or deprecation chatter in the step's stderr: the report shows its tail."""
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*[Cc]ould not find a config file.*")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _threads(requested: int, use_cuda: bool, local_world: int) -> int:
    """torch CPU threads for this rank: as asked, else a few per GPU rank.

    Under srun a rank starts with torch's default (every core of the node), so N GPU ranks run N x cores
    OpenMP threads that fight over the host work of each step. Measured on the lent 2xH200 (32 cores,
    2026-11-22, ``benchmarks/train_sweep.sh``): DDP on 2 GPUs was 86% busy at 218k tokens/s per GPU with
    the default and 98.7% at 292k with 4 threads per rank, the same as one GPU alone (98.1%, 291k).
    """
    if requested:
        return requested
    if not use_cuda:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores // max(1, local_world)))


def _run(args: argparse.Namespace, info: Any) -> None:
    """Start-up once (imports, rendezvous, data), then each ``--strategy`` in turn in the same process group.

    Why several strategies in one launch: start-up (imports of torch/transformers/peft, NCCL rendezvous,
    tokenising) took 12-15 s of a ~27 s run on the H200s; paying it once for DDP and FSDP of the same
    shape halves that share of the suite's wall time. Each strategy still builds its model from the
    same seed, trains, checkpoints and runs the lifecycle on its own, and frees the GPU before the next.
    """
    node = node_name()
    _quiet()
    import torch
    import torch.distributed as dist

    from gpuaccept.training.config import profile_for
    from gpuaccept.training.data import encode, load_splits, load_tokenizer
    from gpuaccept.training.loop import Runtime

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = (
        torch.device("cuda", info.local_rank % max(1, torch.cuda.device_count())) if use_cuda else torch.device("cpu")
    )
    strategies = list(dict.fromkeys(args.strategy.split(",")))
    several = len(strategies) > 1
    overrides = _overrides(args)
    base_cfg = profile_for("gpu" if use_cuda else "cpu", **{**overrides, "strategy": strategies[0]})
    threads = _threads(base_cfg.threads, use_cuda, info.local_world_size)
    if threads:
        torch.set_num_threads(threads)
    if use_cuda:
        torch.cuda.set_device(device)
    rt = Runtime(info.rank, info.world_size, info.local_rank, device, node)
    phases = {"imports": time.monotonic() - _STARTED}
    dist.init_process_group(
        "nccl" if use_cuda else "gloo",
        init_method=f"tcp://{info.master_addr}:{info.master_port}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(minutes=5),
        **({"device_id": device} if use_cuda else {}),
    )
    phases["rendezvous"] = time.monotonic() - _STARTED - sum(phases.values())
    tokenizer = load_tokenizer(base_cfg.model_path, base_cfg.tokenizer)
    train_rows, test_rows, data_desc = load_splits(base_cfg.dataset)
    train_ex = [e for e in (encode(tokenizer, r, base_cfg.seq_len) for r in train_rows) if e is not None]
    test_ex = [e for e in (encode(tokenizer, r, base_cfg.seq_len) for r in test_rows) if e is not None]
    phases["data"] = time.monotonic() - _STARTED - sum(phases.values())
    shared = {"startup_s": round(time.monotonic() - _STARTED, 3), "startup_phases_s": phases, "torch_threads": threads}
    gpu = gpu_identity(0) if use_cuda else None
    runs: dict[str, dict[str, Any]] = {}
    for strategy in strategies:
        out = args.out / strategy if several else args.out
        cfg = profile_for("gpu" if use_cuda else "cpu", **{**overrides, "strategy": strategy, "out": out})
        started = time.monotonic()
        data = _train_one(cfg, rt, tokenizer, train_ex, test_ex, data_desc, use_cuda, gpu)
        data.update(shared)
        # What this strategy would take launched alone: the shared start-up plus its own run.
        data["run_s"] = round(time.monotonic() - started, 3)
        data["wall_s"] = round(shared["startup_s"] + data["run_s"], 3)
        runs[strategy] = data
        _release(torch, use_cuda)
    payload = {"strategies": runs, **shared} if several else runs[strategies[0]]
    payload["process_wall_s"] = round(time.monotonic() - _STARTED, 3)
    emit(payload, gpu=gpu, probe="finetune")
    sys.stdout.flush()
    dist.destroy_process_group()


def _release(torch: Any, use_cuda: bool) -> None:
    """Free the finished strategy's model and optimizer before the next one is measured."""
    import gc

    gc.collect()
    if use_cuda:
        torch.cuda.empty_cache()


def _train_one(
    cfg: Any,
    rt: Any,
    tokenizer: Any,
    train_ex: list[Any],
    test_ex: list[Any],
    data_desc: str,
    use_cuda: bool,
    gpu: dict[str, Any] | None,
) -> dict[str, Any]:
    """One strategy: build the seeded model, save the original, train, measure, run the lifecycle."""
    import torch

    from gpuaccept.training.lifecycle import file_fingerprint
    from gpuaccept.training.loop import train
    from gpuaccept.training.model import apply_lora, build_base, param_bytes, trainable_checksum, wrap
    from gpuaccept.training.monitor import UtilSampler, peak_memory_gib

    device = rt.device
    pad_id = int(tokenizer.pad_token_id)
    base = build_base(cfg, cfg.seed)
    base_path = cfg.model_path or cfg.out / "original"
    before: dict[str, str] = {}
    if rt.rank == 0:
        for sub in ("original", "checkpoints", "final"):
            shutil.rmtree(cfg.out / sub, ignore_errors=True)
        if cfg.model_path is None:
            base.save_pretrained(str(base_path))
            tokenizer.save_pretrained(str(base_path))
        before = file_fingerprint(base_path)
    peft_model = apply_lora(base, cfg)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    model = wrap(peft_model, cfg.strategy, device, rt.world)
    local_bytes, total_bytes = param_bytes(model)
    sampler = UtilSampler(gpu.get("uuid") if gpu else None) if use_cuda else None
    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    result = train(cfg, rt, model, peft_model, train_ex, test_ex, pad_id, sampler)
    memory = peak_memory_gib(device)
    util = sampler.summary() if sampler else {"util_pct": None, "util_samples": 0, "util_error": "CPU run"}
    losses = result.losses
    data: dict[str, Any] = {
        "strategy": cfg.strategy,
        "device": device.type,
        "world_size": rt.world,
        "steps_planned": cfg.steps,
        "steps_done": result.steps_done,
        "losses": [round(v, 5) for v in losses],
        "evals": result.evals,
        "train_loss_final": statistics.fmean(losses[-10:]) if losses else None,
        "eval_loss_final": result.evals[-1][1] if result.evals else None,
        "nonfinite_steps": result.nonfinite_steps,
        "tokens_per_s": result.timed_tokens / result.timed_s if result.timed_s else None,
        "timed_tokens": result.timed_tokens,
        "timed_s": round(result.timed_s, 3),
        "train_s": round(result.train_s, 3),
        "param_bytes_local": local_bytes,
        "param_bytes_total": total_bytes,
        "trainable_params": trainable,
        "total_params": total,
        "checksum": trainable_checksum(model),
        "torch": torch.__version__,
        **memory,
        **util,
    }
    if rt.rank == 0:
        data.update(_lifecycle(cfg, rt, result, tokenizer, test_ex, pad_id, base_path, before, data_desc, data))
    return data


def _lifecycle(
    cfg: Any,
    rt: Any,
    result: Any,
    tokenizer: Any,
    test_ex: list[Any],
    pad_id: int,
    base_path: Path,
    before: dict[str, str],
    data_desc: str,
    data: dict[str, Any],
) -> dict[str, Any]:
    """Rank 0 after training: reload from disk, compare base vs fine-tuned, write the JSON artefacts."""
    from gpuaccept.training.lifecycle import compare, file_fingerprint, write_json

    out: dict[str, Any] = {"checkpoints": result.checkpoints, "dataset": data_desc, "config": cfg.to_json()}
    history = {"losses": result.losses, "evals": result.evals, "strategy": cfg.strategy, "world_size": rt.world}
    out["history_json"] = str(write_json(cfg.out / "history.json", history))
    final = cfg.out / "final"
    if result.nonfinite_steps or not final.is_dir():
        out["lifecycle_error"] = "training stopped early: no final adapter to reload"
        return out
    report = compare(
        base_path,
        final,
        tokenizer,
        test_ex,
        rt,
        batch=cfg.batch_size,
        pad=pad_id,
        new_tokens=cfg.gen_tokens,
        samples=cfg.samples,
    )
    after = file_fingerprint(base_path)
    report["original"] = {"path": str(base_path), "files": len(before), "unchanged": before == after}
    report["training"] = {k: data[k] for k in ("strategy", "world_size", "steps_done", "train_loss_final")}
    report["training"]["eval_loss_final"] = data["eval_loss_final"]
    out["comparison_json"] = str(write_json(cfg.out / "comparison.json", report))
    tuned, base = report["finetuned_model"], report["base_model"]
    out.update(
        original_kept=bool(before) and before == after,
        reload_eval_loss=tuned["eval_loss"],
        reload_eval_delta=abs(tuned["eval_loss"] - data["eval_loss_final"]),
        base_perplexity=base["perplexity"],
        finetuned_perplexity=tuned["perplexity"],
        perplexity_reduction_pct=report["comparison"]["perplexity_reduction_pct"],
        base_gen_tokens_per_s=base["gen_tokens_per_s"],
        finetuned_gen_tokens_per_s=tuned["gen_tokens_per_s"],
        merged_gen_tokens_per_s=tuned["merged"]["gen_tokens_per_s"],
        base_ttft_ms=base["ttft_ms"],
        finetuned_ttft_ms=tuned["ttft_ms"],
        compare_s=report["seconds"],
    )
    return out


if __name__ == "__main__":
    main()
