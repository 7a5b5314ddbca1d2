"""Training: LoRA fine-tunes that test the GPU: on every GPU alone, across a node, across all nodes.

One launch of the ``finetune`` probe per node (one rank per GPU; on CPU nodes a few gloo ranks) pays
start-up once and trains three times: every GPU alone and at the same time (``solo``, judged per GPU by
``test_finetune_each_gpu``), then DDP and then FSDP across the node's GPUs (``test_finetune_node``).
On a one-GPU node DDP and FSDP do not apply (skipped, not passed on the solo curve); the GPU's own run
then saves and gets the lifecycle. The multi-node launch trains DDP and FSDP across every allocated node.

``test_finetune_agreement`` holds every GPU's own run against every other GPU of its SKU and software
stack, across all nodes, and against a ``--baseline`` run: the built-in fine-tune is bitwise
deterministic, so a GPU whose loss trajectory departs computes wrong even when its loss still falls
(``gpuaccept.judging.trajectory``).

Two models, each judged by its own limits (``gpuaccept.verdicts.training``, the area's one home): the
built-in small model (``default``; or the ``--model-path`` checkpoint, by the fine-tuning contract) and the
built-in 7B-class model at the GPU's speed (``scale``; GPUs with the memory for it), judged by MFU.
Every run is judged on its losses, lockstep, speed, utilisation, DDP replicas, FSDP shards and memory,
and the lifecycle (original kept, reload, base against tuned); loss curve and comparison JSON go to the report.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.finetune import RankRun
from gpuaccept.dispatch.result import ProbeResult, stage_records
from gpuaccept.errors import MeasurementError, ProbeTimeout
from gpuaccept.judging.trajectory import Trajectory
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.report import attach
from gpuaccept.report.charts.loss import artifacts
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.training.finetune_launch import (
    PROFILES,
    STRATEGIES,
    FinetuneLaunch,
    Profile,
    Scope,
    hang_s,
    launch_absent,
    not_applicable,
    plan_launch,
    stage_runs,
    strategy_records,
)
from gpuaccept.training.plan import FinetunePlan, LaunchShape, Store
from gpuaccept.training.report import TARGET_LOSS, print_summary
from gpuaccept.verdicts.inference import AGREEMENT, SERVING, Served
from gpuaccept.verdicts.launch_time import RankStand, judge_unfinished_ranks, stands
from gpuaccept.verdicts.resume import RESUME_METRICS, checkpoint_filesystem, judge_resume
from gpuaccept.verdicts.served_weights import (
    SERVED_METRICS,
    judge_served_weights,
    models_filesystem,
    scratch_filesystem,
)
from gpuaccept.verdicts.storage import per_node_figure
from gpuaccept.verdicts.training import (
    LIFECYCLE,
    LOSS_FIGURES,
    SCALE_LIFECYCLE,
    SCALE_SOLO,
    collective_figures,
    judge_each_gpu,
    judge_fleet_agreement,
    judge_not_trained,
    judge_run,
    label,
    record_launch,
    scale_collective,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.training]

#: this run's folder on the site's checkpoint filesystem: a checkpoint an earlier run left there is not this run's
RUN_TOKEN = uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Ctx:
    """The session objects a fine-tune case needs, bundled once per test."""

    cluster: Any
    settings: Any
    judge: Any
    rootdir: Path
    storage: Any


def _planned(ctx: Ctx, scope: Scope, nodes: tuple[str, ...], profile: Profile) -> FinetuneLaunch:
    """The launch of ``profile`` on ``nodes`` (``gpuaccept.training.finetune_launch``); skipped where it does
    not apply."""
    gpus = min(ctx.cluster.gpus_on(n) for n in nodes)
    launch = plan_launch(scope, nodes, gpus, profile, ctx.settings.model_path)
    if why := launch_absent(launch, ctx.settings.model_path):
        pytest.skip(why)
    return launch


def _shape(launch: FinetuneLaunch) -> LaunchShape:
    """Whose limits judge the launch, as the judges read it."""
    return LaunchShape(launch.judged_as, launch.scope, launch.ranks, launch.gpu_run)


def _plan(ctx: Ctx, launch: FinetuneLaunch) -> FinetunePlan:
    """The launch planned at the floors of its first node's SKU, its merged weights at the declared filesystems'
    contracted rates (``gpuaccept.training.plan``)."""
    return FinetunePlan.of(
        ctx.judge,
        launch,
        ctx.settings.model_path,
        _store(models_filesystem(ctx.storage)),
        _store(scratch_filesystem(ctx.storage)),
    )


def _store(declared: tuple[str, Filesystem] | None) -> Store | None:
    return Store(declared[0], *(per_node_figure(declared[1], rw) for rw in ("write", "read"))) if declared else None


def _launch(ctx: Ctx, launch: FinetuneLaunch) -> ProbeResult:
    """One launch per shape trains every strategy of the shape in one process group (start-up paid once);
    every case of the shape reads it (``cluster.run_shared``), under its plan's limit."""
    plan = _plan(ctx, launch)
    args = launch.args(
        ctx.rootdir / "reports",
        model_path=ctx.settings.model_path,
        dataset=ctx.settings.dataset,
        solo_floor=plan.solo_floor,
        # the site's checkpoint, models and scratch filesystems, each where declared (else the run folder)
        checkpoints=_run_folder(checkpoint_filesystem(ctx.storage)),
        models=_run_folder(models_filesystem(ctx.storage)),
        scratch=_run_folder(scratch_filesystem(ctx.storage)),
    )
    return ctx.cluster.run_shared(
        FINETUNE,
        nodes=launch.nodes,
        tasks_per_node=launch.tasks_per_node,
        gpus_per_task=launch.gpus_per_task,
        args=args,
        exclusive=True,
        limit=plan.limit,
    )


def _run_folder(declared: tuple[str, Filesystem] | None) -> str | None:
    """This run's folder on a declared filesystem (None: not declared)."""
    return f"{declared[1].path}/gpuaccept-finetune-{RUN_TOKEN}" if declared else None


@dataclass(frozen=True)
class Part:
    """One strategy's share of a launch: the records of the ranks that finished it, and, when the launch was
    stopped before it ended, where each other rank stood and why it was stopped."""

    result: ProbeResult
    runs: list[RankRun]
    unfinished: dict[tuple[str, int], RankStand]
    why: str = ""


def _finetune(ctx: Ctx, strategy: str, launch: FinetuneLaunch) -> Part:
    """The launch's result as seen by one strategy: each rank's record holds that strategy's figures. A launch
    stopped at its limit (or earlier, by its ranks' progress) keeps what its ranks sent as each strategy
    finished; the ranks that had not finished this one are handed back with where they stood."""
    try:
        result = _launch(ctx, launch)
    except ProbeTimeout as exc:
        stopped = getattr(exc, "result", None)
        if stopped is None:
            raise
        records = stage_records(FINETUNE, stopped.stdout, strategy)
        done = {(r.node, r.rank) for r in records}
        everyone = stands(stopped.stdout, stopped.ended_at, hang_s(ctx.cluster.timeout_rule, _plan(ctx, launch).limit))
        left = {key: stand for key, stand in everyone.items() if key not in done}
        return Part(replace(stopped, records=records), stage_runs(records), left, str(exc))
    if why := not_applicable(result.records):  # declared by the GPUs themselves (memory too small for a 7B)
        pytest.skip(why)
    return Part(result, strategy_records(result.records, strategy), {})


def _unfinished(ctx: Ctx, part: Part, strategy: str, launch: FinetuneLaunch) -> None:
    """Every rank that had not finished ``strategy`` when its launch was stopped: FAILED by its progress bound
    where that proves it below the floor, else unreadable naming where it stood."""
    judge_unfinished_ranks(ctx.judge, _shape(launch), strategy, part.unfinished, ctx.settings.model_path, part.why)


def _launch_figures(strategy: str, launch: FinetuneLaunch, ctx: Ctx) -> None:
    """The launch's wall time and where it went (start-up, set-up, warm-up, timed steps, checkpoints,
    lifecycle, teardown), recorded once per launch by the case of its first strategy."""
    if not launch.first(strategy):
        return
    try:
        result = _launch(ctx, launch)
    except MeasurementError:  # a launch that did not end: its step's limit, wall and ratio are on the record
        return
    record_launch(ctx.judge, result.records, result.duration_s, launch.strategies)


def _report(runs: list[RankRun], run: str, step_s: float) -> None:
    """The run's lines in the captured output, and its loss curve and comparison in the report."""
    print_summary(run, step_s, runs, label)
    lifecycle = runs[0].trained["lifecycle"]
    if lifecycle is not None:
        paths = artifacts(Path(lifecycle["history_json"]).parent, title=run, target=TARGET_LOSS)
        for path in paths:  # the loss curve, comparison and history, through the report's attachments
            if path.suffix == ".png":
                attach.png(path.read_bytes(), f"{run}: {path.name}")
            else:
                attach.text(path.read_text(), f"{run}: {path.name}")
        print(f"{run}: report files " + ", ".join(str(p) for p in paths))


def _check_solo(launch: FinetuneLaunch, ctx: Ctx) -> None:
    """Every GPU's own fine-tune, measured at the same time on every GPU, one rank per GPU: no GPU is
    shared, and the node's GPUs run under the power and cooling they share in real use."""
    part = _finetune(ctx, "solo", launch)
    result = part.result
    _launch_figures("solo", launch, ctx)
    _unfinished(ctx, part, "solo", launch)
    if not part.runs:
        return
    judge_each_gpu(ctx.judge, _shape(launch), part.runs, part.why)
    if part.why:
        return
    rank0 = min(part.runs, key=lambda r: r.rank)  # rank 0 saved its own run's checkpoint and resumed it
    judge_resume(rank0.trained["checkpoint"], checkpoint_filesystem(ctx.storage), ctx.judge, rank0.node)
    models, scratch = models_filesystem(ctx.storage), scratch_filesystem(ctx.storage)
    judge_served_weights(rank0.trained["served_weights"], models, scratch, ctx.judge, rank0.node)
    if launch.ranks == 1:  # a one-GPU node: its own run is the run with the lifecycle (DDP/FSDP do not apply)
        _report(part.runs, launch.folder("solo"), result.duration_s)
    else:
        print_summary(launch.folder("solo"), result.duration_s, part.runs, label)


def _check_run(strategy: str, launch: FinetuneLaunch, ctx: Ctx) -> None:
    """DDP or FSDP across the launch's ranks; FSDP's memory is held against DDP's of the same shape."""
    part = _finetune(ctx, strategy, launch)
    result = part.result
    _launch_figures(strategy, launch, ctx)
    _unfinished(ctx, part, strategy, launch)
    if part.unfinished or not part.runs:  # a run across ranks is judged whole or not at all
        return
    if judge_not_trained(ctx.judge, _shape(launch), strategy, part.runs):
        return  # a GPU's own run was below its floor: this strategy was not trained, and why
    ddp: list[RankRun] | MeasurementError | None = None
    if launch.holds_fsdp_to_ddp(strategy):
        earlier = _finetune(ctx, "ddp", launch)
        ddp = earlier.runs if not earlier.unfinished else MeasurementError(f"DDP did not finish: {part.why}")
    _report(part.runs, f"{launch.folder(strategy)} ({launch.scope})", result.duration_s)
    judge_run(ctx.judge, _shape(launch), strategy, part.runs, result.duration_s, ddp, part.why)


@dataclass
class SoloRuns:
    """What ``test_finetune_agreement`` holds against each other: every GPU's own run on every node."""

    runs: list[Trajectory] = field(default_factory=list)
    served: list[Served] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unmeasured: dict[str, str] = field(default_factory=dict)
    judged_as: str = "small"


def _solo_runs(ctx: Ctx, profile: Profile) -> SoloRuns:
    """Every node's GPUs' own runs, read from each node's shared launch (the runs ``test_finetune_each_gpu``
    judges; no extra training in one pytest process): their loss trajectories, what each GPU served, the
    nodes whose launch failed or stopped, and why a launch could not be read."""
    out = SoloRuns()
    for node in ctx.cluster.nodes:
        launch = _planned(ctx, "node", (node,), profile)
        out.judged_as = launch.judged_as
        try:
            part = _finetune(ctx, "solo", launch)
        except MeasurementError as exc:  # that node is named; the others are still judged
            out.failed.append(node)
            out.unmeasured[node] = str(exc)
            continue
        if part.unfinished:  # the GPUs that finished still agree or not; the others are named by their test
            out.failed.append(node)
        for run in part.runs:
            data = run.trained
            out.runs.append(Trajectory(run.node, label(run), tuple(data["losses"]), data["checksum"], launch.judged_as))
            serving = data["serving"]
            if serving is not None and serving["outcome"] == "served":  # 7B-class on GPUs: each GPU served its own
                out.served.append(Served.of(serving, run.node, label(run)))
            if data["test_hook"]:
                print(f"TEST HOOK on {run.node} {label(run)}: {data['test_hook']}")
    return out


@pytest.fixture()
def ctx(cluster, settings, judge, request, thresholds) -> Ctx:
    return Ctx(cluster, settings, judge, Path(request.config.rootpath), thresholds.storage)


@pytest.mark.judges(
    *LOSS_FIGURES,
    "train_tokens_per_s_per_gpu_solo",
    "train_gpu_util_pct",
    *SCALE_SOLO,
    *SCALE_LIFECYCLE,
    *SERVING,
    *RESUME_METRICS,
    *SERVED_METRICS,
)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_each_gpu(node, profile, ctx):
    """Every GPU of the node fine-tuned alone, all at once (gloo ranks on a CPU node), each judged by itself:
    the built-in small model (or the --model-path checkpoint), and the built-in 7B-class model at the
    GPU's speed (``scale``: GPUs with the memory for it)."""
    _check_solo(_planned(ctx, "node", (node,), profile), ctx)


@pytest.mark.judges(
    *LOSS_FIGURES, *LIFECYCLE, *collective_figures("node"), *scale_collective("node"), gpus="collective"
)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_node(node, profile, strategy, ctx):
    """Every GPU of the node, one rank each (NVLink/NVSwitch collectives under real training)."""
    if ctx.cluster.gpus_on(node) == 1:
        # declared by the cluster: DDP and FSDP across one rank are the solo run under another name
        pytest.skip(f"not applicable: one GPU on {node}")
    _check_run(strategy, _planned(ctx, "node", (node,), profile), ctx)


@pytest.mark.judges("train_trajectory_rel_diff", "train_trajectory_baseline_rel_diff", *AGREEMENT)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_agreement(profile, ctx, fingerprints):
    """Every GPU of one SKU and software stack, across all nodes, trains the same loss curve bit for bit,
    and the curve it trained in the ``--baseline`` run (``gpuaccept.judging.trajectory``). The 7B-class
    run is deterministic too (deterministic kernels, docs/measurements.md), so it is held to the same, and
    each GPU then serves the bit-identical weights it trained: the same greedy tokens and logits checksum
    (``gpuaccept.verdicts.inference.judge_agreement``).

    Reads each node's shared fine-tune launch (the runs ``test_finetune_each_gpu`` judges; no extra
    training in one pytest process). A node whose launch failed is named; the others are still judged.
    """
    solo = _solo_runs(ctx, profile)
    prints = {node: fingerprints.get(node) for node in sorted({r.node for r in solo.runs})}
    judged = judge_fleet_agreement(ctx.judge, solo.runs, solo.served, prints, solo.judged_as, solo.unmeasured)
    if not solo.runs:
        return  # every node's launch failed: each is recorded unreadable
    if not judged and not solo.failed:
        alone = ", ".join(sorted({f"{r.where}" for r in solo.runs}))
        pytest.skip(
            f"not applicable: no other GPU of the same SKU and stack to agree with ({alone}) and no trajectory "
            "of it in a --baseline run"
        )


@pytest.mark.judges(
    *LOSS_FIGURES, *LIFECYCLE, *collective_figures("multinode"), *scale_collective("multinode"), nodes=2
)
@pytest.mark.multinode
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_multinode(profile, strategy, ctx):
    """Every GPU of every allocated node (the fabric under real training, as a multi-node job trains)."""
    # on the nodes still alive; a node lost during the launch: launched again on the survivors (the
    # launch is shared by DDP and FSDP, keyed by its nodes), fewer than 2 left: skipped naming the loss
    launch = ctx.cluster.across_nodes(
        lambda live: _launched(ctx, _planned(ctx, "multinode", tuple(live), profile)),
        what="a multi-node fine-tune",
    )
    _check_run(strategy, launch, ctx)


def _launched(ctx: Ctx, launch: FinetuneLaunch) -> FinetuneLaunch:
    """The launch once it has run (a lost node raises here, inside ``across_nodes``)."""
    _launch(ctx, launch)
    return launch
