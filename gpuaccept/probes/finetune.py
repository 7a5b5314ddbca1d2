"""Probe: LoRA fine-tunes on every GPU alone, then DDP and FSDP, one rank per GPU (or gloo ranks per CPU node).

Why a training run is an acceptance test: GEMM and NCCL numbers can all pass while the stack a customer
actually runs (torch.distributed + transformers + peft, NCCL across the node's GPUs and the fabric, the
shared filesystem for checkpoints) still fails, hangs or crawls. This probe trains to a target loss,
measures throughput, GPU utilisation and memory, checks that DDP replicas agree and that FSDP shards,
and runs the lifecycle (original kept, checkpoints, reload, base vs fine-tuned comparison).

Offline by default: a small random-init Qwen2 from ``fixtures/training/`` and the built-in bank Q&A set.
``--model-path`` / ``--dataset`` switch to a local checkpoint and a JSONL of chat messages (same code).

    python -m gpuaccept.probes.finetune --strategy fsdp --out reports/training/manual

Strategies: ``solo`` trains every rank's GPU alone and at the same time (independent single-GPU runs,
no collective, nothing saved: each GPU judged on its own), ``ddp`` and ``fsdp`` train one model across
every rank. ``--strategy solo,ddp,fsdp`` runs them in turn after one start-up, each under
``--out/<strategy>``, and the result line holds ``strategies.<name>`` plus the launch's ``phases``
(start-up, set-up, warm-up steps, timed steps, checkpoints, lifecycle, teardown). Each rank prints one
result line; rank 0's also carries every strategy's lifecycle results and the artefact paths
(``comparison.json``, ``history.json``). The probe measures; the test judges. On a world of one (a
one-GPU node) ``--strategy solo`` alone is the whole launch, and that run saves and gets the lifecycle.

Each run's ``losses`` are the exact float32 step losses: every GPU of one SKU and software stack must
train the same curve bit for bit (``gpuaccept.judging.trajectory``).

Test hook (off by default; for the suite's own proof that a slightly wrong GPU is caught, never for an
acceptance run): ``GPUACCEPT_TEST_PERTURB_TRAINING="gpu=1,step=10"`` (selectors ``node``, ``gpu`` = NVML
index, ``rank`` = rank in this launch; ``step`` default 10) adds one bf16 ulp to one weight of the
selected rank after that optimizer step (``gpuaccept.training.perturb``). Only this probe reads it; the
rank prints a warning and its result carries ``test_hook`` saying what was changed.
"""

from __future__ import annotations

import time

from gpuaccept.probes._timing import Phases, quick_exit

PHASES = Phases()  # from the process start: the interpreter and every import below count as start-up

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from gpuaccept.probes._finetune_ranks import below_floor, lifecycles  # noqa: E402
from gpuaccept.probes._protocol import emit, gpu_identity, node_name, rank_info  # noqa: E402
from gpuaccept.training.budget import read_plan  # noqa: E402

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--strategy",
        type=_strategies,
        required=True,
        help="solo, ddp, fsdp, or several as 'solo,ddp,fsdp' (one start-up, then each in turn)",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="run folder (original/, checkpoints/, final/, JSON); '{node}' in it becomes this node's name",
    )
    p.add_argument(
        "--profile",
        choices=("small", "scale"),
        default="small",
        help="built-in model: small (seconds) or scale (Qwen2-7B's shape at the GPU's speed; GPUs only)",
    )
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
    p.add_argument("--adapter-dtype", choices=("bf16", "fp32"), help="dtype of the trainable adapters")
    p.add_argument(
        "--compile",
        choices=("none", "regional"),
        help="torch.compile each decoder layer of a GPU's own run (default: the profile's)",
    )
    p.add_argument("--ckpt-every", type=int)
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        help="where rank 0's own run saves its resumable checkpoint half-way, restored and resumed once training "
        "is over ('{node}' becomes this node's name; default: resume/ in the run folder)",
    )
    p.add_argument(
        "--models-dir",
        type=Path,
        help="where the launch's first adapter, merged, is saved as safetensors and cold-started from once training "
        "is over (the site's models filesystem; '{node}' becomes this node's name; default: not saved)",
    )
    p.add_argument(
        "--scratch-dir",
        type=Path,
        help="with --models-dir: a node-local scratch folder the merged weights are copied to and cold-started from "
        "again ('{node}' becomes this node's name; default: none)",
    )
    p.add_argument("--gen-tokens", type=int)
    p.add_argument("--threads", type=int, help="torch CPU threads per rank (GPU default: min(4, cores / local ranks))")
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--plan",
        type=read_plan,
        help="the launch's plan as JSON (gpuaccept.training.budget.plan_arg), which its step's limit is derived from: "
        "the tokens/s a GPU's own run must reach (its solo floor): below it on any rank, the node-wide strategies "
        "are not run (they would train at that GPU's pace) and the result says why",
    )
    return p.parse_args(argv)


def _strategies(text: str) -> str:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("solo", "ddp", "fsdp")]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: strategies are solo, ddp and fsdp, comma-separated")
    return ",".join(names)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "model_path dataset model_config steps batch_size seq_len lr lora_r lora_alpha lora_targets "
        "modules_to_save grad_ckpt adapter_dtype compile ckpt_every gen_tokens threads seed"
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
    OpenMP threads that fight over the host work of each step. Measured on 2 x H200 SXM 141GB (32 cores,
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
    """Start-up once (imports, rendezvous, data), then each ``--strategy`` in turn in the same process.

    Why one launch for every strategy: start-up (imports of torch/transformers/peft, NCCL rendezvous,
    tokenising) took 12-15 s of a ~27 s run on the H200s and ``import transformers, peft`` alone 16.8 s on
    a fresh H100 host; paying it once for the per-GPU solo runs, DDP and FSDP is most of what makes the
    training section fast. Each strategy still builds its model from the same seed, trains and checkpoints
    on its own, and frees the GPU before the next. The lifecycle (reload from disk, base vs fine-tuned)
    of every strategy runs at the end, side by side on different GPUs of rank 0's node
    (``_finetune_ranks.lifecycles``).
    """
    node = node_name()
    from gpuaccept.training.progress_reporter import Reporter

    progress = Reporter(node, info.rank)
    progress.phase("start-up")
    # one set of arguments for every node of a fan-out step, each node's files in its own folder
    args.out = Path(str(args.out).replace("{node}", node))
    _quiet()
    if args.profile == "scale" or args.model_path is not None:
        # deterministic cuBLAS needs its workspace fixed before the first handle is made (cuBLAS docs,
        # "Results reproducibility"); the small profile keeps cuBLAS's default and its recorded curves
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torch.distributed as dist

    # transformers and peft here, not on the first model build, so the phases say what start-up costs
    from peft import LoraConfig, get_peft_model  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401

    from gpuaccept import selftest_hooks
    from gpuaccept.training.after_training import RESUME, SERVED
    from gpuaccept.training.config import CKPT_MIN_GIB, profile_for, scale_plan
    from gpuaccept.training.data import encode, load_splits, load_tokenizer
    from gpuaccept.training.loop import Runtime
    from gpuaccept.training.perturb import PERTURB_ENV
    from gpuaccept.training.perturb import parse as parse_perturbation
    from gpuaccept.training.strategy import release, serve_own, train_one

    PHASES.mark("imports")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = (
        torch.device("cuda", info.local_rank % max(1, torch.cuda.device_count())) if use_cuda else torch.device("cpu")
    )
    strategies = list(dict.fromkeys(args.strategy.split(",")))
    several = len(strategies) > 1
    floor = args.plan.solo_floor if args.plan is not None else None  # every GPU's own run, before the node-wide runs
    overrides = _overrides(args)
    kind = "gpu" if use_cuda else "cpu"
    if args.profile == "scale" and args.model_path is None:
        if not use_cuda:
            why = "the scale fine-tune trains a 7B-class model on GPUs only"
            emit({"outcome": "not_applicable", "not_applicable": why}, probe="finetune")
            return
        total_gib = torch.cuda.get_device_properties(device).total_memory / 2**30
        plan = scale_plan(total_gib)
        if plan is None:
            why = f"a 7B-class model does not fit one GPU of {total_gib:.0f} GiB (needs {CKPT_MIN_GIB:.0f} GiB)"
            emit({"outcome": "not_applicable", "not_applicable": why}, gpu=gpu_identity(0), probe="finetune")
            return
        overrides = {**plan, **{k: v for k, v in overrides.items() if v is not None}}
    base_cfg = profile_for(kind, args.profile, **{**overrides, "strategy": strategies[0]})
    if base_cfg.deterministic:
        torch.use_deterministic_algorithms(True)
    threads = _threads(base_cfg.threads, use_cuda, info.local_world_size)
    if threads:
        torch.set_num_threads(threads)
    if use_cuda:
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # the CUDA context now, so it is start-up and not the first strategy
    PHASES.mark("device_init")
    rt = Runtime(info.rank, info.world_size, info.local_rank, device, node)
    dist.init_process_group(
        "nccl" if use_cuda else "gloo",
        init_method=f"tcp://{info.master_addr}:{info.master_port}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(minutes=5),
        device_id=device if use_cuda else None,  # NCCL's communicator now (eager), so it counts as rendezvous
    )
    PHASES.mark("rendezvous")
    tokenizer = load_tokenizer(base_cfg.model_path, base_cfg.tokenizer)
    train_rows, test_rows, data_desc = load_splits(base_cfg.dataset)
    train_ex = [e for e in (encode(tokenizer, r, base_cfg.seq_len) for r in train_rows) if e is not None]
    test_ex = [e for e in (encode(tokenizer, r, base_cfg.seq_len) for r in test_rows) if e is not None]
    PHASES.mark("data")
    startup = dict(PHASES.seconds)
    shared = {
        "startup_s": round(sum(startup.values()), 3),
        "startup_phases_s": {k: round(v, 3) for k, v in startup.items()},
        "torch_threads": threads,
    }
    gpu = gpu_identity(0) if use_cuda else None
    progress.gpu = (gpu or {}).get("index")
    hook = parse_perturbation(selftest_hooks.value(PERTURB_ENV))
    selected = hook is not None and hook.selects(node=node, gpu=(gpu or {}).get("index"), rank=info.rank)
    perturb_after = hook.step if hook is not None and selected else None
    runs: dict[str, dict[str, Any]] = {}
    pending: dict[str, dict[str, Any]] = {}
    resume_to = Path(str(args.checkpoint_dir or args.out / "resume").replace("{node}", node))
    for strategy in strategies:
        out = args.out / strategy if several else args.out
        cfg = profile_for(kind, args.profile, **{**overrides, "strategy": strategy, "out": out})
        started = time.monotonic()
        data, job, resume_job = train_one(
            cfg,
            rt,
            tokenizer,
            train_ex,
            test_ex,
            data_desc,
            use_cuda,
            gpu,
            info.rank,
            args.out,
            perturb_after,
            progress,
            resume_to if strategy == "solo" else None,
        )
        data.update(shared)
        # What this strategy would take launched alone: the shared start-up plus its own run.
        data["run_s"] = round(time.monotonic() - started, 3)
        data["wall_s"] = round(shared["startup_s"] + data["run_s"], 3)
        runs[strategy] = data
        if several:  # out now: a later strategy's failure or the launch's time limit cannot take it away
            emit(data, gpu=gpu, probe="finetune", stage=strategy)
        if job is not None:
            pending[strategy] = job
        if resume_job is not None:  # a checkpoint on the site's filesystem is removed once resumed from
            pending[RESUME] = {**resume_job, "clean": args.checkpoint_dir is not None}
        release(torch, use_cuda)
        slow = below_floor(dist, runs["solo"], gpu, node, info.rank, floor) if strategy == "solo" else ""
        if slow:  # every rank knows the same: the rest are skipped together, with the reason on the record
            for rest in strategies[strategies.index("solo") + 1 :]:
                runs[rest] = {"outcome": "not_run", "strategy": rest, "not_run": slow, **shared}
            break
    first = next((s for s in strategies if s in pending), None)
    if args.models_dir is not None and "solo" in runs and first is not None:  # rank 0's node: the merged weights
        job = pending[first]
        pending[SERVED] = {
            "cfg": job["cfg"],
            "base_path": job["base_path"],
            "seed": job["seed"],
            "to": Path(str(args.models_dir).replace("{node}", node)),
            "scratch": Path(str(args.scratch_dir).replace("{node}", node)) if args.scratch_dir else None,
            "prompt": list(test_ex[0]["prompt_ids"]),
            "clean": True,
        }
    PHASES.mark("strategies")
    progress.phase("lifecycle")
    for strategy, extra in lifecycles(dist, rt, pending, tokenizer, test_ex, train_ex).items():
        if strategy == RESUME:  # rank 0's own run saved the checkpoint this resumed from
            runs["solo"]["checkpoint"]["resumed"] = extra
            continue
        if strategy == SERVED:  # the launch's first adapter, merged, from the models filesystem to a first token
            runs["solo"]["served_weights"] = extra
            continue
        own = extra.pop("serving", None)  # a one-rank launch's own serving: the lifecycle's merged model
        if own is not None:
            runs[strategy]["serving"] = own
        runs[strategy]["lifecycle"] = extra
        runs[strategy]["wall_s"] = round(runs[strategy]["wall_s"] + extra["lifecycle_s"], 3)
    PHASES.mark("lifecycle")
    progress.phase("serving")
    own = serve_own(tokenizer, test_ex, device)  # every GPU's solo adapter, served by all GPUs at once
    if own is not None:
        runs["solo"]["serving"] = own
    PHASES.mark("serving")
    if several:
        every = {name: runs.get(name) for name in ("solo", "ddp", "fsdp")}  # one not asked for is None
        payload = {"outcome": "strategies", "strategies": every, **shared}
    else:
        payload = runs[strategies[0]]
    sys.stdout.flush()
    dist.destroy_process_group()
    PHASES.mark("teardown")
    payload["phases"] = _launch_phases(runs)
    payload["process_wall_s"] = round(PHASES.elapsed(), 3)
    emit(payload, gpu=gpu, probe="finetune")


def _launch_phases(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The launch's wall time by kind of work: start-up, model set-up, warm-up steps, timed steps,
    evals/checkpoints, lifecycle, teardown (what ``benchmarks/suite_sections.py`` tabulates)."""
    seconds = dict(PHASES.seconds)
    out = {"startup_s": sum(seconds.pop(k, 0.0) for k in ("imports", "device_init", "rendezvous", "data"))}
    for key, field_name in (
        ("setup_s", "setup_s"),
        ("warmup_s", "warmup_s"),
        ("measure_s", "timed_s"),
        ("checkpoint_s", "pause_s"),
    ):
        out[key] = sum(float(run.get(field_name) or 0.0) for run in runs.values())
    # the strategies' wall beyond their own phases: freeing memory, waiting for slower ranks to join
    out["other_s"] = max(0.0, seconds.pop("strategies", 0.0) - sum(out[k] for k in list(out)[1:]))
    out["lifecycle_s"] = seconds.pop("lifecycle", 0.0)
    out["serving_s"] = seconds.pop("serving", 0.0)
    out["teardown_s"] = seconds.pop("teardown", 0.0)
    out["other_s"] += sum(seconds.values())
    out["process_wall_s"] = PHASES.elapsed()
    return {k: round(v, 3) for k, v in out.items()}


if __name__ == "__main__":
    main()
    quick_exit()
