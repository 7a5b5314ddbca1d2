"""What one fine-tune launch trains, on which nodes, with which arguments: the plan the training tests ask for.

One launch of the ``finetune`` probe per shape pays start-up once (torch, transformers, peft, NCCL: 10-17 s on
the H100/H200 hosts) and trains every strategy of the shape in one process group. A node's launch trains every
GPU alone first (``solo``, while no collective has touched the GPUs), then DDP and FSDP across the node; a
one-rank node only its GPU alone (DDP and FSDP need two ranks); the multi-node launch DDP and FSDP across every
allocated node. On CPU nodes a few gloo ranks stand in for GPUs.

Why here and not in the test: the plan is pure arithmetic on what the cluster declares (GPUs per node) and
what the session was given (``--model-path``, ``--dataset``), so a selftest holds it without a cluster
(``tests/selftest/test_training_launch_plan.py``), and the test body only says what to run, where, and which
judge reads it. The judging side (``gpuaccept.verdicts.training.LaunchShape``, the floors in
``gpuaccept.verdicts.launch_time``) reads the plan's ``judged_as``, ``scope``, ``ranks`` and ``gpu_run``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from gpuaccept.contracts.finetune import FinetuneNotRun, FinetunePayload, FinetuneRun, RankRun, RunOrNot
from gpuaccept.contracts.records import RankRecord
from gpuaccept.errors import MeasurementError, ProbeTimeout
from gpuaccept.training.budget import LaunchPlan, plan_arg
from gpuaccept.training.watch import Key, RankStand, stands

__all__ = [
    "CPU_RANKS_PER_NODE",
    "NODE_STRATEGIES",
    "PROFILES",
    "STRATEGIES",
    "FinetuneLaunch",
    "LaunchShape",
    "Part",
    "launch_absent",
    "launch_part",
    "launch_payload",
    "not_applicable",
    "plan_launch",
    "stage_runs",
    "strategy_records",
]

Scope = Literal["node", "multinode"]
#: "default" (the built-in small model, or the --model-path checkpoint) or "scale" (the built-in 7B-class)
Profile = Literal["default", "scale"]
#: whose limits judge a launch: the built-in small model's, the built-in 7B's, a --model-path checkpoint's
JudgedAs = Literal["small", "scale", "pretrained"]

#: the strategies trained across ranks (the node's and the multi-node launch's)
STRATEGIES: tuple[str, ...] = ("ddp", "fsdp")
#: what one node's launch trains: every GPU alone first, then the node-wide strategies
NODE_STRATEGIES: tuple[str, ...] = ("solo", *STRATEGIES)
#: the two models the training tests run, each judged by its own limits
PROFILES: tuple[Profile, ...] = ("default", "scale")
#: gloo ranks per node when the node declares no GPU: enough to exercise intra-node collectives next to
#: inter-node ones, few enough for CI's 2-core loopback cluster (one torch thread per rank).
CPU_RANKS_PER_NODE = 2


@dataclass(frozen=True)
class LaunchShape:
    """What the judging needs to know of a launch."""

    #: small (built-in small model), scale (built-in 7B-class), pretrained (a --model-path checkpoint)
    profile: str
    #: node (every GPU of one node) or multinode (every GPU of every node)
    scope: str
    ranks: int
    gpu_run: bool

    def metric(self, name: str) -> str:
        """The profile's own limit for ``name``: each profile's limits were measured on (or, for
        ``--model-path``, contracted for) that model."""
        return name if self.profile == "small" else name.replace("train_", f"train_{self.profile}_", 1)

    @property
    def serves(self) -> bool:
        """Whether each GPU then serves the adapter it trained (the 7B-class and checkpoint runs on GPUs; the
        small model's decode times kernel launches, not HBM)."""
        return self.gpu_run and self.profile != "small"

    def speed_metric(self, strategy: str) -> str:
        """Tokens/s for the small model (its limits were measured on it), MFU for the 7B-class runs."""
        if self.profile == "small":
            return f"train_tokens_per_s_per_gpu_{strategy}" + ("" if strategy == "solo" else f"_{self.scope}")
        suffix = "" if strategy == "solo" else f"_{strategy}_{self.scope}"
        return ("train_pretrained_mfu_pct" if self.profile == "pretrained" else "train_mfu_pct") + suffix


@dataclass(frozen=True)
class FinetuneLaunch:
    """One launch: every GPU of one node (``scope`` "node") or of every node (``multinode``)."""

    scope: Scope
    nodes: tuple[str, ...]
    tasks_per_node: int
    #: 1 on GPU nodes (one rank per GPU), 0 on CPU nodes (gloo ranks)
    gpus_per_task: int
    profile: Profile
    judged_as: JudgedAs

    @property
    def ranks(self) -> int:
        return self.tasks_per_node * len(self.nodes)

    @property
    def gpu_run(self) -> bool:
        return self.gpus_per_task > 0

    @property
    def shape(self) -> LaunchShape:
        """Whose limits judge the launch, as the judges read it."""
        return LaunchShape(self.judged_as, self.scope, self.ranks, self.gpu_run)

    @property
    def strategies(self) -> list[str]:
        """A node trains every GPU alone, then DDP and FSDP; a one-rank node only its GPU alone (DDP and
        FSDP need two ranks); the multi-node launch DDP and FSDP."""
        if self.scope != "node":
            return list(STRATEGIES)
        return list(NODE_STRATEGIES) if self.ranks > 1 else ["solo"]

    @property
    def lifecycle(self) -> bool:
        """Whether the launch runs the lifecycle (save, restore, resume): a one-GPU node's own run does, and
        every launch that trains a strategy across ranks."""
        return self.ranks == 1 or self.strategies != ["solo"]

    def first(self, strategy: str) -> bool:
        """Whether ``strategy`` is the launch's first: its case records the launch's wall time, once."""
        return strategy == self.strategies[0]

    def holds_fsdp_to_ddp(self, strategy: str) -> bool:
        """Whether ``strategy``'s memory is held against DDP's of the same launch: FSDP on two GPUs or more."""
        return strategy == "fsdp" and self.gpu_run and self.ranks > 1

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
        return f"{self._tag}{self.ranks}r-{{node}}" if self.scope == "node" else self.folder()

    def args(
        self,
        reports: Path,
        *,
        model_path: Path | None,
        dataset: Path | None,
        plan: LaunchPlan | None,
        checkpoints: str | None = None,
        models: str | None = None,
        scratch: str | None = None,
    ) -> list[str]:
        """The probe's arguments: its strategies, where it writes (under ``reports``/training), its model and
        data, its plan (``--plan``: the spec's limit and the floor a GPU's own run must reach), where rank
        0's own run saves its resumable checkpoint (a folder of ``checkpoints``, the site's checkpoint
        filesystem; else the run folder), and where the merged weights are saved and cold-started from (a
        folder of ``models``, the site's models filesystem, then of ``scratch``, its node-local scratch)."""
        args = ["--strategy", ",".join(self.strategies), "--out", str(reports / "training" / self.out())]
        if "solo" in self.strategies:
            for option, root, sub in (
                ("--checkpoint-dir", checkpoints, "resume"),
                ("--models-dir", models, "served"),
                ("--scratch-dir", scratch if models else None, "served"),
            ):
                if root:  # a folder each: the models filesystem may be the checkpoint filesystem
                    args += [option, f"{root.rstrip('/')}/{self.out()}/{sub}"]
        if self.profile == "scale":
            args += ["--profile", "scale"]
        if model_path:
            args += ["--model-path", str(model_path)]
        if dataset:
            args += ["--dataset", str(dataset)]
        if plan is not None:
            args += plan_arg(plan)
        return args


def plan_launch(
    scope: Scope, nodes: Sequence[str], gpus: int, profile: Profile, model_path: Path | None
) -> FinetuneLaunch:
    """The launch of ``profile`` on ``nodes``, ``gpus`` the fewest GPUs any of them declares: one rank per GPU,
    else ``CPU_RANKS_PER_NODE`` gloo ranks."""
    judged_as: JudgedAs = "scale" if profile == "scale" else "pretrained" if model_path else "small"
    return FinetuneLaunch(scope, tuple(nodes), gpus or CPU_RANKS_PER_NODE, 1 if gpus else 0, profile, judged_as)


def launch_absent(launch: FinetuneLaunch, model_path: Path | None) -> str | None:
    """Why the launch does not apply, or None: the 7B-class run needs GPUs, and a ``--model-path``
    checkpoint is itself the real-scale run."""
    if launch.profile != "scale":
        return None
    if model_path:
        return "not applicable: --model-path given: the checkpoint is the real-scale fine-tune"
    if not launch.gpu_run:
        return f"not applicable: the 7B-class fine-tune needs GPUs; {', '.join(launch.nodes)} declares none"
    return None


def launch_payload(record: RankRecord) -> FinetunePayload:
    """The rank's result as the fine-tune's contract types it: as it arrived (``Cluster`` validated it against the
    spec), or validated here (a record made by hand)."""
    if isinstance(record.payload, FinetunePayload):
        return record.payload
    return FinetunePayload.model_validate(record.data)


def not_applicable(records: Iterable[RankRecord]) -> str | None:
    """What the GPUs themselves declared not applicable (memory too small for a 7B-class model), or None."""
    absent = set()
    for record in records:
        payload = launch_payload(record).root
        if payload["outcome"] == "not_applicable":
            absent.add(payload["not_applicable"])
    return f"not applicable: {'; '.join(sorted(absent))}" if absent else None


def strategy_records(records: Iterable[RankRecord], strategy: str) -> list[RankRun]:
    """Each rank's run of ``strategy``: the launch's records hold every strategy's under ``strategies`` (a launch of
    one strategy at the top level); a rank without that run could not be measured."""
    out = []
    for record in records:
        payload = launch_payload(record).root
        runs: dict[str, FinetuneRun | FinetuneNotRun] = {}
        if payload["outcome"] == "strategies":
            launched = payload["strategies"]
            runs = {name: run for name in ("solo", "ddp", "fsdp") if (run := launched[name]) is not None}  # type: ignore[literal-required]
        elif payload["outcome"] == "run":
            runs = {payload["strategy"]: payload}
        if strategy not in runs:
            raise MeasurementError(
                f"{record.node} rank {record.rank}: the finetune result holds no {strategy} run "
                f"(has {sorted(runs) or 'none'})",
                nodes=(record.node,),
            )
        out.append(RankRun(record, runs[strategy]))
    return out


_RUN: TypeAdapter[FinetuneRun | FinetuneNotRun] = TypeAdapter(RunOrNot)


def stage_runs(records: Iterable[RankRecord]) -> list[RankRun]:
    """The runs a stopped launch sent as each strategy finished (``dispatch.result.stage_records``), each held to
    the contract of one strategy's run: a stage that is not one is an ERROR naming the field, like a result."""
    out = []
    for record in records:
        try:
            out.append(RankRun(record, _RUN.validate_python(record.data)))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(stage)"
            why = f"probe finetune: {record.node} rank {record.rank}: stage is not a run: field {field}: {first['msg']}"
            raise MeasurementError(why, nodes=(record.node,)) from None
    return out


@dataclass(frozen=True)
class Part:
    """One strategy's share of a launch: the step's result (``dispatch.result.ProbeResult``) and the records of the
    ranks that finished the strategy, and, when the launch was stopped before it ended, where each other rank stood
    and why it was stopped; ``absent``: why the launch does not apply, as its GPUs declared it (memory too small for
    a 7B-class model)."""

    result: Any
    runs: list[RankRun]
    unfinished: dict[Key, RankStand]
    why: str = ""
    absent: str | None = None


def launch_part(
    run: Callable[[], Any], strategy: str, hang_s: float, stages: Callable[[str, str], list[RankRecord]]
) -> Part:
    """The launch's result (``run``) as seen by one strategy: each rank's record holds that strategy's figures. A
    launch stopped at its limit (or earlier, by its ranks' progress) keeps what its ranks sent as each strategy
    finished (``stages``: the stage records of a stopped step's output, ``dispatch.result.stage_records`` of the
    spec); the ranks that had not finished this one are handed back with where they stood (silent for ``hang_s``,
    the step's hang time: hung). Area code: the step's types are the launch layer's, handed in."""
    try:
        result = run()
    except ProbeTimeout as exc:
        stopped = getattr(exc, "result", None)
        if stopped is None:
            raise
        records = stages(stopped.stdout, strategy)
        done = {(r.node, r.rank) for r in records}
        left = {
            key: stand for key, stand in stands(stopped.stdout, stopped.ended_at, hang_s).items() if key not in done
        }
        return Part(replace(stopped, records=records), stage_runs(records), left, str(exc))
    if why := not_applicable(result.records):
        return Part(result, [], {}, absent=why)
    return Part(result, strategy_records(result.records, strategy), {})
