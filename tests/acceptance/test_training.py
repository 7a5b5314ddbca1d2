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
built-in small model (``default``; or the ``--model-path`` checkpoint, by the seeds' contract) and the
built-in 7B-class model at the GPU's speed (``scale``; GPUs with the memory for it), judged by MFU.
Every run is judged on its losses, lockstep, speed, utilisation, DDP replicas, FSDP shards and memory,
and the seeds' lifecycle; loss curve and comparison JSON go to the report.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.dispatch.result import ProbeResult, RankRecord, stage_records
from gpuaccept.errors import MeasurementError, ProbeTimeout
from gpuaccept.judging.trajectory import Trajectory
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.report.charts.loss import artifacts
from gpuaccept.timelimits import TimeLimit
from gpuaccept.training.report import TARGET_LOSS, print_summary
from gpuaccept.verdicts.inference import AGREEMENT, SERVING, Served
from gpuaccept.verdicts.progress import RankStand, judge_unfinished_ranks, planned_limit, solo_floor, stands
from gpuaccept.verdicts.resume import RESUME_METRICS, checkpoint_filesystem, judge_resume
from gpuaccept.verdicts.training import (
    LIFECYCLE,
    LOSS_FIGURES,
    SCALE_LIFECYCLE,
    SCALE_SOLO,
    Shape,
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

STRATEGIES = ["ddp", "fsdp"]
#: what one node's launch trains: every GPU alone first (while no collective has touched the GPUs), then
#: the node-wide strategies; start-up (torch, transformers, peft, NCCL: 10-17 s on the H100/H200 hosts)
#: is paid once for all three.
NODE_STRATEGIES = ["solo", *STRATEGIES]
#: gloo ranks per node when the node declares no GPU: enough to exercise intra-node collectives next to
#: inter-node ones, few enough for CI's 2-core loopback cluster (one torch thread per rank).
CPU_RANKS_PER_NODE = 2
#: this run's folder name on the site's checkpoint filesystem: a checkpoint an earlier run left is not this run's
RUN_TOKEN = uuid.uuid4().hex[:12]


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
    storage: Any


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


def _launch(ctx: Ctx, scale: Scale) -> ProbeResult:
    """One launch per shape trains every strategy of the shape in one process group (start-up paid once);
    every case of the shape reads it (``cluster.run_shared``). Its time limit follows from its plan at the
    floors of the first node's SKU (``gpuaccept.verdicts.progress.planned_limit``)."""
    cluster, settings, rootdir = ctx.cluster, ctx.settings, ctx.rootdir
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
    if "solo" in scale.strategies and (declared := checkpoint_filesystem(ctx.storage)) is not None:
        # rank 0's own run saves its resumable checkpoint where the site keeps checkpoints (else in the run folder)
        args += ["--checkpoint-dir", f"{declared[1].path}/gpuaccept-finetune-{RUN_TOKEN}/{scale.out()}"]
    if "solo" in scale.strategies and len(scale.strategies) > 1:
        # a GPU whose own run is below its floor fails by it; the node-wide runs would only repeat its pace
        floor = solo_floor(ctx.judge, _shape(ctx, scale), scale.nodes[0], settings.model_path)
        args += ["--solo-floor", str(floor)] if floor else []
    return cluster.run_shared(
        FINETUNE,
        nodes=scale.nodes,
        tasks_per_node=scale.tasks_per_node,
        gpus_per_task=scale.gpus_per_task,
        args=args,
        exclusive=True,
        limit=_limit(ctx, scale),
    )


def _limit(ctx: Ctx, scale: Scale) -> TimeLimit | None:
    """The launch's time limit from its plan at the floors of its first node's SKU (None: no floor to plan
    with, the probe's declared limit applies)."""
    shape = _shape(ctx, scale)
    return planned_limit(
        ctx.judge,
        shape,
        scale.nodes[0],
        scale.strategies,
        model_path=ctx.settings.model_path,
        lifecycle=scale.ranks == 1 or scale.strategies != ["solo"],
        serving=shape.serves,
    )


@dataclass(frozen=True)
class Part:
    """One strategy's share of a launch: the records of the ranks that finished it, and, when the launch was
    stopped before it ended, where each other rank stood and why it was stopped."""

    result: ProbeResult
    unfinished: dict[tuple[str, int], RankStand]
    why: str = ""


def _finetune(ctx: Ctx, strategy: str, scale: Scale) -> Part:
    """The launch's result as seen by one strategy: each rank's record holds that strategy's figures. A launch
    stopped at its limit (or earlier, by its ranks' progress) keeps what its ranks sent as each strategy
    finished; the ranks that had not finished this one are handed back with where they stood."""
    try:
        launch = _launch(ctx, scale)
    except ProbeTimeout as exc:
        stopped = getattr(exc, "result", None)
        if stopped is None:
            raise
        records = stage_records("finetune", stopped.stdout, strategy)
        done = {(r.node, r.rank) for r in records}
        planned = _limit(ctx, scale)
        hang_s = ctx.cluster.timeout_rule.apply(planned).hang_s if planned else TimeLimit(0, "").hang_s
        everyone = stands(stopped.stdout, stopped.ended_at, hang_s)
        left = {key: stand for key, stand in everyone.items() if key not in done}
        return Part(replace(stopped, records=records), left, str(exc))
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
    return Part(replace(launch, records=records), {})


def _unfinished(ctx: Ctx, part: Part, strategy: str, scale: Scale) -> None:
    """Every rank that had not finished ``strategy`` when its launch was stopped: FAILED by its progress bound
    where that proves it below the floor, else unreadable naming where it stood."""
    judge_unfinished_ranks(ctx.judge, _shape(ctx, scale), strategy, part.unfinished, ctx.settings.model_path, part.why)


def _launch_figures(strategy: str, scale: Scale, ctx: Ctx) -> None:
    """The launch's wall time and where it went (start-up, set-up, warm-up, timed steps, checkpoints,
    lifecycle, teardown), recorded once per launch by the case of its first strategy."""
    if strategy != scale.strategies[0]:
        return
    try:
        result = _launch(ctx, scale)
    except MeasurementError:  # a launch that did not end: its step's limit, wall and ratio are on the record
        return
    phases = result.records[0].data.get("phases") or {}
    print(
        f"{scale.folder()}: step {result.duration_s:.1f} s; rank 0 phases "
        + ", ".join(f"{k}={v}" for k, v in phases.items())
    )
    record_launch(ctx.judge, result.records, result.duration_s, scale.strategies)


def _shape(ctx: Ctx, scale: Scale) -> Shape:
    """Whose limits judge the launch: the built-in small model's, the built-in 7B's, or a ``--model-path``
    checkpoint's (the seeds' contract)."""
    profile = "scale" if scale.profile == "scale" else "pretrained" if ctx.settings.model_path else "small"
    return Shape(profile, scale.name, scale.ranks, scale.gpus_per_task > 0)


def _report(records: list[RankRecord], run: str, step_s: float) -> None:
    """The run's lines in the captured output, and its loss curve and comparison in the report."""
    print_summary(run, step_s, records, label)
    data0 = records[0].data
    if data0.get("history_json"):
        paths = artifacts(Path(data0["history_json"]).parent, title=run, target=TARGET_LOSS)
        _attach(paths, run)
        print(f"{run}: report files " + ", ".join(str(p) for p in paths))


def _check_solo(scale: Scale, ctx: Ctx) -> None:
    """Every GPU's own fine-tune, measured at the same time on every GPU, one rank per GPU: no GPU is
    shared, and the node's GPUs run under the power and cooling they share in real use."""
    part = _finetune(ctx, "solo", scale)
    result = part.result
    _launch_figures("solo", scale, ctx)
    shape = _shape(ctx, scale)
    _unfinished(ctx, part, "solo", scale)
    if not result.records:
        return
    judge_each_gpu(ctx.judge, shape, result.records, part.why)
    if part.why:
        return
    first = min(result.records, key=lambda r: r.rank)  # rank 0 saved its own run's checkpoint and resumed it
    judge_resume(first.data.get("checkpoint"), checkpoint_filesystem(ctx.storage), ctx.judge, first.node)
    if scale.ranks == 1:  # a one-GPU node: its own run is the run with the lifecycle (DDP/FSDP do not apply)
        _report(result.records, scale.folder("solo"), result.duration_s)
    else:
        print_summary(scale.folder("solo"), result.duration_s, result.records, label)


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
    """DDP or FSDP across the launch's ranks; FSDP's memory is held against DDP's of the same shape."""
    part = _finetune(ctx, strategy, scale)
    result = part.result
    _launch_figures(strategy, scale, ctx)
    _unfinished(ctx, part, strategy, scale)
    if part.unfinished or not result.records:  # a run across ranks is judged whole or not at all
        return
    if judge_not_trained(ctx.judge, _shape(ctx, scale), strategy, result.records):
        return  # a GPU's own run was below its floor: this strategy was not trained, and why
    ddp: list[RankRecord] | MeasurementError | None = None
    if strategy == "fsdp" and scale.gpus_per_task and scale.ranks > 1:
        earlier = _finetune(ctx, "ddp", scale)
        ddp = earlier.result.records if not earlier.unfinished else MeasurementError(f"DDP did not finish: {part.why}")
    _report(result.records, f"{scale.folder(strategy)} ({scale.name})", result.duration_s)
    judge_run(ctx.judge, _shape(ctx, scale), strategy, result.records, result.duration_s, ddp, part.why)


@pytest.fixture()
def ctx(cluster, settings, judge, request, thresholds) -> Ctx:
    return Ctx(cluster, settings, judge, Path(request.config.rootpath), thresholds.storage)


PROFILES = ["default", "scale"]


@pytest.mark.judges(
    *LOSS_FIGURES,
    "train_tokens_per_s_per_gpu_solo",
    "train_gpu_util_pct",
    *SCALE_SOLO,
    *SCALE_LIFECYCLE,
    *SERVING,
    *RESUME_METRICS,
)
@pytest.mark.parametrize("profile", PROFILES)
def test_finetune_each_gpu(node, profile, ctx):
    """Every GPU of the node fine-tuned alone, all at once (gloo ranks on a CPU node), each judged by itself:
    the built-in small model (or the --model-path checkpoint), and the built-in 7B-class model at the
    GPU's speed (``scale``: GPUs with the memory for it)."""
    _check_solo(_profiled(ctx, "node", (node,), profile), ctx)


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
    _check_run(strategy, _profiled(ctx, "node", (node,), profile), ctx)


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
    runs: list[Trajectory] = []
    served: list[Served] = []
    failed: list[str] = []
    unmeasured: dict[str, str] = {}
    judged_as = "small"
    for node in ctx.cluster.nodes:
        scale = _profiled(ctx, "node", (node,), profile)
        judged_as = _shape(ctx, scale).profile
        try:
            part = _finetune(ctx, "solo", scale)
        except MeasurementError as exc:  # that node is named; the others are still judged
            failed.append(node)
            unmeasured[node] = str(exc)
            continue
        result = part.result
        if part.unfinished:  # the GPUs that finished still agree or not; the others are named by their test
            failed.append(node)
        for record in result.records:
            losses = tuple(float(v) for v in record.data["losses"])
            runs.append(Trajectory(record.node, label(record), losses, record.data.get("checksum"), judged_as))
            if "decode_1" in (record.data.get("serving") or {}):  # 7B-class on GPUs: each GPU served its adapter
                served.append(Served.of(record, label(record) or str(record.rank)))
            if record.data.get("test_hook"):
                print(f"TEST HOOK on {record.node} {label(record)}: {record.data['test_hook']}")
    prints = {node: fingerprints.get(node) for node in sorted({r.node for r in runs})}
    judged = judge_fleet_agreement(ctx.judge, runs, served, prints, judged_as, unmeasured)
    if not runs:
        return  # every node's launch failed: each is recorded unreadable
    if not judged and not failed:
        alone = ", ".join(sorted({f"{r.where}" for r in runs}))
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
    """Every GPU of every allocated node (the fabric under real training, as the seeds' 16-GPU run)."""
    # on the nodes still alive; a node lost during the launch: launched again on the survivors (the
    # launch is shared by DDP and FSDP, keyed by its nodes), fewer than 2 left: skipped naming the loss
    scale = ctx.cluster.across_nodes(
        lambda live: _launched(ctx, _profiled(ctx, "multinode", tuple(live), profile)),
        what="a multi-node fine-tune",
    )
    _check_run(strategy, scale, ctx)


def _launched(ctx: Ctx, scale: Scale) -> Scale:
    """The shape once its launch has run (a lost node raises here, inside ``across_nodes``)."""
    _launch(ctx, scale)
    return scale
