"""The training loop: steps, global loss curve, evals, checkpoints, throughput and the selftest fault.

Loss values are gathered every ``log_every`` steps in one all-reduce (not one ``.item()`` per step, which
would stall the GPU every step). Throughput counts real (unpadded) tokens per rank over the steps from
``timed_from_step`` on, with the clock stopped during evals and checkpoints.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpuaccept import selftest_hooks
from gpuaccept.training.config import TrainConfig
from gpuaccept.training.data import Example, batches, eval_shards
from gpuaccept.training.model import trainable_state
from gpuaccept.training.monitor import UtilSampler
from gpuaccept.training.packing import PackedBatch, packed_batches
from gpuaccept.training.progress_reporter import Reporter, Slowdown

__all__ = [
    "FAULT_ENV",
    "Runtime",
    "TrainResult",
    "autocast",
    "evaluate",
    "fault_point",
    "optimizer_step",
    "save_adapter",
    "schedule",
    "stream",
    "train",
]

FAULT_ENV = "GPUACCEPT_FAULT_RANK_EXIT"
FAULT_EXIT_CODE = 17


@dataclass(frozen=True)
class Runtime:
    """Where this rank runs."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    node: str


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    steps_done: int = 0
    nonfinite_steps: int = 0
    timed_tokens: int = 0
    timed_s: float = 0.0
    train_s: float = 0.0
    #: steps before the throughput clock starts (clocks, allocator and autotuning settle)
    warmup_s: float = 0.0
    #: evals and checkpoints between timed stretches (the clock is stopped there)
    pause_s: float = 0.0
    #: what the test hook changed (``gpuaccept.training.perturb``), None when it was off for this rank
    perturbed: str | None = None
    #: the resumable checkpoint saved half-way (``gpuaccept.training.checkpoint.save``), None when none was asked for
    resumable: dict[str, Any] | None = None


@dataclass
class _StepClock:
    """The throughput clock: it runs over the timed steps (from ``timed_from_step``) and stops for evals and
    checkpoints, whose time goes to ``pause_s``; the GPU is synchronised at each edge so its queued work is
    counted where it ran. The utilisation sampler follows it."""

    result: TrainResult
    device: torch.device
    sampler: UtilSampler | None
    #: when the running stretch began; None before the timed steps
    since: float | None = None
    paused_at: float = 0.0

    def start(self, started: float) -> None:
        """The first timed step: the warm-up before it is ``warmup_s``."""
        _sync(self.device)
        self.since = time.monotonic()
        self.result.warmup_s = self.since - started
        if self.sampler:
            self.sampler.active()

    def pause(self) -> None:
        self.paused_at = time.monotonic()
        if self.since is not None:
            _sync(self.device)
            self.paused_at = time.monotonic()
            self.result.timed_s += self.paused_at - self.since
        if self.sampler:
            self.sampler.idle()

    def resume(self, more: bool = True) -> None:
        """Back to the steps (``more``: there are steps left to time)."""
        if self.since is not None and more:
            _sync(self.device)
            self.since = time.monotonic()
            if self.sampler:
                self.sampler.active()
        self.result.pause_s += time.monotonic() - self.paused_at


def autocast(device: torch.device) -> AbstractContextManager[Any]:
    """bf16 autocast on GPUs; fp32 on CPUs (CPU bf16 is slow and not what CI measures). A bf16 model
    computes in bf16 as it is; autocast then changes nothing but the loss's own fp32 upcast."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def stream(cfg: TrainConfig, examples: list[Example], rt: Runtime, pad_id: int) -> Iterator[PackedBatch]:
    """This rank's training batches with their count of real tokens: packed rows, or padded examples."""
    if cfg.pack:
        yield from packed_batches(examples, cfg.batch_size, cfg.seq_len, rt.rank, rt.world, cfg.seed, pad_id)
        return
    for batch in batches(examples, cfg.batch_size, rt.rank, rt.world, cfg.seed, pad_id):
        yield batch, int(batch["attention_mask"].sum())


def fault_point(rank: int) -> int | None:
    """The step at which this rank must die, from ``GPUACCEPT_FAULT_RANK_EXIT=<rank>:<step>``.

    Honoured only under ``GPUACCEPT_SELFTEST=1``: the knob exists to prove that one dead rank ends the
    whole step at once, and must never fire in a real acceptance run.
    """
    spec = selftest_hooks.value(FAULT_ENV)
    if not spec:
        return None
    if not selftest_hooks.selftest_on():
        print(f"gpuaccept finetune: ignoring {FAULT_ENV} (only honoured with GPUACCEPT_SELFTEST=1)", file=sys.stderr)
        return None
    fault_rank, step = (int(part) for part in spec.split(":"))
    return step if fault_rank == rank else None


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host-to-GPU copy from pinned memory: a pageable copy would wait for the GPU queue to drain
    and stop the CPU from running ahead into the next step (an idle gap on the GPU every step)."""
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate(model: nn.Module, examples: list[Example], rt: Runtime, batch_size: int, pad_id: int) -> float:
    """Mean answer-token cross-entropy over the whole test split (exact sum across ranks)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=rt.device)
    # eager, no KV cache: compiled layers (``TrainConfig.compile``) would otherwise compile again for a
    # no-grad forward with a cache, twice a run, for a pass that takes a second
    with torch.no_grad(), autocast(rt.device), torch.compiler.set_stance("force_eager"):
        for batch in eval_shards(examples, rt.rank, rt.world, batch_size, pad_id):
            batch = {k: v.to(rt.device, non_blocking=True) for k, v in batch.items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
            labels = batch["labels"][:, 1:]
            loss = nn.functional.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum"
            )
            totals[0] += loss.double()
            totals[1] += (labels != -100).sum()
    if rt.world > 1:
        dist.all_reduce(totals)
    model.train(was_training)
    reshard = getattr(model, "reshard", None)
    if reshard is not None:
        # FSDP2 leaves the root group unsharded after a no-grad forward (no backward to reshard it):
        # reshard so every parameter is a DTensor shard again for the state walk and the byte count.
        reshard()
    return float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")


def save_adapter(
    peft_model: nn.Module, state: dict[str, torch.Tensor], path: Path, meta: dict[str, Any], *, main: bool
) -> None:
    """peft adapter files (what ``PeftModel.from_pretrained`` reads) plus a small state JSON.

    Called on every rank, written by ``main`` only: peft's state-dict walk fires FSDP2's state-dict hooks,
    which change a group's sharded/unsharded state; done on one rank alone, the next all-gather of the
    ranks would no longer match (seen as gloo "Received data size doesn't match expected size").
    """
    if main:
        path.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(path), state_dict=state, is_main_process=main)  # type: ignore[operator]
    if main:
        (path / "trainer_state.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def optimizer_step(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    params: list[nn.Parameter],
    opt: torch.optim.Optimizer,
    sched: Any,
    device: torch.device,
) -> torch.Tensor:
    """One step: forward, backward, clip, optimizer and schedule; the loss stays on the device (reading
    it would stall the GPU). What ``benchmarks/train_scale_bench.py`` times as our fine-tune."""
    batch = {k: _to(v, device) for k, v in batch.items()}
    with autocast(device):
        loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    return loss


def schedule(cfg: TrainConfig) -> Any:
    """Linear warm-up over ``warmup_steps``, then cosine down to 10% of the rate at the last step."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def train(
    cfg: TrainConfig,
    rt: Runtime,
    model: nn.Module,
    peft_model: nn.Module,
    train_ex: list[Example],
    test_ex: list[Example],
    pad_id: int,
    sampler: UtilSampler | None,
    *,
    save: bool = True,
    fault_rank: int | None = None,
    perturb_after: int | None = None,
    progress: Reporter | None = None,
    resume_to: Path | None = None,
) -> TrainResult:
    """Run ``cfg.steps`` optimizer steps; evaluate (and with ``save``, checkpoint) every ``cfg.ckpt_every``.

    ``save=False`` is the per-GPU solo run: evals only, nothing written. ``fault_rank`` is the rank the
    selftest fault knob names this process by (the launch's global rank; a solo run is rank 0 of its own
    world of one). ``perturb_after`` is the step after which the test hook perturbs this rank's weights
    (``gpuaccept.training.perturb``; None, the default, leaves the run alone). ``progress`` prints this rank's
    line after every step (``gpuaccept.training.progress_reporter``): where the rank stood if the launch's limit comes.
    ``resume_to``: the folder of the resumable checkpoint saved half-way (``gpuaccept.training.checkpoint``), with
    the clock stopped as for an eval; None saves none.
    """
    from gpuaccept.training.checkpoint import resume_step
    from gpuaccept.training.checkpoint import save as save_resumable

    resume_at = resume_step(cfg.steps) if resume_to is not None else None
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg))
    batches = stream(cfg, train_ex, rt, pad_id)
    die_at = fault_point(rt.rank if fault_rank is None else fault_rank)
    slowdown = Slowdown.for_rank(rt.rank if fault_rank is None else fault_rank, rt.node)
    if progress is not None:
        progress.phase(cfg.strategy, cfg.steps)
    result = TrainResult()
    pending: list[torch.Tensor] = []
    clock = _StepClock(result, rt.device, sampler)
    started = time.monotonic()
    model.train()
    for step in range(1, cfg.steps + 1):
        if die_at is not None and step == die_at:
            print(
                f"gpuaccept finetune: selftest fault: rank {rt.rank} on {rt.node} exits with status "
                f"{FAULT_EXIT_CODE} at step {step} ({FAULT_ENV})",
                file=sys.stderr,
                flush=True,
            )
            os._exit(FAULT_EXIT_CODE)
        batch, tokens = next(batches)
        loss = optimizer_step(model, batch, params, opt, sched, rt.device)
        if perturb_after == step:
            from gpuaccept.training.perturb import PERTURB_ENV, apply

            result.perturbed = f"after step {step}: {apply(model)}"
            print(
                f"gpuaccept finetune: TEST HOOK {PERTURB_ENV}: rank {rt.rank} on {rt.node}: {result.perturbed}",
                file=sys.stderr,
                flush=True,
            )
        opt.zero_grad(set_to_none=True)
        pending.append(loss.detach().float())
        if progress is not None:
            progress.step(step)
        slowdown.after(step)
        if clock.since is not None:
            result.timed_tokens += tokens
        result.steps_done = step
        boundary = step % cfg.ckpt_every == 0 or step == cfg.steps
        if step % cfg.log_every == 0 or boundary:
            values = torch.stack(pending)
            pending = []
            if rt.world > 1:
                dist.all_reduce(values)
                values /= rt.world
            finite = [float(v) for v in values.cpu()]
            result.losses.extend(finite)
            result.nonfinite_steps += sum(1 for v in finite if not math.isfinite(v))
            if rt.rank == 0 and boundary:
                elapsed = time.monotonic() - started
                print(f"step {step}/{cfg.steps} loss {finite[-1]:.4f} ({elapsed:.1f} s)", file=sys.stderr, flush=True)
            if result.nonfinite_steps:
                break
        if step == cfg.timed_from_step:
            clock.start(started)
        if step == resume_at and resume_to is not None:
            clock.pause()
            try:
                result.resumable = save_resumable(resume_to, step, model, opt, sched)
            except OSError as exc:  # the site's filesystem refused it: its check names this; training goes on
                result.resumable = {
                    "outcome": "error",
                    "path": str(resume_to),
                    "step": step,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            clock.resume()
        if boundary:
            clock.pause()
            eval_loss = evaluate(model, test_ex, rt, cfg.eval_batch_size or cfg.batch_size, pad_id)
            result.evals.append((step, eval_loss))
            if save:
                state = trainable_state(model)
                meta = {"step": step, "train_loss": result.losses[-1], "eval_loss": eval_loss}
                path = cfg.out / "checkpoints" / f"step-{step:06d}"
                save_adapter(peft_model, state, path, meta, main=rt.rank == 0)
                result.checkpoints.append(str(path))
                if step == cfg.steps:
                    save_adapter(peft_model, state, cfg.out / "final", meta, main=rt.rank == 0)
            clock.resume(more=step < cfg.steps)
    result.train_s = time.monotonic() - started
    if sampler:
        sampler.idle()
    return result
