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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.finetune import RankRun
from gpuaccept.dispatch.result import ProbeResult, stage_records
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.report import attach
from gpuaccept.report.charts.loss import artifacts
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.training.finetune_launch import (
    PROFILES,
    STRATEGIES,
    FinetuneLaunch,
    Part,
    Profile,
    Scope,
    launch_absent,
    launch_part,
    plan_launch,
)
from gpuaccept.training.plan import FinetunePlan
from gpuaccept.training.report import TARGET_LOSS, print_summary
from gpuaccept.verdicts.inference import AGREEMENT, SERVING
from gpuaccept.verdicts.resume import RESUME_METRICS, checkpoint_filesystem
from gpuaccept.verdicts.served_weights import SERVED_METRICS, models_filesystem, scratch_filesystem, stores
from gpuaccept.verdicts.training import (
    LIFECYCLE,
    LOSS_FIGURES,
    SCALE_LIFECYCLE,
    SCALE_SOLO,
    collective_figures,
    judge_run,
    label,
    record_launch,
    scale_collective,
)
from gpuaccept.verdicts.training_launch import SoloRuns, ddp_of, judge_across_ranks, judge_own_runs

pytestmark = [pytest.mark.acceptance, pytest.mark.training]


@pytest.fixture(scope="module")
def run_token() -> str:
    """This run's folder on the site's filesystems: a checkpoint an earlier run left there is not this run's."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Ctx:
    """The session objects a fine-tune case needs, bundled once per test."""

    cluster: Any
    settings: Any
    judge: Any
    rootdir: Path
    storage: Any
    token: str


@pytest.fixture()
def ctx(cluster, settings, judge, request, thresholds, run_token) -> Ctx:
    return Ctx(cluster, settings, judge, Path(request.config.rootpath), thresholds.storage, run_token)


def _planned(ctx: Ctx, scope: Scope, nodes: tuple[str, ...], profile: Profile) -> FinetuneLaunch:
    """The launch of ``profile`` on ``nodes`` (``training.finetune_launch``); skipped where it does not apply."""
    gpus = min(ctx.cluster.gpus_on(n) for n in nodes)
    launch = plan_launch(scope, nodes, gpus, profile, ctx.settings.model_path)
    if why := launch_absent(launch, ctx.settings.model_path):
        pytest.skip(why)
    return launch


def _args(ctx: Ctx, launch: FinetuneLaunch) -> list[str]:
    """The launch's arguments: its plan at the floors of its first node's SKU, its merged weights at the declared
    filesystems' contracted rates (``gpuaccept.training.plan``), from which the spec derives its limit; and the
    site's checkpoint, models and scratch filesystems, each where declared (else the run folder)."""
    plan = FinetunePlan.of(ctx.judge, launch, ctx.settings.model_path, *stores(ctx.storage))
    return launch.args(
        ctx.rootdir / "reports",
        model_path=ctx.settings.model_path,
        dataset=ctx.settings.dataset,
        plan=plan.launch_plan,
        checkpoints=_run_folder(ctx, checkpoint_filesystem(ctx.storage)),
        models=_run_folder(ctx, models_filesystem(ctx.storage)),
        scratch=_run_folder(ctx, scratch_filesystem(ctx.storage)),
    )


def _run_folder(ctx: Ctx, declared: tuple[str, Filesystem] | None) -> str | None:
    """This run's folder on a declared filesystem (None: not declared)."""
    return f"{declared[1].path}/gpuaccept-finetune-{ctx.token}" if declared else None


def _launch(ctx: Ctx, launch: FinetuneLaunch) -> ProbeResult:
    """One launch per shape trains every strategy of the shape in one process group (start-up paid once);
    every case of the shape reads it (``cluster.run_shared``)."""
    args = _args(ctx, launch)
    options = {"tasks_per_node": launch.tasks_per_node, "gpus_per_task": launch.gpus_per_task}
    return ctx.cluster.run_shared(FINETUNE, nodes=launch.nodes, args=args, exclusive=True, **options)


def _part(ctx: Ctx, strategy: str, launch: FinetuneLaunch) -> Part:
    """The launch as one strategy sees it (``launch_part``: a stopped launch's finished and unfinished ranks);
    skipped where its GPUs declared it not applicable (memory too small for a 7B)."""
    hang_s = ctx.cluster.limit(FINETUNE, _args(ctx, launch), launch.gpus_per_task).hang_s
    part = launch_part(lambda: _launch(ctx, launch), strategy, hang_s, partial(stage_records, FINETUNE))
    if part.absent:
        pytest.skip(part.absent)
    return part


def _launch_figures(ctx: Ctx, strategy: str, launch: FinetuneLaunch, part: Part) -> None:
    """The launch's wall time and where it went, recorded once per launch by the case of its first strategy (a
    launch that did not end: its step's limit, wall and ratio are on the record)."""
    if launch.first(strategy) and not part.why:
        record_launch(ctx.judge, part.result.records, part.result.duration_s, launch.strategies)


def _report(runs: list[RankRun], run: str, step_s: float, curves: bool = True) -> None:
    """The run's lines in the captured output, and its loss curve and comparison in the report."""
    print_summary(run, step_s, runs, label)
    lifecycle = runs[0].trained["lifecycle"]
    if curves and lifecycle is not None:
        paths = artifacts(Path(lifecycle["history_json"]).parent, title=run, target=TARGET_LOSS)
        attach.files(paths, run)
        print(f"{run}: report files " + ", ".join(str(p) for p in paths))


def _check_solo(launch: FinetuneLaunch, ctx: Ctx) -> None:
    """Every GPU's own fine-tune, measured at the same time on every GPU, one rank per GPU: no GPU is
    shared, and the node's GPUs run under the power and cooling they share in real use."""
    part = _part(ctx, "solo", launch)
    _launch_figures(ctx, "solo", launch, part)
    if judge_own_runs(ctx.judge, launch.shape, part, ctx.storage, ctx.settings.model_path):
        # a one-GPU node: its own run is the run with the lifecycle (DDP/FSDP do not apply)
        _report(part.runs, launch.folder("solo"), part.result.duration_s, curves=launch.ranks == 1)


def _check_run(strategy: str, launch: FinetuneLaunch, ctx: Ctx) -> None:
    """DDP or FSDP across the launch's ranks; FSDP's memory is held against DDP's of the same shape."""
    part = _part(ctx, strategy, launch)
    _launch_figures(ctx, strategy, launch, part)
    if not judge_across_ranks(ctx.judge, launch.shape, strategy, part, ctx.settings.model_path):
        return
    ddp = ddp_of(_part(ctx, "ddp", launch)) if launch.holds_fsdp_to_ddp(strategy) else None
    _report(part.runs, f"{launch.folder(strategy)} ({launch.scope})", part.result.duration_s)
    judge_run(ctx.judge, launch.shape, strategy, part.runs, part.result.duration_s, ddp, part.why)


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
    solo = SoloRuns()
    for node in ctx.cluster.nodes:
        launch = _planned(ctx, "node", (node,), profile)
        solo.add(node, launch.judged_as, partial(_part, ctx, "solo", launch))
    if why := solo.judge(ctx.judge, fingerprints.get):
        pytest.skip(why)


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
