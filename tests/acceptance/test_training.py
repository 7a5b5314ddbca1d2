"""Training: LoRA fine-tunes that test the GPU: on every GPU alone, across a node, across all nodes.

One launch of the ``finetune`` probe per node (one rank per GPU; on CPU nodes a few gloo ranks) pays
start-up once and trains three times: every GPU alone and at the same time (``solo``, judged per GPU by
``test_finetune_each_gpu``), then DDP and then FSDP across the node's GPUs (``test_finetune_node``).
On a one-GPU node DDP and FSDP do not apply (skipped, not passed on the solo curve); the GPU's own run
then saves and gets the lifecycle. The multi-node launch trains DDP and FSDP across every allocated node.

``test_finetune_agreement`` holds every GPU's own run against every other GPU of its SKU and software
stack, across all nodes, and against a ``--baseline`` run: the built-in fine-tune is bitwise
deterministic, so a GPU whose loss trajectory departs computes wrong even when its loss still falls
(``gpuaccept.judging.trajectory``). Each run is also judged: train and
eval loss at or below the SKU's limit for the built-in model (the seeds' 7B contract, ``train_pretrained_*``,
for ``--model-path`` runs), loss 0.5 reached within the planned steps, no NaN/inf,
no divergence, tokens/s per GPU above the floor for the strategy and scale, GPU utilisation (NVML,
sampled during training), DDP replicas bit-identical, FSDP really sharded and lighter than DDP, and
the seeds' lifecycle: original model kept, adapter reloads to the same eval loss, fine-tuned
perplexity well below the base model's. Loss curve and comparison JSON go to the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.dispatch.result import ProbeResult, RankRecord
from gpuaccept.errors import MeasurementError
from gpuaccept.judging.trajectory import Trajectory, judge_fleet
from gpuaccept.report.charts.loss import artifacts
from gpuaccept.training.report import (
    TARGET_LOSS,
    curve_points,
    loss_rebound,
    print_summary,
    steps_to_target,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.training]

STRATEGIES = ["ddp", "fsdp"]
#: what one node's launch trains: every GPU alone first (while no collective has touched the GPUs), then
#: the node-wide strategies; start-up (torch, transformers, peft, NCCL: 10-17 s on the H100/H200 hosts)
#: is paid once for all three.
NODE_STRATEGIES = ["solo", *STRATEGIES]
#: gloo ranks per node when the node declares no GPU: enough to exercise intra-node collectives next to
#: inter-node ones, few enough for CI's 2-core loopback cluster (one torch thread per rank).
CPU_RANKS_PER_NODE = 2
GIB = float(1 << 30)


@dataclass(frozen=True)
class Scale:
    """A launch shape: 'node' (all GPUs of one node) or 'multinode' (all GPUs of all nodes)."""

    name: str
    nodes: tuple[str, ...]
    tasks_per_node: int
    gpus_per_task: int
    #: "default" (the built-in small model, or the --model-path checkpoint) or "scale" (built-in 7B)
    profile: str = "default"

    @property
    def ranks(self) -> int:
        return self.tasks_per_node * len(self.nodes)

    @property
    def strategies(self) -> list[str]:
        """A node trains every GPU alone, then DDP and FSDP; a one-rank node only its GPU alone (DDP and
        FSDP need two ranks); the multi-node launch DDP and FSDP."""
        if self.name != "node":
            return STRATEGIES
        return NODE_STRATEGIES if self.ranks > 1 else ["solo"]

    def folder(self, strategy: str | None = None) -> str:
        """The launch's report folder (``2r-node1``, ``scale-2r-node1``); a strategy's run lies in its
        subfolder."""
        where = self.nodes[0] if len(self.nodes) == 1 else f"{len(self.nodes)}nodes"
        name = f"{self._tag}{self.ranks}r-{where}"
        return f"{strategy}-{name}" if strategy else name

    @property
    def _tag(self) -> str:
        return "" if self.profile == "default" else f"{self.profile}-"

    def out(self) -> str:
        """The launch's ``--out``: a node launch names its node as ``{node}`` (the probe fills it in), so
        every node's launch has the same arguments and one fan-out step serves them all."""
        return f"{self._tag}{self.ranks}r-{{node}}" if self.name == "node" else self.folder()


@dataclass(frozen=True)
class Ctx:
    """The session objects a fine-tune case needs, bundled once per test."""

    cluster: Any
    settings: Any
    judge: Any
    rootdir: Path


def _scale(cluster: Any, name: str, nodes: tuple[str, ...], profile: str = "default") -> Scale:
    gpus = min(cluster.gpus_on(n) for n in nodes)
    return Scale(name, nodes, gpus or CPU_RANKS_PER_NODE, 1 if gpus else 0, profile)


def _profiled(ctx: Ctx, name: str, nodes: tuple[str, ...], profile: str) -> Scale:
    """The launch shape for ``profile``; the real-scale run is skipped where it does not apply: no GPU
    declared on the nodes, or a ``--model-path`` checkpoint, which is then the real-scale run itself."""
    scale = _scale(ctx.cluster, name, nodes, profile)
    if profile == "scale":
        if ctx.settings.model_path:
            pytest.skip("not applicable: --model-path given: the checkpoint is the real-scale fine-tune")
        if not scale.gpus_per_task:
            pytest.skip(f"not applicable: the 7B-class fine-tune needs GPUs; {', '.join(nodes)} declares none")
    return scale


def _launch(cluster: Any, settings: Any, rootdir: Path, scale: Scale) -> ProbeResult:
    """One launch per shape trains every strategy of the shape in one process group (start-up paid once);
    every case of the shape reads it (``cluster.run_shared``)."""
    args = [
        "--strategy",
        ",".join(scale.strategies),
        "--out",
        str(rootdir / "reports" / "training" / scale.out()),
    ]
    if scale.profile == "scale":
        args += ["--profile", "scale"]
    if settings.model_path:
        args += ["--model-path", str(settings.model_path)]
    if settings.dataset:
        args += ["--dataset", str(settings.dataset)]
    return cluster.run_shared(
        "finetune",
        nodes=scale.nodes,
        tasks_per_node=scale.tasks_per_node,
        gpus_per_task=scale.gpus_per_task,
        args=args,
        exclusive=True,
    )


def _finetune(cluster: Any, settings: Any, rootdir: Path, strategy: str, scale: Scale) -> ProbeResult:
    """The launch's result as seen by one strategy: each rank's record holds that strategy's figures."""
    launch = _launch(cluster, settings, rootdir, scale)
    absent = sorted({str(r.data["not_applicable"]) for r in launch.records if r.data.get("not_applicable")})
    if absent:  # declared by the GPUs themselves (memory too small for a 7B-class model)
        pytest.skip(f"not applicable: {'; '.join(absent)}")
    records = []
    for record in launch.records:
        # a launch of one strategy carries its figures at the top level
        runs = record.data.get("strategies") or {record.data.get("strategy"): record.data}
        if strategy not in runs:
            raise MeasurementError(
                f"{record.node} rank {record.rank}: the finetune result holds no {strategy} run "
                f"(has {sorted(runs) or 'none'})",
                nodes=(record.node,),
            )
        records.append(replace(record, data=runs[strategy]))
    return replace(launch, records=records)


def _label(record: RankRecord) -> str:
    return record.gpu_label or f"cpu rank {record.rank}"


def _launch_figures(strategy: str, scale: Scale, ctx: Ctx) -> None:
    """The launch's wall time and where it went (start-up, set-up, warm-up, timed steps, checkpoints,
    lifecycle, teardown), recorded once per launch by the case of its first strategy."""
    if strategy != scale.strategies[0]:
        return
    result = _launch(ctx.cluster, ctx.settings, ctx.rootdir, scale)
    judge = ctx.judge
    first = result.records[0]
    phases = first.data.get("phases") or {}
    print(
        f"{scale.folder()}: step {result.duration_s:.1f} s; rank 0 phases "
        + ", ".join(f"{k}={v}" for k, v in phases.items())
    )
    judge.info(
        "train_launch_wall_s",
        phases.get("process_wall_s", first.data.get("process_wall_s")),
        node=first.node,
        phases=phases,
        step_s=round(result.duration_s, 3),
        ranks=len(result.records),
        strategies=scale.strategies,
    )


def _check_solo(scale: Scale, ctx: Ctx) -> None:
    """Every GPU's own fine-tune: loss to the target, throughput, utilisation, each GPU judged by itself.

    The runs are independent (a world of one per GPU, same seed and data order), so each GPU's figures
    are its own; tokens/s is then held against the node's median (a GPU well below its siblings is
    slow even above the floor). Measured at the same time on every GPU, one rank per GPU: no GPU is
    shared, and the node's GPUs run under the power and cooling they share in real use.
    """
    judge = ctx.judge
    result = _finetune(ctx.cluster, ctx.settings, ctx.rootdir, "solo", scale)
    _launch_figures("solo", scale, ctx)
    gpu_run = scale.gpus_per_task > 0
    for record in result.records:
        data = record.data
        where = {"node": record.node, "gpu": _label(record)}
        if record.world_size != scale.ranks:
            raise MeasurementError(
                f"{record.node} rank {record.rank}: launched as world size {record.world_size}, not {scale.ranks}",
                nodes=(record.node,),
            )
        judge.expect("train_steps_agree", data["steps_done"], data["steps_planned"], **where, task_rank=record.rank)
        if gpu_run:
            judge.expect("train_device", data["device"], "cuda", **where, task_rank=record.rank)
            judge.check("train_gpu_util_pct", data["util_pct"], **where, samples=data["util_samples"])
        _check_losses(ctx, data, where, scale)
        _check_speed(ctx, scale, "solo", record, where)
        judge.info("train_peak_mem_gib", data["peak_mem_gib"], **where, grad_ckpt=data.get("grad_ckpt"))
    if gpu_run:
        # GPUs against their siblings; gloo ranks of a CPU node share its cores with each other and with
        # whatever else runs there, so their rates say nothing about one another
        judge.stragglers(_speed_metric(ctx, scale, "solo"))
    print_summary(scale.folder("solo"), result.duration_s, result.records, _label)
    first = result.records[0]
    if scale.ranks == 1:  # a one-GPU node: its own run is the run with the lifecycle (DDP/FSDP do not apply)
        _check_lifecycle(ctx, first.data, first.node, scale.folder("solo"), scale)


def _profile(ctx: Ctx, scale: Scale) -> str:
    """Whose limits judge the run: the built-in small model's (``train_*``), the built-in 7B's
    (``train_scale_*``) or a ``--model-path`` checkpoint's, by the seeds' contract (``train_pretrained_*``)."""
    if scale.profile == "scale":
        return "scale"
    return "pretrained" if ctx.settings.model_path else "small"


def _metric(ctx: Ctx, name: str, scale: Scale) -> str:
    """The profile's own limit for ``name``: each profile's limits were measured on (or, for
    ``--model-path``, contracted for) that model; the small model's never judge another."""
    profile = _profile(ctx, scale)
    return name if profile == "small" else name.replace("train_", f"train_{profile}_", 1)


def _speed_metric(ctx: Ctx, scale: Scale, strategy: str) -> str:
    """Throughput is judged by tokens/s for the small model (its limits were measured on it) and by MFU
    for the 7B-class runs, which divides by the SKU's own BF16 peak and so holds for any model size."""
    suffix = "" if strategy == "solo" else f"_{strategy}_{scale.name}"
    if _profile(ctx, scale) == "small":
        return f"train_tokens_per_s_per_gpu_{strategy}" + ("" if strategy == "solo" else f"_{scale.name}")
    return _metric(ctx, "train_mfu_pct", scale).replace("train_scale_", "train_", 1) + suffix


def _check_speed(ctx: Ctx, scale: Scale, strategy: str, record: RankRecord, where: dict[str, Any]) -> None:
    """One rank's throughput (tokens/s or MFU) and, for a run launched alone, its wall time."""
    judge, data = ctx.judge, record.data
    metric = _speed_metric(ctx, scale, strategy)
    if _profile(ctx, scale) == "small":
        judge.check(metric, data["tokens_per_s"], **where, timed_s=data["timed_s"], task_rank=record.rank)
    elif scale.gpus_per_task:
        judge.check(metric, _mfu_pct(ctx, record), **where, **_mfu_extra(data), task_rank=record.rank)
    else:  # a checkpoint on CPU ranks: no BF16 peak to divide by, and no small-model limit applies
        judge.info("train_tokens_per_s", data["tokens_per_s"], **where, task_rank=record.rank)
    if strategy == "solo":  # a checkpoint's wall time depends on its size: recorded, not judged
        record = judge.info if _profile(ctx, scale) == "pretrained" else judge.check
        record(
            _metric(ctx, "train_wall_s", scale),
            data["wall_s"],
            **where,
            startup_s=data["startup_s"],
            run_s=data["run_s"],
        )


def _mfu_pct(ctx: Ctx, record: RankRecord) -> float | str:
    """Model FLOPs per second over the SKU's dense BF16 peak (its datasheet figure in the catalogue)."""
    sku = ctx.judge.sku(record.node)
    peak = ctx.judge.datasheet(sku, "bf16_dense_tflops")
    tflops = record.data.get("model_tflops_per_s")
    if peak is None:
        raise MeasurementError(
            f"cannot compute MFU on SKU {sku}: no datasheet bf16_dense_tflops (add it under skus.{sku} in a site file)",
            nodes=(record.node,),
        )
    if tflops is None:
        raise MeasurementError(f"{record.node} rank {record.rank}: no timed steps, no MFU", nodes=(record.node,))
    return round(100 * float(tflops) / peak, 2)


def _mfu_extra(data: dict[str, Any]) -> dict[str, Any]:
    flops = data.get("model_flops") or {}
    return {
        "tokens_per_s": round(float(data["tokens_per_s"]), 1),
        "model_tflops_per_s": data.get("model_tflops_per_s"),
        "flops_per_token": flops.get("flops_per_token"),
        "tokens_per_step": data.get("tokens_per_step"),
        "precision": data.get("precision"),
        "grad_ckpt": data.get("grad_ckpt"),
        "power_w": data.get("power_w"),
    }


def _check_losses(ctx: Ctx, data: dict[str, Any], where: dict[str, Any], scale: Scale) -> None:
    """Loss figures of one run: no NaN/inf, final train and eval loss, steps to loss 0.5, no rebound."""
    judge = ctx.judge
    losses = [float(v) for v in data["losses"]]
    judge.check("train_nonfinite_steps", data["nonfinite_steps"], **where)
    judge.check(
        _metric(ctx, "train_loss_final", scale),
        data["train_loss_final"],
        **where,
        steps=data["steps_done"],
        curve=curve_points(losses),
    )
    judge.check(_metric(ctx, "train_eval_loss", scale), data["eval_loss_final"], **where)
    reached = steps_to_target(losses, TARGET_LOSS)
    never = f"not reached in {len(losses)} steps"
    judge.check(_metric(ctx, "train_steps_to_target", scale), reached or never, **where, target=TARGET_LOSS)
    judge.check("train_loss_rebound", loss_rebound(losses), **where)


def _check_lifecycle(ctx: Ctx, data0: dict[str, Any], node0: str, run: str, scale: Scale) -> None:
    """The seeds' lifecycle (rank 0): original kept, reload reproduces eval, base vs fine-tuned."""
    judge = ctx.judge
    if data0.get("history_json"):
        paths = artifacts(Path(data0["history_json"]).parent, title=run, target=TARGET_LOSS)
        _attach(paths, run)
        print(f"{run}: report files " + ", ".join(str(p) for p in paths))
    if "lifecycle_error" in data0:  # an ERROR, unless a check failed (a NaN loss that stopped training)
        judge.unreadable("train_original_kept", data0["lifecycle_error"], node=node0)
        return
    judge.check("train_original_kept", int(bool(data0["original_kept"])), node=node0)
    judge.check("train_reload_eval_delta", round(data0["reload_eval_delta"], 6), node=node0)
    base, tuned = data0["base_perplexity"], data0["finetuned_perplexity"]
    pct = data0["perplexity_reduction_pct"]
    finite = [v for v in (base, tuned, pct) if isinstance(v, (int, float)) and math.isfinite(v)]
    # a perplexity that is not finite leaves no reduction to speak of: the check fails and says which
    reduction = round(pct, 2) if len(finite) == 3 else f"undefined: base perplexity {base}, fine-tuned {tuned}"
    judge.check(
        _metric(ctx, "train_ppl_reduction_pct", scale),
        reduction,
        node=node0,
        base_perplexity=base,
        finetuned_perplexity=tuned,
    )
    # decode speed is judged where the model's size is known (the built-in 7B: measured per SKU); a
    # checkpoint of any size, and the small model, whose decode only times kernel launches, report it
    judged = _profile(ctx, scale) == "scale"
    record = judge.check if judged else judge.info
    for model in ("base", "finetuned"):
        for name, key in (
            (f"train_gen_tokens_per_s_{model}", "gen_tokens_per_s"),
            (f"train_ttft_ms_{model}", "ttft_ms"),
        ):
            record(_metric(ctx, name, scale) if judged else name, data0[f"{model}_{key}"], node=node0)


def _attach(paths: list[Path], run: str) -> None:
    """Loss curve, comparison and history into the Allure report when allure-pytest is there."""
    try:
        import allure
    except ImportError:
        return
    kinds = {".png": allure.attachment_type.PNG, ".json": allure.attachment_type.JSON}
    for path in paths:
        allure.attach.file(str(path), name=f"{run}: {path.name}", attachment_type=kinds.get(path.suffix))


def _check_run(strategy: str, scale: Scale, ctx: Ctx) -> None:
    judge = ctx.judge
    result = _finetune(ctx.cluster, ctx.settings, ctx.rootdir, strategy, scale)
    _launch_figures(strategy, scale, ctx)
    records = result.records
    rank0 = records[0]
    node0 = rank0.node
    data0 = rank0.data
    gpu_run = scale.gpus_per_task > 0
    for record in records:
        if record.world_size != scale.ranks:
            raise MeasurementError(
                f"{record.node} rank {record.rank}: launched as world size {record.world_size}, not {scale.ranks}",
                nodes=(record.node,),
            )
        where = {"node": record.node, "gpu": _label(record)}
        judge.expect(
            "train_steps_agree", record.data["steps_done"], data0["steps_done"], **where, task_rank=record.rank
        )
        if gpu_run:
            judge.expect("train_device", record.data["device"], "cuda", **where, task_rank=record.rank)

    # per rank: throughput, utilisation, memory
    for record in records:
        where = {"node": record.node, "gpu": _label(record)}
        _check_speed(ctx, scale, strategy, record, where)
        judge.info("train_peak_mem_gib", record.data["peak_mem_gib"], **where, task_rank=record.rank)
        if gpu_run:
            judge.check("train_gpu_util_pct", record.data["util_pct"], **where, samples=record.data["util_samples"])
    if gpu_run or _profile(ctx, scale) == "small":
        judge.stragglers(_speed_metric(ctx, scale, strategy))

    # the run: loss, stability, wall time
    _check_losses(ctx, data0, {"node": node0}, scale)
    if _profile(ctx, scale) == "pretrained":  # a checkpoint's wall time depends on its size: not judged
        judge.info(
            "train_pretrained_wall_s", data0["wall_s"], node=node0, startup_s=data0["startup_s"], run_s=data0["run_s"]
        )
    else:
        _check_run_wall(ctx, scale, data0, node0, result.duration_s)
    _check_strategy(ctx, strategy, scale, records, gpu_run, result.duration_s)


def _check_run_wall(ctx: Ctx, scale: Scale, data0: dict[str, Any], node0: str, step_s: float) -> None:
    """The step trained several strategies after one start-up; a strategy's wall time is what it would
    take launched alone: that start-up plus its own training and lifecycle (measured by the probe)."""
    ctx.judge.check(
        _metric(ctx, "train_wall_s", scale),
        data0["wall_s"],
        node=node0,
        startup_s=data0["startup_s"],
        run_s=data0["run_s"],
        lifecycle_s=data0.get("lifecycle_s"),
        step_s=round(step_s, 2),
    )


def _check_strategy(
    ctx: Ctx, strategy: str, scale: Scale, records: list[RankRecord], gpu_run: bool, step_s: float
) -> None:
    """DDP replicas identical; FSDP shards and saves memory against DDP of the same shape; the lifecycle."""
    judge = ctx.judge
    data0, node0 = records[0].data, records[0].node
    # strategy: DDP replicas identical; FSDP shards and saves memory against DDP of the same shape
    if strategy == "ddp":
        odd = [r.rank for r in records if r.data["checksum"] != data0["checksum"]]
        judge.check("train_replica_mismatch_ranks", len(odd), node=node0, ranks=odd)
    reference_error: MeasurementError | None = None
    if strategy == "fsdp" and scale.ranks > 1:
        for record in records:
            share = record.data["param_bytes_local"] / (record.data["param_bytes_total"] / scale.ranks)
            judge.check("train_fsdp_shard_ratio", round(share, 4), node=record.node, gpu=_label(record))
        if gpu_run:
            try:
                ddp = _finetune(ctx.cluster, ctx.settings, ctx.rootdir, "ddp", scale)
            except MeasurementError as exc:
                reference_error = exc
            else:
                _memory_saving(records, ddp.records, scale.ranks, judge)

    run = scale.folder(strategy)
    print_summary(run, step_s, records, _label)
    _check_lifecycle(ctx, data0, node0, f"{run} ({scale.name})", scale)
    if reference_error is not None:
        raise MeasurementError(f"FSDP memory could not be compared: the DDP run failed: {reference_error}")


def _memory_saving(fsdp: list[RankRecord], ddp: list[RankRecord], world: int, judge: Any) -> None:
    """Per rank: (DDP peak - FSDP peak) / the sharding saving expected from the model state.

    Model state per DDP rank = all parameters + grads and two Adam moments of the trainable ones (in the
    adapters' dtype: fp32 for the small model, bf16 on the 7B-class fast path);
    FSDP holds 1/world of it, so it should save (1 - 1/world) of that. Activations are the same in both
    runs (same per-rank batch, same autocast), so they cancel out of the difference.
    """
    by_rank = {r.rank: r for r in ddp}
    for record in fsdp:
        ref = by_rank[record.rank]
        adapter_bytes = 2 if (ref.data.get("precision") or {}).get("adapters") == "bf16" else 4
        state = ref.data["param_bytes_total"] + 3 * adapter_bytes * ref.data["trainable_params"]
        expected = (1 - 1 / world) * state / GIB
        saved = ref.data["peak_mem_gib"] - record.data["peak_mem_gib"]
        judge.check(
            "train_fsdp_mem_saving_ratio",
            round(saved / expected, 3),
            node=record.node,
            gpu=_label(record),
            ddp_peak_gib=ref.data["peak_mem_gib"],
            fsdp_peak_gib=record.data["peak_mem_gib"],
            expected_saving_gib=round(expected, 3),
        )


@pytest.fixture()
def ctx(cluster, settings, judge, request) -> Ctx:
    return Ctx(cluster, settings, judge, Path(request.config.rootpath))


#: what every fine-tune run is judged on (``@pytest.mark.judges``: the metrics each test declares)
_LOSS_FIGURES = (
    "train_nonfinite_steps",
    "train_loss_final",
    "train_eval_loss",
    "train_steps_to_target",
    "train_loss_rebound",
    "train_wall_s",
)
_LIFECYCLE = ("train_original_kept", "train_reload_eval_delta", "train_ppl_reduction_pct")


def _collective_figures(scope: str) -> tuple[str, ...]:
    return (
        f"train_tokens_per_s_per_gpu_ddp_{scope}",
        f"train_tokens_per_s_per_gpu_fsdp_{scope}",
        "train_replica_mismatch_ranks",
        "train_fsdp_shard_ratio",
        "train_fsdp_mem_saving_ratio",
        "train_gpu_util_pct",
    )


PROFILES = ["default", "scale"]
#: the real-scale run's extra figures: MFU, decode speed of the 7B (the small run's tokens/s and decode
#: are its own; a --model-path run is judged by MFU, never by the small model's tokens/s)
_SCALE_LOSS = ("train_scale_loss_final", "train_scale_eval_loss", "train_scale_steps_to_target", "train_scale_wall_s")
_SCALE_SOLO = ("train_mfu_pct", *_SCALE_LOSS)
_SCALE_LIFECYCLE = (
    "train_scale_ppl_reduction_pct",
    "train_scale_gen_tokens_per_s_base",
    "train_scale_gen_tokens_per_s_finetuned",
    "train_scale_ttft_ms_base",
    "train_scale_ttft_ms_finetuned",
)


def _scale_collective(scope: str) -> tuple[str, ...]:
    return (f"train_mfu_pct_ddp_{scope}", f"train_mfu_pct_fsdp_{scope}", *_SCALE_LOSS, *_SCALE_LIFECYCLE)


@pytest.mark.judges(
    *_LOSS_FIGURES, "train_tokens_per_s_per_gpu_solo", "train_gpu_util_pct", *_SCALE_SOLO, *_SCALE_LIFECYCLE
)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_each_gpu(node, profile, ctx):
    """Every GPU of the node fine-tuned alone, all at once (gloo ranks on a CPU node), each judged by itself:
    the built-in small model (or the --model-path checkpoint), and the built-in 7B-class model at the
    GPU's speed (``scale``: GPUs with the memory for it)."""
    _check_solo(_profiled(ctx, "node", (node,), profile), ctx)


@pytest.mark.judges(
    *_LOSS_FIGURES, *_LIFECYCLE, *_collective_figures("node"), *_scale_collective("node"), gpus="collective"
)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_node(node, profile, strategy, ctx):
    """Every GPU of the node, one rank each (NVLink/NVSwitch collectives under real training)."""
    if ctx.cluster.gpus_on(node) == 1:
        # declared by the cluster: DDP and FSDP across one rank are the solo run under another name
        pytest.skip(f"not applicable: one GPU on {node}")
    _check_run(strategy, _profiled(ctx, "node", (node,), profile), ctx)


@pytest.mark.judges("train_trajectory_rel_diff", "train_trajectory_baseline_rel_diff")
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_agreement(profile, ctx, fingerprints):
    """Every GPU of one SKU and software stack, across all nodes, trains the same loss curve bit for bit,
    and the curve it trained in the ``--baseline`` run (``gpuaccept.judging.trajectory``). The 7B-class
    run is deterministic too (deterministic kernels, docs/measurements.md), so it is held to the same.

    Reads each node's shared fine-tune launch (the runs ``test_finetune_each_gpu`` judges; no extra
    training in one pytest process). A node whose launch failed is named; the others are still judged.
    """
    runs: list[Trajectory] = []
    failed: list[str] = []
    judged_as = "small"
    for node in ctx.cluster.nodes:
        scale = _profiled(ctx, "node", (node,), profile)
        judged_as = _profile(ctx, scale)
        try:
            result = _finetune(ctx.cluster, ctx.settings, ctx.rootdir, "solo", scale)
        except MeasurementError as exc:  # that node is named; the others are still judged
            failed.append(node)
            ctx.judge.unreadable("train_trajectory_rel_diff", f"trajectory not compared: {exc}", node=node)
            continue
        for record in result.records:
            losses = tuple(float(v) for v in record.data["losses"])
            runs.append(Trajectory(record.node, _label(record), losses, record.data.get("checksum"), judged_as))
            if record.data.get("test_hook"):
                print(f"TEST HOOK on {record.node} {_label(record)}: {record.data['test_hook']}")
    if not runs:
        return  # every node's launch failed: each is recorded unreadable above
    prints = {node: fingerprints.get(node) for node in sorted({r.node for r in runs})}
    judged = judge_fleet(ctx.judge, runs, prints, profile=judged_as)
    if not judged and not failed:
        alone = ", ".join(sorted({f"{r.where}" for r in runs}))
        pytest.skip(
            f"not applicable: no other GPU of the same SKU and stack to agree with ({alone}) and no trajectory "
            "of it in a --baseline run"
        )


@pytest.mark.judges(
    *_LOSS_FIGURES, *_LIFECYCLE, *_collective_figures("multinode"), *_scale_collective("multinode"), nodes=2
)
@pytest.mark.multinode
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_multinode(profile, strategy, ctx):
    """Every GPU of every allocated node (the fabric under real training, as the seeds' 16-GPU run)."""
    nodes = tuple(ctx.cluster.nodes)
    if len(nodes) < 2:
        pytest.skip("single-node allocation: a multi-node fine-tune needs at least 2 nodes")
    _check_run(strategy, _profiled(ctx, "multinode", nodes, profile), ctx)
