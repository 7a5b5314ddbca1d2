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
        """The launch's report folder (``2r-node1``); a strategy's run lies in its subfolder."""
        where = self.nodes[0] if len(self.nodes) == 1 else f"{len(self.nodes)}nodes"
        name = f"{self.ranks}r-{where}"
        return f"{strategy}-{name}" if strategy else name

    def out(self) -> str:
        """The launch's ``--out``: a node launch names its node as ``{node}`` (the probe fills it in), so
        every node's launch has the same arguments and one fan-out step serves them all."""
        return f"{self.ranks}r-{{node}}" if self.name == "node" else self.folder()


@dataclass(frozen=True)
class Ctx:
    """The session objects a fine-tune case needs, bundled once per test."""

    cluster: Any
    settings: Any
    judge: Any
    rootdir: Path


def _scale(cluster: Any, name: str, nodes: tuple[str, ...]) -> Scale:
    gpus = min(cluster.gpus_on(n) for n in nodes)
    return Scale(name, nodes, gpus or CPU_RANKS_PER_NODE, 1 if gpus else 0)


def _launch(cluster: Any, settings: Any, rootdir: Path, scale: Scale) -> ProbeResult:
    """One launch per shape trains every strategy of the shape in one process group (start-up paid once);
    every case of the shape reads it (``cluster.run_shared``)."""
    args = [
        "--strategy",
        ",".join(scale.strategies),
        "--out",
        str(rootdir / "reports" / "training" / scale.out()),
    ]
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
        _check_losses(ctx, data, where)
        judge.check("train_tokens_per_s_per_gpu_solo", data["tokens_per_s"], **where, timed_s=data["timed_s"])
        judge.check("train_wall_s", data["wall_s"], **where, startup_s=data["startup_s"], run_s=data["run_s"])
        judge.info("train_peak_mem_gib", data["peak_mem_gib"], **where)
    if gpu_run:
        # GPUs against their siblings; gloo ranks of a CPU node share its cores with each other and with
        # whatever else runs there, so their rates say nothing about one another
        judge.stragglers("train_tokens_per_s_per_gpu_solo")
    print_summary(scale.folder("solo"), result.duration_s, result.records, _label)
    first = result.records[0]
    if scale.ranks == 1:  # a one-GPU node: its own run is the run with the lifecycle (DDP/FSDP do not apply)
        _check_lifecycle(ctx, first.data, first.node, scale.folder("solo"))


def _metric(ctx: Ctx, name: str) -> str:
    """The built-in model's limits are measured on it; a ``--model-path`` run is judged by the seeds'
    contract (``train_pretrained_*``), which belongs to a pretrained 7B model."""
    return name.replace("train_", "train_pretrained_", 1) if ctx.settings.model_path else name


def _check_losses(ctx: Ctx, data: dict[str, Any], where: dict[str, Any]) -> None:
    """Loss figures of one run: no NaN/inf, final train and eval loss, steps to loss 0.5, no rebound."""
    judge = ctx.judge
    losses = [float(v) for v in data["losses"]]
    judge.check("train_nonfinite_steps", data["nonfinite_steps"], **where)
    judge.check(
        _metric(ctx, "train_loss_final"),
        data["train_loss_final"],
        **where,
        steps=data["steps_done"],
        curve=curve_points(losses),
    )
    judge.check(_metric(ctx, "train_eval_loss"), data["eval_loss_final"], **where)
    reached = steps_to_target(losses, TARGET_LOSS)
    never = f"not reached in {len(losses)} steps"
    judge.check(_metric(ctx, "train_steps_to_target"), reached or never, **where, target=TARGET_LOSS)
    judge.check("train_loss_rebound", loss_rebound(losses), **where)


def _check_lifecycle(ctx: Ctx, data0: dict[str, Any], node0: str, run: str) -> None:
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
        _metric(ctx, "train_ppl_reduction_pct"),
        reduction,
        node=node0,
        base_perplexity=base,
        finetuned_perplexity=tuned,
    )
    for model in ("base", "finetuned"):
        judge.info(f"train_gen_tokens_per_s_{model}", data0[f"{model}_gen_tokens_per_s"], node=node0)
        judge.info(f"train_ttft_ms_{model}", data0[f"{model}_ttft_ms"], node=node0)


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
    tps_metric = f"train_tokens_per_s_per_gpu_{strategy}_{scale.name}"
    for record in records:
        where = {"node": record.node, "gpu": _label(record)}
        judge.check(tps_metric, record.data["tokens_per_s"], **where, task_rank=record.rank)
        judge.info("train_peak_mem_gib", record.data["peak_mem_gib"], **where, task_rank=record.rank)
        if gpu_run:
            judge.check("train_gpu_util_pct", record.data["util_pct"], **where, samples=record.data["util_samples"])
    judge.stragglers(tps_metric)

    # the run: loss, stability, wall time
    _check_losses(ctx, data0, {"node": node0})
    # The step trained both strategies after one start-up; a strategy's wall time is what it would take
    # launched alone: that start-up plus its own training and lifecycle (measured by the probe).
    judge.check(
        "train_wall_s",
        data0["wall_s"],
        node=node0,
        startup_s=data0["startup_s"],
        run_s=data0["run_s"],
        lifecycle_s=data0.get("lifecycle_s"),
        step_s=round(result.duration_s, 2),
    )

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
    print_summary(run, result.duration_s, result.records, _label)
    _check_lifecycle(ctx, data0, node0, f"{run} ({scale.name})")
    if reference_error is not None:
        raise MeasurementError(f"FSDP memory could not be compared: the DDP run failed: {reference_error}")


def _memory_saving(fsdp: list[RankRecord], ddp: list[RankRecord], world: int, judge: Any) -> None:
    """Per rank: (DDP peak - FSDP peak) / the sharding saving expected from the model state.

    Model state per DDP rank = all parameters + grads and two Adam moments of the trainable ones (fp32);
    FSDP holds 1/world of it, so it should save (1 - 1/world) of that. Activations are the same in both
    runs (same per-rank batch, same autocast), so they cancel out of the difference.
    """
    by_rank = {r.rank: r for r in ddp}
    for record in fsdp:
        ref = by_rank[record.rank]
        state = ref.data["param_bytes_total"] + 3 * 4 * ref.data["trainable_params"]
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


@pytest.mark.judges(*_LOSS_FIGURES, "train_tokens_per_s_per_gpu_solo", "train_gpu_util_pct")
def test_finetune_each_gpu(node, ctx):
    """Every GPU of the node fine-tuned alone, all at once (gloo ranks on a CPU node), each judged by itself."""
    _check_solo(_scale(ctx.cluster, "node", (node,)), ctx)


@pytest.mark.judges(*_LOSS_FIGURES, *_LIFECYCLE, *_collective_figures("node"), gpus="collective")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_finetune_node(node, strategy, ctx):
    """Every GPU of the node, one rank each (NVLink/NVSwitch collectives under real training)."""
    if ctx.cluster.gpus_on(node) == 1:
        # declared by the cluster: DDP and FSDP across one rank are the solo run under another name
        pytest.skip(f"not applicable: one GPU on {node}")
    _check_run(strategy, _scale(ctx.cluster, "node", (node,)), ctx)


@pytest.mark.judges("train_trajectory_rel_diff", "train_trajectory_baseline_rel_diff")
def test_finetune_agreement(ctx, fingerprints):
    """Every GPU of one SKU and software stack, across all nodes, trains the same loss curve bit for bit,
    and the curve it trained in the ``--baseline`` run (``gpuaccept.judging.trajectory``).

    Reads each node's shared fine-tune launch (the runs ``test_finetune_each_gpu`` judges; no extra
    training in one pytest process). A node whose launch failed is named; the others are still judged.
    """
    runs: list[Trajectory] = []
    failed: list[str] = []
    for node in ctx.cluster.nodes:
        try:
            result = _finetune(ctx.cluster, ctx.settings, ctx.rootdir, "solo", _scale(ctx.cluster, "node", (node,)))
        except MeasurementError as exc:  # that node is named; the others are still judged
            failed.append(node)
            ctx.judge.unreadable("train_trajectory_rel_diff", f"trajectory not compared: {exc}", node=node)
            continue
        for record in result.records:
            losses = tuple(float(v) for v in record.data["losses"])
            runs.append(Trajectory(record.node, _label(record), losses, record.data.get("checksum")))
            if record.data.get("test_hook"):
                print(f"TEST HOOK on {record.node} {_label(record)}: {record.data['test_hook']}")
    if not runs:
        return  # every node's launch failed: each is recorded unreadable above
    prints = {node: fingerprints.get(node) for node in sorted({r.node for r in runs})}
    judged = judge_fleet(ctx.judge, runs, prints)
    if not judged and not failed:
        alone = ", ".join(sorted({f"{r.where}" for r in runs}))
        pytest.skip(
            f"not applicable: no other GPU of the same SKU and stack to agree with ({alone}) and no trajectory "
            "of it in a --baseline run"
        )


@pytest.mark.judges(*_LOSS_FIGURES, *_LIFECYCLE, *_collective_figures("multinode"), nodes=2)
@pytest.mark.multinode
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_finetune_multinode(strategy, ctx):
    """Every GPU of every allocated node (the fabric under real training, as the seeds' 16-GPU run)."""
    nodes = tuple(ctx.cluster.nodes)
    if len(nodes) < 2:
        pytest.skip("single-node allocation: a multi-node fine-tune needs at least 2 nodes")
    _check_run(strategy, _scale(ctx.cluster, "multinode", nodes), ctx)
