"""The training area's judging: what a fine-tune's figures must show, for every profile and strategy.

The acceptance tests (``tests/acceptance/test_training.py``) launch the ``finetune`` probe and hand each
strategy's rank records here; the judging core records every check. Whose limits judge a run is its
profile's (``LaunchShape.profile``): the built-in small model's ``train_*`` (measured on it), the built-in
7B-class model's ``train_scale_*`` and a ``--model-path`` checkpoint's ``train_pretrained_*`` (the fine-tuning
contract). The small model's tokens/s and wall time never judge another model; the 7B-class runs are
judged by MFU, which divides by the SKU's own dense BF16 peak (``skus.<SKU>.datasheet``).

Which judges a launch's records meet is decided here too, never in the test: every GPU's own run, then
(``judge_each_gpu``) each GPU serving its adapter where the run is a 7B-class one on GPUs (``LaunchShape.serves``)
and the lifecycle of a one-rank launch; a node-wide or multi-node strategy (``judge_run``) unless a rank was
held below its floor before it (``judge_not_trained``); every GPU's agreement with the others of its SKU and
stack (``judge_fleet_agreement``); and the launch's own wall time (``record_launch``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaccept.contracts.finetune import FinetuneRun, Lifecycle, RankRun
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.trajectory import Trajectory
from gpuaccept.training.finetune_launch import launch_payload
from gpuaccept.training.plan import LaunchShape
from gpuaccept.training.report import TARGET_LOSS, curve_points, loss_rebound, steps_to_target
from gpuaccept.verdicts.inference import LIFECYCLE as SERVING_LIFECYCLE
from gpuaccept.verdicts.inference import Served, judge_agreement, judge_lifecycle_serving, judge_serving
from gpuaccept.verdicts.trajectory import judge_fleet

__all__ = [
    "LIFECYCLE",
    "LOSS_FIGURES",
    "SCALE_LIFECYCLE",
    "SCALE_SOLO",
    "LaunchShape",
    "collective_figures",
    "judge_each_gpu",
    "judge_fleet_agreement",
    "judge_lifecycle",
    "judge_not_trained",
    "judge_run",
    "judge_solo",
    "label",
    "record_launch",
    "scale_collective",
]

GIB = float(1 << 30)

#: what every fine-tune run is judged on (``@pytest.mark.judges``: the metrics each test declares)
LOSS_FIGURES = (
    "train_nonfinite_steps",
    "train_loss_final",
    "train_eval_loss",
    "train_steps_to_target",
    "train_loss_rebound",
    "train_wall_s",
)
LIFECYCLE = ("train_original_kept", "train_reload_eval_delta", "train_ppl_reduction_pct", *SERVING_LIFECYCLE)
#: the real-scale run's own figures: MFU, its losses and wall time, decode speed of the 7B
SCALE_LOSS = ("train_scale_loss_final", "train_scale_eval_loss", "train_scale_steps_to_target", "train_scale_wall_s")
#: a --model-path run on GPUs: judged by MFU too (its own floors), never by the small model's tokens/s
SCALE_SOLO = ("train_mfu_pct", "train_pretrained_mfu_pct", *SCALE_LOSS)
SCALE_LIFECYCLE = ("train_scale_ppl_reduction_pct",)


def collective_figures(scope: str) -> tuple[str, ...]:
    """What DDP and FSDP of the small model are judged on, on a node or across nodes."""
    return (
        f"train_tokens_per_s_per_gpu_ddp_{scope}",
        f"train_tokens_per_s_per_gpu_fsdp_{scope}",
        "train_replica_mismatch_ranks",
        "train_fsdp_shard_ratio",
        "train_fsdp_mem_saving_ratio",
        "train_gpu_util_pct",
    )


def scale_collective(scope: str) -> tuple[str, ...]:
    """What DDP and FSDP of the 7B-class model are judged on beside ``collective_figures``."""
    mfu = tuple(f"train_{p}mfu_pct_{s}_{scope}" for p in ("", "pretrained_") for s in ("ddp", "fsdp"))
    return (*mfu, *SCALE_LOSS, *SCALE_LIFECYCLE)


def label(run: RankRun) -> str:
    return run.record.gpu_label or f"cpu rank {run.rank}"


def _world(judge: JudgeLike, runs: list[RankRun], shape: LaunchShape, metric: str) -> bool:
    """Whether every rank was launched in the world the shape plans; where one was not, nothing it trained
    is judged: ``metric`` (the launch's speed) is recorded unreadable naming the rank."""
    for run in runs:
        if run.record.world_size != shape.ranks:
            why = f"rank {run.rank}: launched as world size {run.record.world_size}, not {shape.ranks}"
            judge.unreadable(metric, why, node=run.node, gpu=label(run))
            return False
    return True


def judge_solo(judge: JudgeLike, shape: LaunchShape, records: list[RankRun]) -> bool:
    """Every GPU's own fine-tune: loss to the target, throughput, utilisation, each GPU judged by itself.

    The runs are independent (a world of one per GPU, same seed and data order), so each GPU's figures
    are its own; its speed is then held against the node's median (a GPU well below its siblings is
    slow even above the floor). False when the launch's ranks are not the shape's (nothing else of it is
    then judged).
    """
    if not _world(judge, records, shape, shape.speed_metric("solo")):
        return False
    for record in records:
        data = record.trained
        where = {"node": record.node, "gpu": label(record)}
        judge.expect("train_steps_agree", data["steps_done"], data["steps_planned"], **where, task_rank=record.rank)
        if shape.gpu_run:
            judge.expect("train_device", data["device"], "cuda", **where, task_rank=record.rank)
            judge.check("train_gpu_util_pct", data["util_pct"], **where, samples=data["util_samples"])
        _losses(judge, shape, data, where)
        _speed(judge, shape, "solo", record, where)
        # a checkpoint's wall time depends on its size: recorded, not judged
        wall = judge.info if shape.profile == "pretrained" else judge.check
        wall(shape.metric("train_wall_s"), data["wall_s"], **where, startup_s=data["startup_s"], run_s=data["run_s"])
        judge.info("train_peak_mem_gib", data["peak_mem_gib"], **where, grad_ckpt=data["grad_ckpt"])
    if shape.gpu_run:
        # GPUs against their siblings; gloo ranks of a CPU node share its cores with each other and with
        # whatever else runs there, so their rates say nothing about one another
        judge.stragglers(shape.speed_metric("solo"))
    return True


def judge_each_gpu(judge: JudgeLike, shape: LaunchShape, records: list[RankRun], stopped: str = "") -> None:
    """A launch's own runs, one per GPU (``judge_solo``); where the shape serves, every GPU serving the
    adapter it trained; on a one-rank launch (DDP and FSDP do not apply) its run's lifecycle. ``stopped``:
    why the launch was stopped after every rank finished its own run, so nothing was served and no
    lifecycle ran."""
    if not judge_solo(judge, shape, records):
        return
    if shape.serves:
        for record in records:
            if stopped:
                judge.unreadable("infer_decode_mbu_pct", f"not served: {stopped}", node=record.node)
            else:
                judge_serving(judge, record, label(record))
    if shape.ranks == 1 and not stopped:
        judge_lifecycle(judge, shape, records[0].trained["lifecycle"], records[0].node)


def judge_not_trained(judge: JudgeLike, shape: LaunchShape, strategy: str, records: list[RankRun]) -> bool:
    """Whether ``strategy`` was not trained because a GPU's own run was below its floor (the probe's
    ``--plan``'s solo floor): each such rank's speed is then unreadable, naming the GPU and its rate, and the
    strategy is judged no further."""
    skipped = False
    for record in records:
        if record.run["outcome"] == "not_run":
            judge.unreadable(shape.speed_metric(strategy), record.run["not_run"], node=record.node, gpu=label(record))
            skipped = True
    return skipped


def judge_run(
    judge: JudgeLike,
    shape: LaunchShape,
    strategy: str,
    records: list[RankRun],
    step_s: float,
    ddp: list[RankRun] | str | None = None,
    stopped: str = "",
) -> None:
    """DDP or FSDP across ``shape.ranks``: lockstep, per-rank speed and utilisation, the run's losses and
    wall time, replicas identical (DDP), shards even and lighter than DDP of the same shape (FSDP: ``ddp``
    holds the DDP run's records, or why they could not be had), and the lifecycle (``stopped``: why the
    launch was stopped after every rank finished the strategy, so its lifecycle never ran)."""
    if not _world(judge, records, shape, shape.speed_metric(strategy)):
        return
    data0, node0 = records[0].trained, records[0].node
    for record in records:
        where = {"node": record.node, "gpu": label(record)}
        data = record.trained
        judge.expect("train_steps_agree", data["steps_done"], data0["steps_done"], **where, task_rank=record.rank)
        if shape.gpu_run:
            judge.expect("train_device", data["device"], "cuda", **where, task_rank=record.rank)
    for record in records:
        where = {"node": record.node, "gpu": label(record)}
        data = record.trained
        _speed(judge, shape, strategy, record, where)
        judge.info("train_peak_mem_gib", data["peak_mem_gib"], **where, task_rank=record.rank)
        if shape.gpu_run:
            judge.check("train_gpu_util_pct", data["util_pct"], **where, samples=data["util_samples"])
    if shape.gpu_run or shape.profile == "small":
        judge.stragglers(shape.speed_metric(strategy))
    _losses(judge, shape, data0, {"node": node0})
    # The step trained several strategies after one start-up; a strategy's wall time is what it would take
    # launched alone: that start-up plus its own training and lifecycle (measured by the probe). A
    # checkpoint's depends on its size: recorded, not judged.
    wall = judge.info if shape.profile == "pretrained" else judge.check
    wall(
        shape.metric("train_wall_s"),
        data0["wall_s"],
        node=node0,
        startup_s=data0["startup_s"],
        run_s=data0["run_s"],
        lifecycle_s=data0["lifecycle"]["lifecycle_s"] if data0["lifecycle"] else None,
        step_s=round(step_s, 2),
    )
    if strategy == "ddp":
        odd = [r.rank for r in records if r.trained["checksum"] != data0["checksum"]]
        judge.check("train_replica_mismatch_ranks", len(odd), node=node0, ranks=odd)
    if strategy == "fsdp" and shape.ranks > 1:
        for record in records:
            data = record.trained
            share = data["param_bytes_local"] / (data["param_bytes_total"] / shape.ranks)
            judge.check("train_fsdp_shard_ratio", round(share, 4), node=record.node, gpu=label(record))
        if shape.gpu_run and isinstance(ddp, list):
            _memory_saving(judge, records, ddp, shape.ranks)
    judge_lifecycle(judge, shape, data0["lifecycle"], node0, stopped)
    if strategy == "fsdp" and shape.gpu_run and isinstance(ddp, str):
        why = f"FSDP memory could not be compared: the DDP run failed: {ddp}"
        judge.unreadable("train_fsdp_mem_saving_ratio", why, node=node0)


def judge_fleet_agreement(
    judge: Judge,
    runs: Sequence[Trajectory],
    served: Sequence[Served],
    prints: Mapping[str, Mapping[str, Any]],
    profile: str,
    unmeasured: Mapping[str, str],
) -> int:
    """Every GPU's own loss trajectory against the others of its SKU and stack and the baseline run
    (``verdicts.trajectory``), and what each served (``verdicts.inference.judge_agreement``); a node whose
    launch gave nothing to compare (``unmeasured``: why) is named. Returns how many GPUs were judged."""
    for node, why in unmeasured.items():
        judge.unreadable("train_trajectory_rel_diff", f"trajectory not compared: {why}", node=node)
    if not runs:
        return 0
    return judge_fleet(judge, runs, prints, profile=profile) + judge_agreement(judge, served, prints)


def record_launch(judge: JudgeLike, records: list[RankRecord], step_s: float, strategies: Sequence[str]) -> None:
    """A launch's wall time and where it went (start-up, set-up, warm-up, timed steps, checkpoints,
    lifecycle, teardown), as rank 0 measured it, beside the step's own."""
    first = records[0]
    payload = launch_payload(first).root
    if payload["outcome"] == "not_applicable":
        return
    phases = payload["phases"]
    judge.info(
        "train_launch_wall_s",
        phases["process_wall_s"],
        node=first.node,
        phases=phases,
        step_s=round(step_s, 3),
        ranks=len(records),
        strategies=list(strategies),
    )


def judge_lifecycle(
    judge: JudgeLike, shape: LaunchShape, data0: Lifecycle | None, node0: str, stopped: str = ""
) -> None:
    """The lifecycle (rank 0): original kept, reload reproduces eval, base vs fine-tuned. ``stopped``: why the
    launch was stopped before the lifecycle ran."""
    if stopped or data0 is None or data0["outcome"] == "stopped":
        # an ERROR, unless a check failed (a NaN loss that stopped training)
        why = (
            data0["lifecycle_error"]
            if data0 is not None and data0["outcome"] == "stopped"
            else f"the lifecycle did not run: {stopped or 'rank 0 of the launch holds none'}"
        )
        judge.unreadable("train_original_kept", why, node=node0)
        return
    judge.check("train_original_kept", int(bool(data0["original_kept"])), node=node0)
    judge.check("train_reload_eval_delta", round(data0["reload_eval_delta"], 6), node=node0)
    base, tuned = data0["base_perplexity"], data0["finetuned_perplexity"]
    pct = data0["perplexity_reduction_pct"]
    finite = [v for v in (base, tuned, pct) if isinstance(v, (int, float)) and math.isfinite(v)]
    # a perplexity that is not finite leaves no reduction to speak of: the check fails and says which
    reduction = round(pct, 2) if len(finite) == 3 else f"undefined: base perplexity {base}, fine-tuned {tuned}"
    judge.check(
        shape.metric("train_ppl_reduction_pct"), reduction, node=node0, base_perplexity=base, finetuned_perplexity=tuned
    )
    judge_lifecycle_serving(judge, shape.gpu_run and shape.profile in ("scale", "pretrained"), data0, node0)


def _losses(judge: JudgeLike, shape: LaunchShape, data: FinetuneRun, where: dict[str, Any]) -> None:
    """Loss figures of one run: no NaN/inf, final train and eval loss, steps to loss 0.5, no rebound."""
    losses = [float(v) for v in data["losses"]]
    judge.check("train_nonfinite_steps", data["nonfinite_steps"], **where)
    judge.check(
        shape.metric("train_loss_final"),
        data["train_loss_final"],
        **where,
        steps=data["steps_done"],
        curve=curve_points(losses),
    )
    judge.check(shape.metric("train_eval_loss"), data["eval_loss_final"], **where)
    reached = steps_to_target(losses, TARGET_LOSS)
    never = f"not reached in {len(losses)} steps"
    judge.check(shape.metric("train_steps_to_target"), reached or never, **where, target=TARGET_LOSS)
    judge.check("train_loss_rebound", loss_rebound(losses), **where)


def _speed(judge: JudgeLike, shape: LaunchShape, strategy: str, record: RankRun, where: dict[str, Any]) -> None:
    """One rank's throughput: tokens/s (small model), MFU (7B-class on GPUs), or recorded (CPU ranks)."""
    data = record.trained
    metric = shape.speed_metric(strategy)
    if shape.profile == "small":
        judge.check(metric, data["tokens_per_s"], **where, timed_s=data["timed_s"], task_rank=record.rank)
    elif shape.gpu_run:
        mfu = mfu_pct(judge, record, metric)
        if mfu is not None:
            judge.check(metric, mfu, **where, **_mfu_extra(data), task_rank=record.rank)
    else:  # a checkpoint on CPU ranks: no BF16 peak to divide by, and no small-model limit applies
        judge.info("train_tokens_per_s", data["tokens_per_s"], **where, task_rank=record.rank)


def mfu_pct(judge: JudgeLike, record: RankRun, metric: str) -> float | None:
    """Model FLOPs per second over the SKU's dense BF16 peak (its datasheet figure in the catalogue); None,
    with ``metric`` recorded unreadable for the rank's GPU, where either is missing."""
    sku = judge.sku(record.node)
    peak = judge.datasheet(sku, "bf16_dense_tflops")
    tflops = record.trained["model_tflops_per_s"]
    if peak is None or tflops is None:
        sku_text = f"SKU {sku} has no datasheet bf16_dense_tflops (add it under skus.{sku} in a site file)"
        why = sku_text if peak is None else f"rank {record.rank}: no timed steps"
        judge.unreadable(metric, f"cannot compute MFU: {why}", node=record.node, gpu=label(record))
        return None
    return round(100 * float(tflops) / peak, 2)


def _mfu_extra(data: FinetuneRun) -> dict[str, Any]:
    return {
        "tokens_per_s": round(float(data["tokens_per_s"] or 0.0), 1),
        "model_tflops_per_s": data["model_tflops_per_s"],
        "flops_per_token": data["model_flops"]["flops_per_token"],
        "tokens_per_step": data["tokens_per_step"],
        "precision": data["precision"],
        "grad_ckpt": data["grad_ckpt"],
        "power_w": data["power_w"],
    }


def _memory_saving(judge: JudgeLike, fsdp: list[RankRun], ddp: list[RankRun], world: int) -> None:
    """Per rank: (DDP peak - FSDP peak) / the sharding saving expected from the model state.

    Model state per DDP rank = all parameters + grads and two Adam moments of the trainable ones (in the
    adapters' dtype: fp32 for the small model, bf16 on the 7B-class fast path); FSDP holds 1/world of it,
    so it should save (1 - 1/world) of that. Activations are the same in both runs (same per-rank batch,
    same precision), so they cancel out of the difference.
    """
    by_rank = {r.rank: r for r in ddp}
    for record in fsdp:
        ref, data = by_rank[record.rank].trained, record.trained
        adapter_bytes = 2 if ref["precision"]["adapters"] == "bf16" else 4
        state = ref["param_bytes_total"] + 3 * adapter_bytes * ref["trainable_params"]
        expected = (1 - 1 / world) * state / GIB
        saved = ref["peak_mem_gib"] - data["peak_mem_gib"]
        judge.check(
            "train_fsdp_mem_saving_ratio",
            round(saved / expected, 3),
            node=record.node,
            gpu=label(record),
            ddp_peak_gib=ref["peak_mem_gib"],
            fsdp_peak_gib=data["peak_mem_gib"],
            expected_saving_gib=round(expected, 3),
        )
