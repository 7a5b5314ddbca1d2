"""One strategy's run inside the fine-tune probe: train it, measure it, and its lifecycle afterwards.

Split out of ``gpuaccept.probes.finetune`` (which keeps the launch: arguments, start-up, rendezvous,
the order of strategies and the result line) so each module stays readable. Imported by the probe
after its start-up clock runs, so torch, transformers and peft still count as the probe's start-up.
"""

from __future__ import annotations

import shutil
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

from gpuaccept.training.model import DTYPES

__all__ = ["lifecycle", "release", "serve_own", "train_one"]

#: the 7B-class runs, whose serving is judged by the GPU's roofline (the small model's decode times launches)
SERVED_PROFILES = ("scale", "pretrained")


#: This rank's solo adapter and its config, kept for ``serve_own`` at the end of the launch.
_SOLO_ADAPTER: dict[str, Any] = {}

#: The base model written by this launch (path -> file fingerprint before any training), rank 0 only.
_ORIGINALS: dict[str, dict[str, str]] = {}


def _original(cfg: Any, base: Any, tokenizer: Any, root: Path, main_rank: bool) -> tuple[Path | None, dict[str, str]]:
    """Where the original model is kept and its fingerprint before training (rank 0 of a saving run).

    A checkpoint (``--model-path``) is the original as it is: its files are fingerprinted. The small
    built-in model is written once per launch (every strategy builds the same seeded base, so DDP and FSDP
    share it). The 7B-class built-in base is never written (13-15 GB, twice the disk and ~15 s a run):
    it is rebuilt from its seed, so its original is the weights' fingerprint, which the lifecycle compares
    with the rebuilt base's (``weights_fingerprint``).
    """
    from gpuaccept.training.lifecycle import file_fingerprint, weights_fingerprint

    if not main_rank:
        return None, {}
    if cfg.model_path is None and cfg.profile == "scale":
        return None, weights_fingerprint(base)
    base_path = cfg.model_path or root / "original"
    if str(base_path) not in _ORIGINALS:
        if cfg.model_path is None:
            shutil.rmtree(base_path, ignore_errors=True)
            base.save_pretrained(str(base_path))
            tokenizer.save_pretrained(str(base_path))
        _ORIGINALS[str(base_path)] = file_fingerprint(base_path)
    return base_path, _ORIGINALS[str(base_path)]


def release(torch: Any, use_cuda: bool) -> None:
    """Free the finished strategy's model and optimizer before the next one is measured."""
    import gc

    gc.collect()
    if use_cuda:
        torch.cuda.empty_cache()


def _keep_for_serving(cfg: Any, peft_model: Any) -> None:
    """Keep this GPU's solo adapter (its trained weights, on the host: ~0.3 GB for the 7B's r64) for ``serve_own`` at
    the end of the launch. Serving right after the solo run left the caching allocator fragmented for the DDP run that
    follows (2 x H100 80GB HBM3, 2026-11-26: DDP's 72.7 GiB peak then ran out of memory with 5 GiB reserved and
    unused)."""
    trained = {n: p.detach().to("cpu", copy=True) for n, p in peft_model.named_parameters() if p.requires_grad}
    _SOLO_ADAPTER.clear()
    _SOLO_ADAPTER.update(cfg=cfg, weights=trained)


def serve_own(tokenizer: Any, test_ex: list[Any], device: Any) -> dict[str, Any] | None:
    """Every GPU at once: each serves the adapter it trained alone (kept by ``_keep_for_serving``), merged as it
    would be served, once the launch's training is over and its memory released.

    The solo fine-tune is bit-for-bit the same on every GPU of one SKU and software stack, so every GPU serves
    the same weights: its decode speed is judged by its own HBM (MBU), and its greedy tokens and logits
    checksum must agree with the other GPUs'. Every rank runs it at the same time, so the node's GPUs decode
    together under the power and cooling they share. Nothing is written to disk. A launch of one rank serves
    once, in its lifecycle (the same adapter, reloaded and merged): ``lifecycle``. None when nothing was kept.
    """
    if not _SOLO_ADAPTER:
        return None
    import torch

    from gpuaccept.training.lifecycle import serving
    from gpuaccept.training.model import apply_lora, build_base

    cfg, weights = _SOLO_ADAPTER.pop("cfg"), _SOLO_ADAPTER.pop("weights")
    release(torch, True)  # the lifecycles' models, before a 7B base is built again
    try:
        model = apply_lora(build_base(cfg, cfg.seed, device), cfg)
        missing = set(weights) - {n for n, _ in model.named_parameters()}
        if missing:
            raise KeyError(f"the rebuilt model lacks {len(missing)} adapter weight(s), e.g. {sorted(missing)[0]}")
        model.load_state_dict(weights, strict=False)
        merged = model.merge_and_unload()  # type: ignore[operator]
        figures = serving(merged, tokenizer, test_ex, device)
        return {"outcome": "served", "adapter": "this GPU's own solo fine-tune, merged", **figures}
    except Exception as exc:  # the fine-tune's own figures still go out, judged; the serving check names this
        traceback.print_exc()
        return {"outcome": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def train_one(
    cfg: Any,
    rt: Any,
    tokenizer: Any,
    train_ex: list[Any],
    test_ex: list[Any],
    data_desc: str,
    use_cuda: bool,
    gpu: dict[str, Any] | None,
    rank: int,
    root: Path,
    perturb_after: int | None = None,
    progress: Any = None,
    resume_to: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """One strategy: build the seeded model, save the original, train, measure; the lifecycle to run, and the
    resume to run (``gpuaccept.training.resume``) when this run saved a resumable checkpoint.

    ``solo`` trains this rank's GPU alone (a world of one: its own data order, no collective, nothing
    saved), so every GPU of the node is fine-tuned and judged on its own at the same time. In a launch
    of one rank (a one-GPU node, where DDP and FSDP do not apply) the solo run is the only run, so it
    saves its checkpoints and gets the lifecycle. Returns the rank's figures and, on rank 0 of a run that
    saves, the lifecycle job (run later, ``_lifecycles``). ``losses`` are the exact float32 step losses
    (no rounding): the fleet agreement compares them bit for bit. ``perturb_after``: the test hook.
    ``progress``: this rank's ``gpuaccept.training.progress_reporter.Reporter`` (set-up, then every step).
    ``resume_to``: where a solo run of world one (the launch's rank 0 alone on its GPU) saves its resumable
    checkpoint half-way; the resume job then holds what it needs to go on from there (this run's exact config,
    seed and losses), run once training is over (``_finetune_ranks.lifecycles``).
    """
    import dataclasses

    import torch

    from gpuaccept.training.checkpoint import RESUME_STEPS
    from gpuaccept.training.config import pretrained_rows
    from gpuaccept.training.flops import count_flops
    from gpuaccept.training.loop import train
    from gpuaccept.training.model import (
        apply_lora,
        build_base,
        compile_layers,
        param_bytes,
        trainable_checksum,
        wrap,
    )
    from gpuaccept.training.monitor import UtilSampler, peak_memory_gib

    solo = cfg.strategy == "solo"
    saves = not solo or rt.world == 1  # a launch of one rank: its solo run is the run with the lifecycle
    setup_started = time.monotonic()
    if progress is not None:
        progress.phase(f"{cfg.strategy} set-up")
    if solo:
        rt = dataclasses.replace(rt, rank=0, world=1)
        if not saves:
            cfg = dataclasses.replace(cfg, ckpt_every=cfg.steps)  # one eval at the end; nothing written
    device = rt.device
    pad_id = int(tokenizer.pad_token_id)
    base = build_base(cfg, cfg.seed, device)
    main_rank = rt.rank == 0 and saves
    if main_rank:
        for sub in ("checkpoints", "final"):
            shutil.rmtree(cfg.out / sub, ignore_errors=True)
    base_path, before = _original(cfg, base, tokenizer, root, main_rank)
    peft_model = apply_lora(base, cfg)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    config: Any = base.config
    flops = count_flops(peft_model, config, cfg.seq_len)
    if cfg.auto_rows and use_cuda:  # a checkpoint's rows per step (``config.pretrained_rows``)
        total_gib = torch.cuda.get_device_properties(device).total_memory / 2**30
        rows = pretrained_rows(
            flops.frozen_matmul_params,
            param_bytes(peft_model)[1],
            flops.layers,
            int(config.intermediate_size),
            cfg.seq_len,
            total_gib,
            cfg.batch_size,
        )
        cfg = dataclasses.replace(cfg, batch_size=rows)
    model = wrap(peft_model, cfg.strategy, device, rt.world)
    # Regional compilation where it was measured: one GPU's own run (solo). DDP and FSDP2 stay eager until
    # a multi-GPU machine has run them compiled (FSDP2's hooks inside a compiled layer are another path).
    compiled = compile_layers(model, cfg.deterministic) if cfg.compile == "regional" and solo and use_cuda else 0
    local_bytes, total_bytes = param_bytes(model)
    sampler = UtilSampler(gpu.get("uuid") if gpu else None) if use_cuda else None
    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    setup_s = time.monotonic() - setup_started
    result = train(
        cfg,
        rt,
        model,
        peft_model,
        train_ex,
        test_ex,
        pad_id,
        sampler,
        save=saves,
        fault_rank=rank,
        perturb_after=perturb_after,
        progress=progress,
        resume_to=resume_to if solo and rank == 0 else None,
    )
    memory = peak_memory_gib(device)
    util = (
        sampler.summary()
        if sampler
        else {"power_w": None, "util_pct": None, "util_min_pct": None, "util_samples": 0, "util_error": "CPU run"}
    )
    losses = result.losses
    tokens_per_s = result.timed_tokens / result.timed_s if result.timed_s else None
    data: dict[str, Any] = {
        "outcome": "run",
        "strategy": cfg.strategy,
        "profile": cfg.profile,
        "device": device.type,
        "world_size": rt.world,
        "steps_planned": cfg.steps,
        "steps_done": result.steps_done,
        "losses": list(losses),
        "evals": result.evals,
        "train_loss_final": statistics.fmean(losses[-10:]) if losses else None,
        "eval_loss_final": result.evals[-1][1] if result.evals else None,
        "nonfinite_steps": result.nonfinite_steps,
        "tokens_per_s": tokens_per_s,
        "tokens_per_step": cfg.batch_size * cfg.seq_len if cfg.pack else None,
        "model_flops": flops.to_json(),
        "model_tflops_per_s": round(tokens_per_s * flops.per_token / 1e12, 2) if tokens_per_s else None,
        "timed_tokens": result.timed_tokens,
        "timed_s": round(result.timed_s, 3),
        "train_s": round(result.train_s, 3),
        "setup_s": round(setup_s, 3),
        "warmup_s": round(result.warmup_s, 3),
        "pause_s": round(result.pause_s, 3),
        "param_bytes_local": local_bytes,
        "param_bytes_total": total_bytes,
        "trainable_params": trainable,
        "total_params": total,
        "checksum": trainable_checksum(model),
        "precision": {"base": cfg.base_dtype, "adapters": cfg.adapter_dtype, "deterministic": cfg.deterministic},
        "grad_ckpt": cfg.grad_ckpt,
        "compiled_layers": compiled,
        "torch": torch.__version__,
        "test_hook": result.perturbed,
        **memory,
        **util,
        # what runs after training fills these in where this rank does it (``probes.finetune``)
        "checkpoint": None if result.resumable is None else {"saved": result.resumable, "resumed": None},
        "lifecycle": None,
        "serving": None,
        "served_weights": None,
    }
    if solo and not saves and use_cuda and cfg.profile in SERVED_PROFILES:
        _keep_for_serving(cfg, peft_model)
    resume_job = None
    if result.resumable is not None and result.resumable["outcome"] == "saved":
        step = result.resumable["step"]
        resume_job = {
            "cfg": cfg,
            "folder": Path(result.resumable["path"]),
            "step": step,
            "expected": list(losses[step : step + RESUME_STEPS]),
            "seed": cfg.seed,
            "pad_id": pad_id,
        }
    if not main_rank:
        return data, None, resume_job
    job = {
        "cfg": cfg,
        "result": result,
        "pad_id": pad_id,
        "base_path": base_path,
        "before": before,
        "seed": cfg.seed,
        "data_desc": data_desc,
        "data": {k: data[k] for k in ("strategy", "world_size", "steps_done", "train_loss_final", "eval_loss_final")},
    }
    return data, job, resume_job


def lifecycle(
    *,
    cfg: Any,
    rt: Any,
    result: Any,
    tokenizer: Any,
    test_ex: list[Any],
    pad_id: int,
    base_path: Path | None,
    before: dict[str, str],
    seed: int,
    data_desc: str,
    data: dict[str, Any],
) -> dict[str, Any]:
    """After training: reload from disk, compare base vs fine-tuned, write the JSON artefacts.

    Runs on whichever rank of rank 0's node ``_lifecycles`` gives it, on that rank's own GPU, from the
    files rank 0 wrote; ``rt`` is that rank's runtime (the comparison itself runs as a world of one).
    """
    from gpuaccept.training.lifecycle import compare, file_fingerprint, weights_fingerprint, write_json
    from gpuaccept.training.model import build_base, load_base

    started = time.monotonic()
    out: dict[str, Any] = {
        "outcome": "stopped",
        "checkpoints": result.checkpoints,
        "dataset": data_desc,
        "config": cfg.to_json(),
    }
    history = {"losses": result.losses, "evals": result.evals, "strategy": cfg.strategy, "world_size": rt.world}
    out["history_json"] = str(write_json(cfg.out / "history.json", history))
    final = cfg.out / "final"
    if result.nonfinite_steps or not final.is_dir():
        out["lifecycle_error"] = "training stopped early: no final adapter to reload"
        out["lifecycle_s"] = round(time.monotonic() - started, 3)
        return out
    if base_path is None:  # the seeded 7B-class base, rebuilt rather than written (``_original``)
        model = build_base(cfg, seed, rt.device)
        after = weights_fingerprint(model)
    else:
        model = load_base(base_path, DTYPES[cfg.base_dtype], rt.device)
    try:
        report = compare(
            model,
            final,
            tokenizer,
            test_ex,
            rt,
            batch=cfg.eval_batch_size or cfg.batch_size,
            pad=pad_id,
            new_tokens=cfg.gen_tokens,
        )
    except Exception as exc:  # the launch's training figures still go out; the lifecycle's checks name this
        traceback.print_exc()
        out["lifecycle_error"] = f"the base vs fine-tuned comparison failed: {type(exc).__name__}: {str(exc)[:500]}"
        out["lifecycle_s"] = round(time.monotonic() - started, 3)
        return out
    if base_path is not None:
        after = file_fingerprint(base_path)
    where = str(base_path) if base_path else f"rebuilt from seed {seed}"
    report["original"] = {"path": where, "files": len(before), "unchanged": before == after}
    report["training"] = {k: data[k] for k in ("strategy", "world_size", "steps_done", "train_loss_final")}
    report["training"]["eval_loss_final"] = data["eval_loss_final"]
    out["comparison_json"] = str(write_json(cfg.out / "comparison.json", report))
    del model
    tuned, base = report["finetuned_model"], report["base_model"]
    if cfg.strategy == "solo" and rt.device.type == "cuda" and cfg.profile in SERVED_PROFILES:
        # a launch of one rank: its GPU's own serving is the lifecycle's merged model (``serve_own``)
        own = {"outcome": "served", "adapter": "this GPU's own fine-tune, reloaded and merged", **tuned["serving"]}
        out["serving"] = own  # lifted onto the run by the probe: a one-rank launch's own serving
    out.update(
        outcome="compared",
        original_kept=bool(before) and before == after,
        reload_eval_loss=tuned["eval_loss"],
        reload_eval_delta=abs(tuned["eval_loss"] - data["eval_loss_final"]),
        base_perplexity=base["perplexity"],
        finetuned_perplexity=tuned["perplexity"],
        perplexity_reduction_pct=report["comparison"]["perplexity_reduction_pct"],
        serving_base=base["serving"],
        serving_merged=tuned["serving"],
        unmerged_tokens_per_s=tuned["unmerged_tokens_per_s"],
        merged_speed_ratio=report["comparison"]["merged_speed_ratio"],
        f1_gain_pts=report["comparison"]["f1_gain_pts"],
        compare_s=report["seconds"],
        lifecycle_rank=rt.rank,
        lifecycle_s=round(time.monotonic() - started, 3),
    )
    return out
